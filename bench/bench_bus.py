"""Bus round trips: publish one message, then read it back after the previous id, per second.

Runs both backends in one run: the embedded SQLite store in a temporary state folder, and Redis on a
redis-server this script starts on a free loopback port (no persistence). Prints the median over RUNS
runs of CYCLES round trips for each, and the ratio embedded / redis.

    python bench/bench_bus.py [--runs 5] [--cycles 2000]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from isolation import own_operator_home

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for tests.kit.redis: one way to start a redis-server

from nika_brain import bus  # noqa: E402
from tests.kit.redis import RedisServer  # noqa: E402


def round_trips(b: bus.Bus, channel: str, n: int) -> float:
    last = b.publish(channel, {"warmup": True})
    message = {"type": "task_available", "task": "t-0000", "priority": 0.7, "kernel": "alpha"}
    t0 = time.perf_counter()
    for _ in range(n):
        mid = b.publish(channel, message)
        got = b.read(channel, after=last, count=1)
        if got[0][0] != mid:
            raise SystemExit(f"{b.backend}: read {got[0][0]}, expected {mid}")
        last = mid
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=2000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-bus-") as tmp, \
            RedisServer(Path(tmp) / "redis") as url:
        embedded = bus.EmbeddedBus(Path(tmp) / "state" / bus.DB_NAME)
        redis_bus = bus.RedisBus(url)
        rates: dict[str, list[float]] = {"embedded": [], "redis": []}
        for run in range(args.runs):  # interleaved, so drift on a noisy machine hits both alike
            for name, b in (("embedded", embedded), ("redis", redis_bus)):
                rates[name].append(round_trips(b, f"bench:{run}", args.cycles))
        embedded.close()
        redis_bus.close()
    med = {name: statistics.median(r) for name, r in rates.items()}
    for name, r in rates.items():
        runs = ", ".join(f"{x:,.0f}" for x in r)
        print(f"{name:9s} median {med[name]:>9,.0f} round trips/s   (runs: {runs})")
    print(f"ratio embedded/redis: {med['embedded'] / med['redis']:.2f}")
    return 0


if __name__ == "__main__":
    with own_operator_home():
        sys.exit(main())
