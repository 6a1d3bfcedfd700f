"""Orchestrator overhead in swarm mode, satellite time excluded.

Each run makes a fresh brain (a real git repository in a temporary folder) with one workflow of
STEPS steps and runs `nika-brain workflow-launch bench --mode swarm` as a real process. The satellite
is tests/satellite_program.py with a no-op instruction, wrapped in `sh` that stamps the wall clock
before and after it: the time inside satellite processes is the sum of those intervals, and the
orchestrator's overhead is the whole run's wall time minus it. The gap between one satellite's end
and the next one's start is one step's overhead (route + index of the previous step, then preflight,
locks, claim, index and brief of the next, and the process launch).

Figures (medians over RUNS runs): per-step overhead (target < 250 ms) and the whole run's overhead
for 50 steps (target < 15 s). A last run in-process times the orchestrator's phases (inclusive, per
step) and counts git processes; --profile adds a cProfile of that run.

    python bench/bench_orchestrator.py [--runs 3] [--steps 50] [--no-fsync] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nika_brain.brain import Brain  # noqa: E402
from nika_brain.engine import orchestrator, preflight, satellites, signals  # noqa: E402
from nika_brain.engine import service as launch  # noqa: E402
from nika_brain.gitrepo import git  # noqa: E402
from nika_brain.state import claims, locks  # noqa: E402
from tests.kit.orch import CARD, KERNEL, SATELLITE  # noqa: E402

STEP_TARGET_MS = 250.0
TOTAL_TARGET_S = 15.0
TOTAL_STEPS = 50
# Stamps (ns) before and after the satellite; "$0" "$@" is the real satellite command.
WRAP = 'a=$(date +%s%N); "$0" "$@"; rc=$?; b=$(date +%s%N); echo "$a $b" >> "$NIKA_BENCH_TIMES"; exit $rc'
ENV = {"GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid",
       "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid",
       "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def sh(*args: str, cwd: Path) -> None:
    subprocess.run(args, cwd=cwd, check=True, capture_output=True)


def make_brain(root: Path, steps: int, fsync: bool) -> Brain:
    root.mkdir(parents=True)
    chain = "".join(f"  - step: {i}\n    type: search\n    scope: s{i}/\n    story_angle: noop\n"
                    for i in range(1, steps + 1))
    files = {
        "nika-brain.yml": f"version: 1\nfsync: {'true' if fsync else 'false'}\n"
                          f'satellite_command: ["/bin/sh", "-c", {WRAP!r}, "{sys.executable}", '
                          f'"{SATELLITE}", "{{claim}}", "{{brief_file}}"]\n',
        ".gitignore": ".nika/\n",
        "brain/KERNEL.md": KERNEL,
        "agents/satellite-boot.md": CARD.format(name="satellite-boot", zones="project"),
        "workflows/bench.yml": f"name: bench\nbranch: theme/bench\nchain:\n{chain}",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    sh("git", "init", "-q", "-b", "main", cwd=root)
    sh("git", "add", "-A", cwd=root)
    sh("git", "commit", "-q", "-m", "bench brain", cwd=root)
    return Brain.at(root)


def intervals(times: Path) -> list[tuple[float, float]]:
    out = []
    for line in times.read_text().splitlines():
        a, b = line.split()
        out.append((int(a) / 1e9, int(b) / 1e9))
    return sorted(out)


def cli_run(folder: Path, steps: int, fsync: bool) -> dict:
    brain = make_brain(folder / "brain", steps, fsync)
    times = folder / "times"
    env = {**os.environ, **ENV, "NIKA_BENCH_TIMES": str(times)}
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "nika_brain", "workflow-launch", "bench", "--mode", "swarm"],
                          cwd=brain.root, env=env, capture_output=True, text=True)
    t1 = time.time()
    if proc.returncode != 0 or "DONE" not in proc.stdout:
        raise SystemExit(f"swarm run failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    sats = intervals(times)
    if len(sats) != steps:
        raise SystemExit(f"expected {steps} satellites, saw {len(sats)}")
    inside = sum(b - a for a, b in sats)
    gaps = [sats[i + 1][0] - sats[i][1] for i in range(len(sats) - 1)]
    return {"wall": t1 - t0, "satellites": inside, "overhead": (t1 - t0) - inside,
            "one_satellite": statistics.median(b - a for a, b in sats),
            "step_median": statistics.median(gaps) if gaps else float("nan"),
            "step_p90": sorted(gaps)[int(0.9 * (len(gaps) - 1))] if gaps else float("nan"),
            "startup": sats[0][0] - t0, "close": t1 - sats[-1][1]}


# ---- in-process breakdown ------------------------------------------------------------------------------

PHASES = [  # (label, module, attribute): inclusive wall time per call
    ("preflight", preflight, "run_checks"),
    ("locks acquire", locks, "acquire"),
    ("claim open", claims, "open_claim"),
    ("brief render", satellites, "render_brief"),
    ("satellite (excluded)", satellites, "launch"),
    ("commit work", launch, "_commit_work"),
    ("claim close", claims, "close_claim"),
    ("route (incl. index, signals)", orchestrator, "_route"),
    ("index regen", orchestrator, "_reindex"),
    ("signal emit", signals, "emit"),
    ("merge into base", orchestrator, "merge_into_base"),
]


def breakdown(folder: Path, steps: int, fsync: bool, profile: bool) -> None:
    brain = make_brain(folder / "brain", steps, fsync)
    os.environ.update(ENV)
    os.environ["NIKA_BENCH_TIMES"] = str(folder / "times")
    spent: dict[str, list[float]] = defaultdict(list)
    git_calls = [0]
    saved = []

    def timed(label, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[label].append(time.perf_counter() - t)
        return wrapper

    for label, mod, attr in PHASES:
        saved.append((mod, attr, getattr(mod, attr)))
        setattr(mod, attr, timed(label, getattr(mod, attr)))
    real_git = git.run

    def counting(*a, **k):
        git_calls[0] += 1
        return real_git(*a, **k)
    saved.append((git, "run", real_git))
    git.run = counting
    prof = cProfile.Profile() if profile else None
    try:
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        out = launch.launch(brain, "bench", mode="swarm")
        if prof:
            prof.disable()
        wall = time.perf_counter() - t0
    finally:
        for mod, attr, fn in saved:
            setattr(mod, attr, fn)
    assert out.status == "done", out
    sat = sum(spent["satellite (excluded)"])
    print(f"  in-process run: wall {wall:.2f} s, satellites {sat:.2f} s, overhead {wall - sat:.2f} s "
          f"({(wall - sat) / steps * 1000:.0f} ms/step), git processes {git_calls[0]} "
          f"({git_calls[0] / steps:.1f}/step)")
    print(f"  {'phase (inclusive)':<30} {'calls':>6} {'median ms':>10} {'total s':>9} {'ms/step':>8}")
    for label, _, _ in PHASES:
        xs = spent.get(label, [])
        if xs:
            print(f"  {label:<30} {len(xs):>6} {statistics.median(xs) * 1000:>10.1f} {sum(xs):>9.2f} "
                  f"{sum(xs) / steps * 1000:>8.1f}")
    if prof:
        pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=TOTAL_STEPS)
    ap.add_argument("--no-fsync", action="store_true", help="fsync: false in nika-brain.yml")
    ap.add_argument("--no-breakdown", action="store_true", help="skip the in-process phase timing")
    ap.add_argument("--profile", action="store_true", help="cProfile the in-process run")
    args = ap.parse_args(argv)
    fsync = not args.no_fsync
    print(f"bench_orchestrator: swarm mode, {args.steps} steps, no-op satellite, fsync={'on' if fsync else 'off'}, "
          f"{args.runs} runs")
    results = []
    with tempfile.TemporaryDirectory(prefix="nika-bench-orch-") as tmp:
        for i in range(args.runs):
            r = cli_run(Path(tmp) / f"run{i}", args.steps, fsync)
            results.append(r)
            print(f"  run {i + 1}: wall {r['wall']:6.2f} s  satellites {r['satellites']:6.2f} s  "
                  f"overhead {r['overhead']:6.2f} s  per-step median {r['step_median'] * 1000:5.0f} ms "
                  f"(p90 {r['step_p90'] * 1000:.0f})  start {r['startup'] * 1000:.0f} ms  "
                  f"close+merge {r['close'] * 1000:.0f} ms")
        step_med = statistics.median(r["step_median"] for r in results) * 1000
        total_med = statistics.median(r["overhead"] for r in results)
        scaled = total_med * TOTAL_STEPS / args.steps
        print(f"  per-step overhead         median {step_med:7.0f} ms   target < {STEP_TARGET_MS:.0f} ms: "
              f"{'met' if step_med < STEP_TARGET_MS else 'NOT met'}")
        print(f"  whole-run overhead        median {total_med:7.2f} s    "
              + (f"target < {TOTAL_TARGET_S:.0f} s for {TOTAL_STEPS} steps: "
                 f"{'met' if total_med < TOTAL_TARGET_S else 'NOT met'}" if args.steps == TOTAL_STEPS else
                 f"(x{TOTAL_STEPS}/{args.steps} = {scaled:.2f} s for {TOTAL_STEPS} steps)"))
        one = statistics.median(r["one_satellite"] for r in results) * 1000
        print(f"  satellite time            median {statistics.median(r['satellites'] for r in results):7.2f} s "
              f"(excluded)")
        print(f"  baseline: one no-op satellite process {one:.0f} ms; ratio step overhead/baseline "
              f"{step_med / one:.2f}")
        if not args.no_breakdown:
            breakdown(Path(tmp) / "inproc", args.steps, fsync, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
