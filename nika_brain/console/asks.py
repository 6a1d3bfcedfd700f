"""The Asks page's adapter: each prompt given to a kernel, where it stands and its answer.

Read from what the federation records today: every kernel's queue (`kernels/<id>/queue.jsonl`: the
prompt, who gave it, when) and the agent's own hook events (`taken` with the prompt's hash and its
session, then `answered` with the text). `recent()` is the one function the page calls, so a richer
store of asks (a triage decision and its scores per prompt) plugs in here.
"""
from __future__ import annotations

import os
from typing import Any

from nika_brain.brain import Brain
from nika_brain.federation.kernels import health
from nika_brain.state import prompts
from nika_brain.support import fsio


def _queue(brain: Brain, kernel_id: str) -> list[dict]:
    try:
        with open(prompts.path(brain, kernel_id), encoding="utf-8") as fh:
            return [o for o in fsio.json_objects(fh.readlines()) if isinstance(o.get("id"), str)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def for_kernel(brain: Brain, kernel_id: str) -> list[dict[str, Any]]:
    """The kernel's prompts, newest first, each with its status (queued, sent, taken, answered,
    dropped), its session and its answer."""
    items: dict[str, dict] = {}
    for x in _queue(brain, kernel_id):
        if "prompt" in x:
            items[x["id"]] = {"id": x["id"], "kernel": kernel_id, "at": x.get("at", ""), "by": x.get("by", ""),
                              "prompt": x["prompt"], "status": "queued", "answer": None, "session": None,
                              "triage": None}
        elif x["id"] in items:
            for how in ("dropped", "taken", "sent"):
                if how in x:
                    items[x["id"]]["status"] = how
                    break
    events = health.tail_events(brain, kernel_id)
    for item in items.values():
        sha = health.prompt_sha(item["prompt"])
        taken = next((e for e in events if e.get("event") == "taken" and e.get("sha") == sha), None)
        if taken is None:
            continue
        item.update(status="taken", session=taken.get("session"), taken=taken.get("at"))
        ans = next((e for e in events if e.get("event") == "answered" and e.get("session") == taken.get("session")
                    and e.get("t", 0) >= taken.get("t", 0)), None)
        if ans is not None:
            item.update(status="answered", answer=ans.get("text"), answered=ans.get("at"))
    return sorted(items.values(), key=lambda i: i["at"], reverse=True)


def recent(brain: Brain, kernel_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Asks across the federation (or one kernel), newest first."""
    if kernel_id is not None:
        return for_kernel(brain, kernel_id)[:limit]
    try:
        ids = sorted(os.listdir(brain.kernels_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[dict] = []
    for kid in ids:
        out += for_kernel(brain, kid)
    return sorted(out, key=lambda i: i["at"], reverse=True)[:limit]
