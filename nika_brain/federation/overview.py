"""What `kernel observe` shows of the federation's dynamic half: the work-stealing queue, and the rows
BRAIN-INDEX.md shows (work stealing from the journal, handovers, spawn proposals: read from files by
engine/index.py, which may not import this package)."""

from __future__ import annotations

from typing import Any

from nika_brain.brain import Brain


def index_rows(brain: Brain) -> dict[str, Any]:
    """{stealing, handovers, proposals} as BRAIN-INDEX.md shows them (engine.index.federation_rows)."""
    from nika_brain.engine.index import federation_rows

    return federation_rows(brain)


def observe(brain: Brain, kernel_id: str) -> dict[str, Any]:
    """A kernel's work-stealing queue and counts, its handovers and its pending proposals."""
    from nika_brain.bus import open_bus
    from nika_brain.errors import BrainError
    from nika_brain.federation.stealing import protocol as stealing

    rows = index_rows(brain)
    try:
        queue = stealing.queue(open_bus(brain), kernel_id)
    except BrainError as exc:
        queue = [{"error": str(exc)}]
    return {
        "queue": queue,
        "stealing": next((r for r in rows["stealing"] if r["kernel"] == kernel_id), {}),
        "handovers": [h for h in rows["handovers"] if kernel_id in (h["from_kernel"], h["successor"])],
        "proposals": [p for p in rows["proposals"] if p["kernel"] == kernel_id],
    }
