"""The satellites' door with `ask` (federation/doors/claim.py plus one operation), the process
engine/satellites.launch starts: `python -m nika_brain.federation.asking.door BRAIN`. Here, not in
doors/, because asking (triage, then delivery through the kernels' verbs) sits above the doors.

`ask` is the satellite's `nika-brain ask` (cli/askfast.py sends it here when `$NIKA_DOOR` names a
door): triaged, queued in the kernels' `queue.jsonl` (read-only in the satellite's wall) and delivered
on the host, recorded as asked by `claim <id>`.
"""
from __future__ import annotations

import sys
from typing import Any

from nika_brain.brain import Brain
from nika_brain.federation.doors import claim
from nika_brain.federation.doors.rules import Refused


def ask(brain: Brain, cid: str, req: dict, _holder: int | None) -> Any:
    from nika_brain.federation.asking import route
    prompt, timeout = req.get("prompt"), req.get("timeout", 600.0)
    if not isinstance(prompt, str):
        raise Refused("prompt is a string")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 86400:
        raise Refused("timeout is a number of seconds between 0 and 86400")
    return route.public(route.ask(brain, prompt, wait=req.get("wait") is True, timeout=float(timeout),
                                  by=f"claim {cid}"))


claim.OPS["ask"] = ask

if __name__ == "__main__":
    sys.exit(claim.main(sys.argv[1:]))
