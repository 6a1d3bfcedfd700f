"""The Asks page's adapter: each ask with its triage decision, scores, routes and answers, and each
prompt given to a kernel directly.

- `page()`: every `nika-brain ask` recorded (`federation.asking.record`: the prompt, the triage's
  decision, reason and highest scores, one route per kernel with its status and answer), each with the
  operator's correction when one names it (`federation.triage.corrections`); then the prompts given to
  a kernel directly (`kernel invoke`, the kernel page), those no ask's route stands for.
- `for_kernel()`: a kernel's prompts from its queue (`kernels/<id>/queue.jsonl`: the prompt, who gave
  it, when) and the agent's own hook events (`taken` with the prompt's hash and its session, then
  `answered` with the text).
"""
from __future__ import annotations

import os
from typing import Any

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
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


NO_KERNEL = "-"   # the correction form's "no kernel: out of scope" (never a kernel id)


def page(brain: Brain, limit: int = 100) -> dict[str, Any]:
    """The Asks page: recorded asks (newest first, each with its correction), the prompts given to
    kernels directly, the kernel ids a correction may name, and what could not be read."""
    from nika_brain.federation.asking import record
    from nika_brain.federation.triage import corrections
    bad: list[str] = []
    try:
        fixes = corrections.load_all(brain)
    except BrainError as exc:
        fixes, bad = [], [f"corrections: {exc}"]
    by_ask = {c.ask: c for c in fixes if c.ask}
    by_prompt = {c.id: c for c in fixes}
    asks = []
    for rec in record.list_asks(brain)[:limit]:
        fix = by_ask.get(str(rec.get("ask"))) or by_prompt.get(corrections.correction_id(str(rec.get("prompt", ""))))
        asks.append({"id": rec.get("ask", ""), "at": rec.get("at", ""), "by": rec.get("by", ""),
                     "prompt": rec.get("prompt", ""), "decision": rec.get("decision", ""),
                     "reason": rec.get("reason") or "", "scores": rec.get("scores") or [],
                     "routes": [{"kernel": r.get("kernel", ""), "prompt": r.get("prompt", ""),
                                 "status": r.get("status", ""), "prompt_id": r.get("prompt_id"),
                                 "answer": r.get("answer"), "reason": r.get("reason") or ""}
                                for r in rec.get("routes", [])],
                     "correction": None if fix is None else {"id": fix.id, "kernel": fix.kernel, "at": fix.at}})
    routed = {(r["kernel"], r["prompt_id"]) for a in asks for r in a["routes"] if r["prompt_id"]}
    direct = [p for p in recent(brain, limit=limit) if (p["kernel"], p["id"]) not in routed]
    try:
        ids = sorted(d for d in os.listdir(brain.kernels_dir) if (brain.kernels_dir / d / "kernel.yml").is_file())
    except (FileNotFoundError, NotADirectoryError):
        ids = []
    return {"asks": asks, "prompts": direct, "kernels": ids, "no_kernel": NO_KERNEL, "bad": bad}
