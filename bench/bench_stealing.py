"""Work stealing latency: from `task_available` to the granted claim, on Redis and on the embedded bus.

Two real kernel processes on a temporary brain: `alpha` owns TASKS tasks that each take 10 ms and
whose summaries fit `gamma`'s goal; `gamma` has no work of its own, so it is idle and claims. For
each task granted to gamma, the latency is the grant record's time minus the time in the
`task_available` message (both written by the owner's clock on this machine). Prints the median and
the 90th percentile per backend, the number of stolen tasks, and the claim leg (available -> claim).
Target (issue 14): median under 50 ms on Redis.

    python bench/bench_stealing.py [--tasks 300] [--backend redis|embedded|both]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nika_brain import bus as busmod  # noqa: E402
from nika_brain.brain import Brain  # noqa: E402
from nika_brain.federation.stealing import protocol as stealing  # noqa: E402
from nika_brain.federation.stealing.texts import Texts  # noqa: E402
from tests.kit.brain import IDENTITY  # noqa: E402
from tests.kit.redis import RedisServer  # noqa: E402

PROGRAM = """
import sys, time
from nika_brain.brain import Brain
from nika_brain.federation.stealing.protocol import worker_for
kernel, ms = sys.argv[2], float(sys.argv[3])
worker_for(Brain.at(sys.argv[1]), kernel, lambda t: time.sleep(ms / 1000) or {}).serve()
"""
GOALS = {
    "alpha": "IT operations: servers, backups, network and user accounts",
    "gamma": "Client missions: emails, reports and deliverables for customers",
}
SUMMARIES = [
    "write the monthly report for the client",
    "answer the customer's email about the delivery",
    "prepare the slides of the client deliverable",
]
CONFIG = "version: 1\nfederation:\n  stealing: {threshold: 0.8, window: 0.2}\n"


def brain_at(root: Path) -> Brain:
    root.mkdir(parents=True)
    env = {**os.environ, **IDENTITY}
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True, env=env)
    (root / "nika-brain.yml").write_text(CONFIG)
    (root / ".gitignore").write_text(".nika/\n")
    for kid, goal in GOALS.items():
        (root / "kernels" / kid).mkdir(parents=True)
        (root / "kernels" / kid / "kernel.yml").write_text(f"id: {kid}\ngoal: '{goal}'\n")
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "init"], check=True, env=env)
    return Brain.at(root)


def run(backend: str, url: str | None, tmp: Path, tasks: int) -> dict:
    env = {**os.environ, "NIKA_BUS": backend, "PYTHONPATH": str(ROOT)}
    if url:
        env["NIKA_REDIS_URL"] = url
    os.environ.update({k: v for k, v in env.items() if k.startswith("NIKA_")})
    brain = brain_at(tmp / f"brain-{backend}")
    bus = busmod.open_bus(brain)
    texts = Texts(brain)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROGRAM, str(brain.root), k, "10" if k == "alpha" else "0"], env=env
        )
        for k in ("gamma", "alpha")
    ]
    try:
        deadline = time.monotonic() + 60
        while len(stealing.alive(bus)) < 2:  # both kernels up (model loaded) before the work arrives
            if time.monotonic() > deadline:
                raise SystemExit("kernels did not start")
            time.sleep(0.1)
        for i in range(tasks):
            stealing.enqueue(bus, "alpha", SUMMARIES[i % len(SUMMARIES)], texts=texts, task_id=f"b{i:05d}")
        while len(bus.keys("ws:done:")) < tasks:
            if time.monotonic() > deadline + 120:
                raise SystemExit(f"only {len(bus.keys('ws:done:'))} tasks done")
            time.sleep(0.2)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    offered, claimed = {}, {}
    for _, m in bus.read(stealing.channel(), count=100_000):
        if m.get("type") == "task_available":
            offered[m["task"]] = m["at"]
        elif m.get("type") == "task_claim" and m.get("kernel") == "gamma":
            claimed[m["task"]] = m["at"]
    grant_ms, claim_ms = [], []
    for tid, at in offered.items():
        g = stealing.grants(bus, tid)
        if g and g[0]["to"] == "gamma":
            grant_ms.append((g[0]["at"] - at) * 1000)
        if tid in claimed:
            claim_ms.append((claimed[tid] - at) * 1000)
    return {"grant": grant_ms, "claim": claim_ms, "offered": len(offered)}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--backend", choices=("redis", "embedded", "both"), default="both")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-steal-") as tmp, RedisServer(Path(tmp) / "redis") as url:
        for backend in ("redis", "embedded") if args.backend == "both" else (args.backend,):
            r = run(backend, url if backend == "redis" else None, Path(tmp), args.tasks)
            g = r["grant"]
            med = statistics.median(g) if g else float("nan")
            print(
                f"{backend:9s} task_available -> granted: median {med:6.1f} ms"
                f"  p90 {pct(g, 0.9):6.1f} ms  ({len(g)} stolen of {args.tasks}, {r['offered']} offered)"
                f"   claim leg median {statistics.median(r['claim']) if r['claim'] else float('nan'):5.1f}"
                " ms"
            )
    return 0


if __name__ == "__main__":
    with own_operator_home():
        raise SystemExit(main())
