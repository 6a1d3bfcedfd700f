"""Run the campaign suite: `python tests/campaign/run.py [--full] [--seed N] [pytest args...]`.

--full multiplies the corpus, the kills and the contention cycles by ten (minutes, not CI seconds);
--seed picks another corpus (the default one is what CI runs).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    env = dict(os.environ)
    rest = []
    it = iter(argv)
    for a in it:
        if a == "--full":
            env["NIKA_CAMPAIGN"] = "full"
        elif a == "--seed":
            env["NIKA_CAMPAIGN_SEED"] = next(it)
        else:
            rest.append(a)
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    return subprocess.call([sys.executable, "-m", "pytest", "-q", str(root / "tests" / "campaign"), *rest],
                           cwd=root, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
