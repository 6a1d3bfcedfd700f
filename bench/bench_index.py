"""BRAIN-INDEX.md regeneration on a large brain: 10,000 claims (2,000 open) plus locks, gates,
breakers, workflows and runs.

Prints the median over RUNS runs of `index.regenerate`:
  cold     no cache (.nika/cache removed) and no BRAIN-INDEX.md: every state file is parsed
  warm     cache present, BRAIN-INDEX.md removed: render + write, parsing nothing
  noop     cache present, nothing changed: render, compare, no write
  one      cache present, one claim closed since the last run: one file parsed, the index rewritten
and, for scale, the median of the whole `nika-brain index` process (interpreter start included).
Target: warm median under 1 s.

    python bench/bench_index.py [--runs 5] [--claims 10000] [--open 2000]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.engine import index
from nika_brain.support.yamlsafe import dumps

TARGET = 1.0  # seconds, warm median


def claim(cid: str, wf: str, step: int, is_open: bool, minute: int) -> dict:
    opened = f"2026-03-{1 + minute // 1440:02d}T{minute // 60 % 24:02d}:{minute % 60:02d}:00Z"
    d = {"id": cid, "workflow": wf, "theme": wf, "step": step, "satellite_type": "code",
         "satellite_level": "domain", "agent": None, "scope": [f"src/{wf}/part{step}/"], "zone": "project",
         "story_angle": "bench", "on_done": None, "on_partial": None, "on_fail": None,
         "status": "open" if is_open else "closed", "opened": opened, "closed": None, "parent": None,
         "children": [], "session": None, "touched": [], "result": None}
    if not is_open:
        d["closed"] = opened
        d["result"] = {"status": "ok", "summary": "done", "tests": {"passed": 3, "failed": 0}}
    return d


def build(root: Path, n_claims: int, n_open: int) -> Brain:
    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "nika-brain.yml").write_text("version: 1\n")
    for d in ("claims", "locks", "gates", "breakers", "runs", "workflows"):
        (root / d).mkdir()
    n_wf = 40
    for w in range(n_wf):
        name = f"wf{w:03d}"
        chain = [{"step": s, "type": "code", "scope": f"src/{name}/part{s}/"} for s in range(1, 6)]
        (root / "workflows" / f"{name}.yml").write_text(dumps({"name": name, "branch": f"theme/{name}",
                                                               "chain": chain}))
        if w < 20:
            hist = [{"step": str(s), "claim": f"c-{name}-{s}", "result": "ok", "action": "trigger:next",
                     "at": "2026-03-20T10:00:00Z"} for s in range(1, 1 + w % 5)]
            (root / "runs" / f"{name}.yml").write_text(dumps({
                "workflow": name, "status": "running" if w < 10 else "done", "mode": "assisted",
                "started": "2026-03-20T09:00:00Z", "cursor": str(1 + w % 5), "claim": f"c-{name}",
                "history": hist}))
    for i in range(n_claims):
        wf = f"wf{i % n_wf:03d}"
        cid = f"sess-bench-{i:05d}-{wf}-step-{i % 5 + 1}"
        (root / "claims" / f"{cid}.yml").write_text(dumps(claim(cid, wf, i % 5 + 1, i >= n_claims - n_open, i)))
    for i in range(50):
        (root / "locks" / f"l{i:02d}.yml").write_text(dumps({
            "scope": f"src/wf{i:03d}/", "mode": "exclusive", "owner": f"sess-bench-{i:05d}", "token": i + 1,
            "acquired": "2026-03-20T10:00:00Z", "expires": "2026-03-20T10:30:00Z", "holder": {"host": "h"}}))
    for i in range(200):
        status = "pending" if i < 20 else "approved"
        g = {"id": f"g{i:03d}", "message": f"gate {i}?", "status": status, "created": "2026-03-20T10:00:00Z",
             "workflow": f"wf{i % n_wf:03d}", "step": 1}
        if status != "pending":
            g.update(decided_at="2026-03-20T10:05:00Z", decided_by="alice", via="cli")
        (root / "gates" / f"g{i:03d}.yml").write_text(dumps(g))
    for i in range(5):
        (root / "breakers" / f"b{i}.yml").write_text(dumps({
            "scope": f"lib{i}/", "fails": 3, "tripped": True, "updated": "2026-03-20T10:00:00Z"}))
    return Brain.at(root)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--claims", type=int, default=10_000)
    ap.add_argument("--open", type=int, default=2_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nika-bench-index-") as tmp:
        t0 = time.perf_counter()
        brain = build(Path(tmp) / "brain", args.claims, args.open)
        print(f"built a brain with {args.claims} claims ({args.open} open) in {time.perf_counter() - t0:.1f} s")
        cache = brain.state_dir / "cache"
        cold, warm, noop, one, proc = [], [], [], [], []
        victims = sorted(brain.claims_dir.iterdir())[-args.runs:]
        for r in range(args.runs):
            shutil.rmtree(cache, ignore_errors=True)
            brain.index_path.unlink(missing_ok=True)
            cold.append(timed(lambda: index.regenerate(brain)))
            brain.index_path.unlink()
            warm.append(timed(lambda: index.regenerate(brain)))
            noop.append(timed(lambda: index.regenerate(brain)))
            text = victims[r].read_text().replace("status: open", "status: closed", 1)
            text = text.replace("result: null", "result:\n  status: ok\n  summary: ''\n").replace(
                "closed: null", "closed: '2026-03-21T00:00:00Z'")
            victims[r].write_text(text)
            one.append(timed(lambda: index.regenerate(brain)))
            env = dict(os.environ, NIKA_BRAIN_DIR=str(brain.root))
            brain.index_path.unlink()
            proc.append(timed(lambda env=env: subprocess.run([sys.executable, "-m", "nika_brain", "index"], env=env,
                                                     check=True, capture_output=True)))
        lines = brain.index_path.read_text().count("\n")
        print(f"BRAIN-INDEX.md: {lines} lines, {brain.index_path.stat().st_size} bytes")
        for name, xs in (("cold (no cache)", cold), ("warm (cache, write)", warm), ("noop (unchanged)", noop),
                         ("one claim closed", one), ("`nika-brain index` process", proc)):
            print(f"{name:28s} median {statistics.median(xs) * 1000:8.1f} ms   "
                  f"(min {min(xs) * 1000:.1f}, max {max(xs) * 1000:.1f}, n={len(xs)})")
        med = statistics.median(warm)
        print(f"target: warm median < {TARGET:.1f} s -> {'OK' if med < TARGET else 'MISSED'}")
        return 0 if med < TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
