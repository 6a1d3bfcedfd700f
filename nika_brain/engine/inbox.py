"""Who may steer the orchestrator through its inbox (`nika:orchestrator:inbox`).

ORCHESTRATE, ADAPT and ABORT change runs, so a message is obeyed only when it comes from:
- the operator: signed with the pinned operator key (`nika-brain bus publish --sign`), kind "inbox",
  over every field of the message but the signature, which include a nonce and the signing time;
  a signed message is applied once: its nonce is journaled (`.nika/guarded/inbox-nonces`, out of
  every agent's reach) before it is applied, the same message published again is refused as a
  replay, and one signed more than MAX_AGE ago (its nonce forgotten by then) is refused as expired;
- nika-brain itself: the ORCHESTRATE a finished step's trigger posts, accepted only when the run it
  names as its origin (`context.from`) did record that trigger (`context.triggered`) — the message
  is a reference to the run's state, not an order of its own.
Anything else (a `bus publish` from an agent's shell, a row written into the bus's store, a Redis
XADD) is ignored and reported. A malformed message is refused the same way; the listener
acknowledges and journals it and applies the rest of its batch.
"""
from __future__ import annotations

import re
from typing import Any

from nika_brain.brain import Brain
from nika_brain.bus.codec import MALFORMED
from nika_brain.errors import BrainError

KINDS = ("ORCHESTRATE", "ADAPT", "ABORT")
SIGNED_KIND = "inbox"
MAX_AGE = 7 * 86400.0        # a signed message older than this is refused (its nonce is forgotten)
MAX_SKEW = 300.0             # signed this far in the future at most (clocks of two machines)
NONCES = "inbox-nonces"      # under Brain.guarded_dir: `<signed_at> <nonce>` per applied message
_NONCE = re.compile(r"[0-9a-f]{16,64}")


def sign(brain: Brain, message: dict) -> dict:
    """The operator's message, signed (refused where the operator key is not readable)."""
    import secrets

    from nika_brain.state import authority
    body = {k: v for k, v in message.items() if k != "signature"}
    from nika_brain.support import clock
    body.setdefault("nonce", secrets.token_hex(16))
    body.setdefault("signed_at", clock.iso(clock.now()))
    return {**body, "signature": authority.sign(brain, SIGNED_KIND, body,
                                                 what="signing an orchestrator message")}


def refusal(brain: Brain, message: Any) -> str | None:
    """Why this inbox message must not be obeyed, or None when it may."""
    if not isinstance(message, dict):
        return "not a JSON object"
    if MALFORMED in message:
        return f"malformed ({message[MALFORMED]})"
    kind = message.get("type") or message.get("signal")
    if kind not in KINDS:
        return f"unknown signal {kind!r} ({', '.join(KINDS)})"
    if not isinstance(message.get("workflow"), str) or not message.get("workflow"):
        return f"{kind} without a workflow"
    signature = message.get("signature")
    if signature is not None:
        from nika_brain.state import authority
        body = {k: v for k, v in message.items() if k != "signature"}
        if not authority.verify(brain, SIGNED_KIND, body, signature):
            return f"{kind} with a signature that is not the operator's (forged, or edited after signing)"
        return _stale(message)
    if kind == "ORCHESTRATE" and _recorded_trigger(brain, message):
        return None
    return (f"{kind} {message.get('workflow')} is not signed by the operator nor a trigger a run "
            "recorded; ignored")


def _recorded_trigger(brain: Brain, message: dict) -> bool:
    from nika_brain.state import runs
    context = message.get("context")
    origin = context.get("from") if isinstance(context, dict) else None
    if not isinstance(origin, str) or set(context) - {"from"}:
        return False
    try:
        run = runs.load_run(brain, origin)
    except BrainError:
        return False
    target = f"{message.get('workflow')}/{message.get('step')}"
    return run is not None and target in (run.context.get("triggered") or [])


def _stale(message: dict) -> str | None:
    """Why a message the operator signed is not fresh (no nonce, no time, expired), else None."""
    from nika_brain.support import clock
    kind, nonce, at = message.get("type") or message.get("signal"), message.get("nonce"), message.get("signed_at")
    if not isinstance(nonce, str) or not _NONCE.fullmatch(nonce) or not isinstance(at, str):
        return f"{kind} signed without a nonce and a signing time (sign it again: `bus publish --sign`)"
    try:
        age = (clock.now() - clock.parse(at)).total_seconds()
    except BrainError:
        return f"{kind} with an unreadable signing time {at[:40]!r}"
    if age > MAX_AGE or age < -MAX_SKEW:
        return f"{kind} signed at {at}: expired (a signed message is valid for {MAX_AGE / 86400:g} days)"
    return None


def once(brain: Brain, message: dict) -> str | None:
    """Journal a signed message's nonce before it is applied; why not, when it was applied before
    (a replay) or the journal cannot be written (an agent's sandbox: then it is not applied at all).
    Unsigned messages (a recorded trigger) are references to a run's state: not journaled."""
    if message.get("signature") is None:
        return None
    from nika_brain.support import clock, fsio
    kind, nonce = message.get("type") or message.get("signal"), str(message["nonce"])
    path = brain.guarded_dir / NONCES
    now = clock.now()
    try:
        with brain.mutex("inbox-nonces"):
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except FileNotFoundError:
                lines = []
            if any(line.partition(" ")[2] == nonce for line in lines):
                return f"{kind} {message.get('workflow')}: a replay (this signed message was applied already)"
            keep = []
            for line in lines:   # forget what has expired: such a message is refused anyway
                try:
                    if (now - clock.parse(line.partition(" ")[0])).total_seconds() <= MAX_AGE + MAX_SKEW:
                        keep.append(line)
                except BrainError:
                    continue
            keep.append(f"{message['signed_at']} {nonce}")
            path.parent.mkdir(parents=True, exist_ok=True)
            fsio.atomic_write(path, "\n".join(keep) + "\n", fsync=brain.config.fsync)
    except OSError as exc:
        return f"{kind}: its nonce cannot be journaled ({path}: {exc.strerror or exc}); not applied"
    return None
