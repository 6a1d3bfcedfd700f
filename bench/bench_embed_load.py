"""One prompt's embedding on a busy machine: threads chosen by the load (one when the load average
reaches the cores) against a fixed team of every core, paired and interleaved, quiet and under load.

The load is made here: 2 x cores busy processes, started after the quiet round; the loaded round
begins once the 1-minute load average has reached the cores (it climbs in ~30-60 s), so the choice
it measures is the one the embedder makes. Goal: the loaded round's median ratio below 1 (faster
than the fixed team), the quiet round's at 1 (the same choice: every core).

    python bench/bench_embed_load.py [--prompts 60] [--wait 180]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from isolation import own_operator_home

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def paired(emb, texts: list[str]) -> tuple[list[float], list[float]]:
    """(auto times, fixed times) in ms, one pair per text, the order alternated."""
    from nika_brain.federation import embedding
    chosen = embedding.single_text_threads
    every = lambda _load, cores: cores  # noqa: E731 (the fixed team)
    auto, fixed = [], []
    for i, t in enumerate(texts):
        for side in ((0, 1) if i % 2 else (1, 0)):
            embedding.single_text_threads = chosen if side == 0 else every
            try:
                t0 = time.perf_counter()
                emb.embed([t], kind="query")
                (auto if side == 0 else fixed).append((time.perf_counter() - t0) * 1000)
            finally:
                embedding.single_text_threads = chosen
    return auto, fixed


def report(label: str, auto: list[float], fixed: list[float]) -> float:
    ratios = [a / f for a, f in zip(auto, fixed)]
    med = statistics.median(ratios)
    print(f"  {label}: load average {os.getloadavg()[0]:.1f}; p50 by the load {statistics.median(auto):.1f} ms,"
          f" fixed team {statistics.median(fixed):.1f} ms; ratio of pairs min {min(ratios):.2f} median {med:.2f}"
          f" max {max(ratios):.2f}")
    return med


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=60)
    ap.add_argument("--wait", type=float, default=180.0, help="seconds at most for the load to build")
    args = ap.parse_args()
    from nika_brain.federation.embedding import E5Embedder, _cores
    from nika_brain.federation.triage.queries import read_queries
    emb = E5Embedder()
    if emb._threads is None:
        print("the embedder's thread count is fixed here (OMP_NUM_THREADS or no libgomp found): nothing to compare")
        return 1
    cores = _cores()
    texts = [q.text for q in read_queries(ROOT / "bench" / "triage_fr" / "fewshot" / "final.jsonl")][:args.prompts]
    emb.embed(["warm up"], kind="query")
    print(f"one prompt's embedding, {len(texts)} prompts of bench/triage_fr/fewshot/final.jsonl, {cores} cores")
    quiet = report("quiet", *paired(emb, texts)) if os.getloadavg()[0] < cores else None
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * cores)]
    try:
        deadline = time.monotonic() + args.wait
        while os.getloadavg()[0] < cores and time.monotonic() < deadline:
            time.sleep(1)
        if os.getloadavg()[0] < cores:
            print(f"the load average did not reach {cores} in {args.wait:.0f} s: no loaded round")
            return 1
        loaded = report(f"under {2 * cores} busy processes", *paired(emb, texts))
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(f"  goal: loaded median ratio < 1: {'met' if loaded < 1 else 'NOT met'}"
          + ("" if quiet is None else f"; quiet ratio ~1: {quiet:.2f}"))
    return 0


if __name__ == "__main__":
    with own_operator_home():
        sys.exit(main())
