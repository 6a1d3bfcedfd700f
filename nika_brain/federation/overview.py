"""What BRAIN-INDEX.md and `kernel observe` show of the federation's dynamic half: work stealing
(from the journal), handovers (registry) and spawn proposals. Read from files only: deterministic."""
from __future__ import annotations

from typing import Any

from nika_brain.brain import Brain


def index_rows(brain: Brain) -> dict[str, Any]:
    """{stealing: [{kernel, granted_away, granted_in, stole, revoked}], handovers: [...],
    proposals: [pending ones]}; empty lists when there is nothing."""
    from nika_brain.federation import proposals, registry, stealing
    steal = [{"kernel": k, **{key: v.get(key, 0) for key in
                              ("granted_away", "granted_in", "stole", "ran_stolen", "revoked", "revoked_from")}}
             for k, v in sorted(stealing.journal_summary(brain).items())]
    handovers = []
    for path in brain.iter_yaml(registry.folder(brain) / "handovers"):
        h = registry.get_handover(brain, path.stem) or {}
        handovers.append({"successor": path.stem, "from_kernel": h.get("from_kernel"),
                          "from_session": h.get("from_session"), "pct": h.get("pct"),
                          "root": h.get("root"), "successor_session": h.get("successor_session") or ""})
    pending = [{"id": p["id"], "trigger": p["trigger"], "kernel": p.get("kernel") or "",
                "goal": p["goal"], "memory": p["memory_estimate"], "gate": p["gate"]}
               for p in proposals.list_proposals(brain, "pending")]
    return {"stealing": steal, "handovers": handovers, "proposals": pending}


def observe(brain: Brain, kernel_id: str) -> dict[str, Any]:
    """A kernel's work-stealing queue and counts, its handovers and its pending proposals."""
    from nika_brain.bus import open_bus
    from nika_brain.errors import BrainError
    from nika_brain.federation import stealing
    rows = index_rows(brain)
    try:
        queue = stealing.queue(open_bus(brain), kernel_id)
    except BrainError as exc:
        queue = [{"error": str(exc)}]
    return {"queue": queue,
            "stealing": next((r for r in rows["stealing"] if r["kernel"] == kernel_id), {}),
            "handovers": [h for h in rows["handovers"] if kernel_id in (h["from_kernel"], h["successor"])],
            "proposals": [p for p in rows["proposals"] if p["kernel"] == kernel_id]}
