"""The git pre-commit hook on a commit touching 10 state files.

Two brains made by `nika-brain init`, each seeded with SEED committed claims: one with the hooks
installed, one without (the baseline: the same commits, git alone). Each measured commit changes 10
state files (8 new claims, 2 closed ones) and is timed around a real `git commit`; the hooked commit
validates the 10 staged files, checks locks, regenerates BRAIN-INDEX.md and stages it. Prints the
medians over COMMITS commits, the hook's own cost (the difference) and the ratio. Target: hooked
median under 300 ms.

    python bench/bench_precommit.py [--commits 15] [--seed 1000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from isolation import own_operator_home

from nika_brain.engine.init import init
from nika_brain.support.yamlsafe import dumps

TARGET = 0.300  # seconds, median of the hooked commit
IDENTITY = {"GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid",
            "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid",
            "GIT_CONFIG_NOSYSTEM": "1"}


def claim(cid: str, is_open: bool, n: int) -> dict:
    opened = f"2026-03-{1 + n // 1440 % 28:02d}T{n // 60 % 24:02d}:{n % 60:02d}:00Z"
    d = {"id": cid, "workflow": "example", "theme": "example", "step": 1 + n % 3, "satellite_type": "code",
         "satellite_level": "domain", "agent": None, "scope": ["src/greeting/"], "zone": "project",
         "story_angle": "", "on_done": None, "on_partial": None, "on_fail": None,
         "status": "open" if is_open else "closed", "opened": opened, "closed": None, "parent": None,
         "children": [], "session": None, "touched": [], "result": None}
    if not is_open:
        d["closed"] = opened
        d["result"] = {"status": "ok", "summary": "", "tests": {"passed": None, "failed": None}}
    return d


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def seed(root: Path, n: int, hooks: bool) -> None:
    init(root, hooks=hooks)
    for i in range(n):
        cid = f"sess-seed-{i:05d}-step-1"
        (root / "claims" / f"{cid}.yml").write_text(dumps(claim(cid, i % 5 == 0, i)))
    git(root, "add", "claims")
    git(root, "commit", "-q", "--no-verify", "-m", "seed")
    if hooks:  # one hooked commit to warm the index cache, as any live brain has
        touch(root, 999_999)
        git(root, "add", "claims")
        git(root, "commit", "-q", "-m", "warm")


def touch(root: Path, k: int) -> None:
    """10 state files: 8 new open claims and 2 seeded open claims closed."""
    for j in range(8):
        cid = f"sess-bench-{k:06d}-{j}-step-1"
        (root / "claims" / f"{cid}.yml").write_text(dumps(claim(cid, True, k * 10 + j)))
    for j in range(2):
        cid = f"sess-seed-{(k * 10 + j * 5) % 1000 // 5 * 5:05d}-step-1"
        path = root / "claims" / f"{cid}.yml"
        if path.exists():
            path.write_text(dumps(claim(cid, False, k)).replace("summary: ''", f"summary: closed {k}"))


def measure(root: Path, commits: int) -> list[float]:
    out = []
    for k in range(commits):
        touch(root, k)
        git(root, "add", "claims")
        t0 = time.perf_counter()
        subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", f"bench {k}"], check=True,
                       capture_output=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=15)
    ap.add_argument("--seed", type=int, default=1000)
    args = ap.parse_args()
    os.environ.update(IDENTITY)
    with tempfile.TemporaryDirectory(prefix="nika-bench-precommit-") as tmp:
        os.environ["HOME"] = tmp
        hooked, plain = Path(tmp) / "hooked", Path(tmp) / "plain"
        seed(hooked, args.seed, hooks=True)
        seed(plain, args.seed, hooks=False)
        with_hook = measure(hooked, args.commits)
        baseline = measure(plain, args.commits)
        files = subprocess.run(["git", "-C", str(hooked), "show", "--name-only", "--format=", "HEAD"],
                               capture_output=True, text=True, check=True).stdout.split()
        assert "BRAIN-INDEX.md" in files and len(files) == 11, files  # the hook did its job
    h, b = statistics.median(with_hook), statistics.median(baseline)
    print(f"seed: {args.seed} claims; each commit: 10 state files (+ BRAIN-INDEX.md staged by the hook)")
    print(f"git commit with the hooks     median {h * 1000:7.1f} ms  (min {min(with_hook) * 1000:.1f}, "
          f"max {max(with_hook) * 1000:.1f}, n={len(with_hook)})")
    print(f"git commit without (baseline) median {b * 1000:7.1f} ms  (min {min(baseline) * 1000:.1f}, "
          f"max {max(baseline) * 1000:.1f}, n={len(baseline)})")
    print(f"hook cost {(h - b) * 1000:.1f} ms, ratio {h / b:.1f}x")
    print(f"target: hooked median < {TARGET * 1000:.0f} ms -> {'OK' if h < TARGET else 'MISSED'}")
    return 0 if h < TARGET else 1


if __name__ == "__main__":
    with own_operator_home():
        sys.exit(main())
