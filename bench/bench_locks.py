"""Uncontended lock throughput: acquire+release cycles per second in one process.

Prints the median over RUNS runs of CYCLES cycles against a fresh temporary brain and, measured in the
same run as a baseline, the rate of a bare `atomic_write` + unlink cycle (the least a lock cycle must
do: write one state file atomically, remove it), with the ratio. Both honour the brain's `fsync`;
by default both settings are measured (fsync on is the default of nika-brain.yml).

    python bench/bench_locks.py [--runs 5] [--cycles 1000] [--fsync on|off|both] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from isolation import own_operator_home

from nika_brain.brain import Brain
from nika_brain.state import locks
from nika_brain.support.fsio import atomic_write

TARGET = 1000.0  # cycles/s, median


def fresh_brain(folder: Path, fsync: bool) -> Brain:
    folder.mkdir()
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    (folder / "nika-brain.yml").write_text(f"version: 1\nfsync: {'true' if fsync else 'false'}\n")
    return Brain.at(folder)


def lock_cycles(brain: Brain, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        locks.acquire(brain, "src/", "sess-bench-step-1")
        locks.release(brain, "src/", "sess-bench-step-1")
    return n / (time.perf_counter() - t0)


def baseline_cycles(brain: Brain, n: int) -> float:
    # Same size and folder as a real lock file, same fsync policy.
    lk = locks.acquire(brain, "src/", "sess-bench-step-1")
    text = lk.path.read_text()
    locks.release(brain, "src/", "sess-bench-step-1")
    target = lk.path.with_name("baseline.yml")
    t0 = time.perf_counter()
    for _ in range(n):
        atomic_write(target, text, fsync=brain.config.fsync)
        os.unlink(target)
    return n / (time.perf_counter() - t0)


def bench(fsync: bool, runs: int, cycles: int, profile: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="nika-bench-") as tmp:
        brain = fresh_brain(Path(tmp) / "brain", fsync)
        lock_cycles(brain, 50)  # warm caches and imports
        lock_rates, base_rates = [], []
        for _ in range(runs):  # interleaved, so both see the same machine noise
            lock_rates.append(lock_cycles(brain, cycles))
            base_rates.append(baseline_cycles(brain, cycles))
        lock_med, base_med = statistics.median(lock_rates), statistics.median(base_rates)
        print(f"bench_locks: fsync={'on' if fsync else 'off'}, {runs} runs x {cycles} cycles")
        print(f"  lock acquire+release      median {lock_med:8.0f} cycles/s  "
              f"(runs: {', '.join(f'{r:.0f}' for r in lock_rates)})")
        print(f"  atomic_write+unlink base  median {base_med:8.0f} cycles/s  "
              f"(runs: {', '.join(f'{r:.0f}' for r in base_rates)})")
        print(f"  ratio lock/base           {lock_med / base_med:8.2f}")
        print(f"  target                    {TARGET:8.0f} cycles/s: "
              f"{'met' if lock_med >= TARGET else 'NOT met'}")
        if profile:
            prof = cProfile.Profile()
            prof.runcall(lock_cycles, brain, cycles)
            pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(15)
        return lock_med


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--fsync", choices=("on", "off", "both"), default="both")
    ap.add_argument("--profile", action="store_true", help="cProfile one more run of lock cycles")
    args = ap.parse_args(argv)
    modes = {"on": [True], "off": [False], "both": [True, False]}[args.fsync]
    for fsync in modes:
        bench(fsync, args.runs, args.cycles, args.profile)
    return 0


if __name__ == "__main__":
    with own_operator_home():
        sys.exit(main())
