"""Every `nika-brain ask`, recorded: `.nika/asks/<id>.json` (runtime state, written only by nika-brain).

A record holds the prompt, the triage's decision (kernel | split | fallback, its reason, its highest
scores) and one route per kernel the prompt (or a part of it) went to: kernel, prompt, prompt_id (the
kernel queue's id), status (taken | queued | held | answered | failed: held = its kernel's machine is
lost, the request waits on that machine's stream), the reason of a failure. Answers are kept by reference,
never copied: the route names the kernel, its session and the time of the `answered` event in
`.nika/federation/<kernel>/events.jsonl` (the agent's Stop hook, or the headless result), and
`load_ask` resolves them.

    list_asks(brain) -> list[dict]      newest first, answers resolved
    load_ask(brain, ask_id) -> dict     one record, answers resolved (BrainError when unknown)
"""
from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.support import clock

_ID = re.compile(r"^a-[0-9]{8}T[0-9]{6}-[0-9a-f]{6}$")


def folder(brain: Brain) -> Path:
    return brain.state_dir / "asks"


def new_id() -> str:
    return "a-" + clock.now().strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


def save(brain: Brain, rec: dict) -> dict:
    d = folder(brain)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = d / f"{rec['ask']}.json"
    tmp = path.with_suffix(".json.tmp")
    stored = {**rec, "routes": [{k: v for k, v in r.items() if k != "answer"} for r in rec["routes"]]}
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(stored, fh, ensure_ascii=False, indent=1)
    os.replace(tmp, path)
    return rec


def _answer(brain: Brain, route: dict) -> str | None:
    ref = route.get("answer_ref")
    if not isinstance(ref, dict):
        return None
    from nika_brain.federation.kernels import health
    try:
        events, _ = health.read_events(brain, ref["kernel"], int(ref.get("offset") or 0))
    except (BrainError, KeyError, ValueError, TypeError):
        return None
    for e in events:
        if e.get("event") == "answered" and e.get("session") == ref.get("session") \
                and e.get("at") == ref.get("at"):
            return e.get("text")
    return ref.get("result")  # a headless run's result text has no event to point at


def _held(brain: Brain, route: dict) -> dict:
    """A route held for a lost machine, as it is now: still held, or taken once the machine returned
    and ran it (its reply names the prompt)."""
    if route.get("status") != "held" or not route.get("machine") or not route.get("request"):
        return route
    from nika_brain.federation.kernels import remote
    rep = remote.request_outcome(brain, route["machine"], route["request"])
    if rep is None:
        return route
    if rep.get("ok") and isinstance(rep.get("result"), dict):
        res = rep["result"]
        return {**route, "status": "taken", "prompt_id": res.get("id"), "session": res.get("session"),
                "reason": f"held while machine {route['machine']} was lost, delivered once when it returned"}
    return {**route, "status": "failed", "reason": f"{rep.get('error') or 'failed'} (on machine "
                                                  f"{route['machine']}, after it returned)"}


def resolve(brain: Brain, rec: dict) -> dict:
    rec = dict(rec)
    before = rec.get("routes", [])
    routes = [_held(brain, r) for r in before]
    if routes != before and rec.get("ask"):
        save(brain, {**rec, "routes": routes})  # the reply on the bus expires; the record keeps what it said
    rec["routes"] = [{**r, "answer": _answer(brain, r)} for r in routes]
    return rec


def load_ask(brain: Brain, ask_id: str) -> dict:
    if not isinstance(ask_id, str) or not _ID.match(ask_id):
        raise BrainError(f"not an ask id: {ask_id!r} (like a-20261201T063000-1a2b3c)")
    try:
        rec = json.loads((folder(brain) / f"{ask_id}.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BrainError(f"no ask {ask_id}") from None
    except (OSError, ValueError) as exc:
        raise BrainError(f"ask {ask_id} cannot be read: {exc}") from exc
    return resolve(brain, rec)


def list_asks(brain: Brain) -> list[dict]:
    out = []
    d = folder(brain)
    for p in sorted(d.glob("a-*.json"), reverse=True) if d.is_dir() else []:
        try:
            out.append(resolve(brain, json.loads(p.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            continue
    return out
