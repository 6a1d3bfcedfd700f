"""A kernel's prompt queue: `kernels/<id>/queue.jsonl`, append-only.

Every prompt given to `kernel invoke` is queued first, then handed to the agent ("sent"); it leaves
the queue only when the agent has taken it (its UserPromptSubmit hook fired with that text). A prompt
for a dead kernel stays queued and is delivered when the kernel runs again. One the agent did not
take in time (busy with a long turn) stays "sent": the supervisor confirms it when the agent takes
it, and never types it twice; a restart sends it again. Lines: {"id", "at", "prompt", "by"} to
queue, {"id", "sent": at}, {"id", "resend": at}, {"id", "taken": at} or {"id", "dropped": at,
"reason"}. A prompt queued with "hold": <pid> is delivered by that process itself (`invoke --wait`
types it once the kernel's running turn has ended: its own turn, so its own answer); the redelivery
leaves it alone until {"id", "unhold": at} or that process's end.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.support import clock, fsio
from nika_brain.support.schema import name

MAX_PROMPT = 100_000


def path(brain: Brain, kernel_id: str) -> Path:
    """kernels/<id>/queue.jsonl (the id checked as state.kernels.kernel_dir does; that module is not
    loaded here: the UserPromptSubmit hook's heartbeat counts the queue)."""
    if name(kernel_id or "") is not None:
        raise BrainError(f"not a valid kernel id: {kernel_id!r}")
    return brain.kernels_dir / kernel_id / "queue.jsonl"


def _lines(brain: Brain, kernel_id: str) -> list[dict]:
    try:
        with open(path(brain, kernel_id), encoding="utf-8") as fh:
            raw = fh.readlines()
    except FileNotFoundError:
        return []
    return [obj for obj in fsio.json_objects(raw) if isinstance(obj.get("id"), str)]


def _append(brain: Brain, kernel_id: str, obj: dict) -> None:
    p = path(brain, kernel_id)
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8"))
        if brain.config.fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def check(prompt: object) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise BrainError("a prompt cannot be empty")
    if len(prompt) > MAX_PROMPT:
        raise BrainError(f"a prompt is at most {MAX_PROMPT} characters")
    return prompt


def enqueue(brain: Brain, kernel_id: str, prompt: str, *, by: str, hold: bool = False) -> dict:
    """Queue a prompt; with `hold` this process delivers it itself (the redelivery leaves it to it
    until `settle(..., "unhold")` or this process ends)."""
    check(prompt)
    with brain.mutex(f"queue-{kernel_id}"):
        n = sum(1 for x in _lines(brain, kernel_id) if "prompt" in x) + 1
        item = {"id": f"q{n}", "at": clock.iso(clock.now()), "prompt": prompt, "by": by,
                **({"hold": os.getpid()} if hold else {})}
        _append(brain, kernel_id, item)
    return item


def settle(brain: Brain, kernel_id: str, item_id: str, how: str = "taken", reason: str = "") -> None:
    obj = {"id": item_id, how: clock.iso(clock.now())}
    if reason:
        obj["reason"] = reason
    with brain.mutex(f"queue-{kernel_id}"):
        _append(brain, kernel_id, obj)


def pending(brain: Brain, kernel_id: str) -> list[dict]:
    """Prompts not yet taken, oldest first; an item handed to the agent but not acknowledged yet
    carries "sent" (when), until a restart clears it ("resend")."""
    items: dict[str, dict] = {}
    for x in _lines(brain, kernel_id):
        if "prompt" in x:
            items[x["id"]] = dict(x)
        elif x["id"] not in items:
            continue
        elif "taken" in x or "dropped" in x:
            items.pop(x["id"], None)
        elif "sent" in x:
            items[x["id"]]["sent"] = x["sent"]
        elif "resend" in x:
            items[x["id"]].pop("sent", None)
        elif "hold" in x:
            items[x["id"]]["hold"] = x["hold"]
        elif "unhold" in x:
            items[x["id"]].pop("hold", None)
    return list(items.values())


def held(item: dict) -> bool:
    """Whether the item's invoker (a live process) delivers it itself (queued with hold)."""
    from nika_brain.support import procs
    return procs.alive(item.get("hold"))


def unsent(brain: Brain, kernel_id: str) -> list[dict]:
    """What may be handed to the agent: typed into a busy agent's terminal, a prompt is waiting
    there, and sending it again would run it twice."""
    return [x for x in pending(brain, kernel_id) if "sent" not in x and not held(x)]


def reset_sent(brain: Brain, kernel_id: str) -> None:
    """After a restart the old process's input is gone: what it had not taken is sent again."""
    for x in pending(brain, kernel_id):
        if "sent" in x:
            settle(brain, kernel_id, x["id"], "resend")
