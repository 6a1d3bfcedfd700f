"""Who may steer the orchestrator through its inbox (`nika:orchestrator:inbox`).

ORCHESTRATE, ADAPT and ABORT change runs, so a message is obeyed only when it comes from:
- the operator: signed with the pinned operator key (`nika-brain bus publish --sign`), kind "inbox",
  over every field of the message but the signature (a nonce in each makes two signed messages
  differ);
- nika-brain itself: the ORCHESTRATE a finished step's trigger posts, accepted only when the run it
  names as its origin (`context.from`) did record that trigger (`context.triggered`) — the message
  is a reference to the run's state, not an order of its own.
Anything else (a `bus publish` from an agent's shell, a row written into the bus's store, a Redis
XADD) is ignored and reported. A malformed message is refused the same way; the listener
acknowledges and journals it and applies the rest of its batch.
"""
from __future__ import annotations

from typing import Any

from nika_brain.brain import Brain
from nika_brain.bus.codec import MALFORMED
from nika_brain.errors import BrainError

KINDS = ("ORCHESTRATE", "ADAPT", "ABORT")
SIGNED_KIND = "inbox"


def sign(brain: Brain, message: dict) -> dict:
    """The operator's message, signed (refused where the operator key is not readable)."""
    import secrets

    from nika_brain.state import authority
    body = {k: v for k, v in message.items() if k != "signature"}
    body.setdefault("nonce", secrets.token_hex(8))
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
        if authority.verify(brain, SIGNED_KIND, body, signature):
            return None
        return f"{kind} with a signature that is not the operator's (forged, or edited after signing)"
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
