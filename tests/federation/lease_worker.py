"""A worker process of the Redis lease test: N cycles of lock acquire / check / release on scopes
that overlap, in one brain clone; prints its fencing tokens and the overlaps it saw as JSON."""
from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.federation.kernels import leases
from nika_brain.state import scopes

SCOPES = ["src/", "src/a.py", "src/b.py", "src/*.py", "src/sub/", "src/sub/c.py", "docs/", "docs/x.md"]


def main(root: str, markers: str, cycles: int, seed: int) -> None:
    brain = Brain.at(root)
    rnd = random.Random(seed)
    owner = f"w{seed}"
    tokens, overlaps = [], 0
    mdir = Path(markers)
    for i in range(cycles):
        scope = rnd.choice(SCOPES)
        leases.lock_acquire(brain, scope, owner, wait=600.0, pid=None)
        tokens.append(leases.last_token(brain, scope, owner))
        mine = mdir / f"{owner}-{i}"
        tmp = mdir / f".{owner}-{i}"
        tmp.write_text(scope)
        os.rename(tmp, mine)
        for other in os.listdir(mdir):
            if other.startswith(".") or other == mine.name:
                continue
            try:
                theirs = (mdir / other).read_text()
            except FileNotFoundError:
                continue
            if scopes.scopes_overlap(scope, theirs):
                overlaps += 1
        mine.unlink()
        leases.lock_release(brain, scope, owner)
    print(json.dumps({"tokens": tokens, "overlaps": overlaps}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
