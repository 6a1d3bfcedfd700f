"""Odd inputs that were slow (issue 25 §5): `rag ingest` of many tiny files, a file under a 100 KB
heading, `triage` of 1,000 emojis. Whole `nika-brain` processes in a brain made by `nika-brain init`
with a kernel started by `kernel spawn` (its agent is the suite's stand-in agent, under a private tmux
server: the model behind Claude Code cannot run here, and the agent is not what is measured), CPU time
(user + system of the process and its children), each case run against this checkout and against a
baseline interleaved (another checkout given with --baseline, e.g. the main branch's, or else a bare
`python -c pass`), printing min/median/max of the paired ratios.

    python bench/bench_inputs.py --baseline /path/to/main-checkout [--files 500] [--runs 3] [--only tiny,heading,emojis]

Goal (the issue: "faster"): each case's median ratio checkout/baseline below 1 against the commit
before the fix. Both ingest cases are bound by the embedder's own cost per token, which a loaded
machine inflates: each is also paired with its floor, a bare process that reads the same files into
the same chunks (this checkout's chunking) and embeds their texts with the bare model in batches of
64 (no brain, no Chroma, no cache), and the ingest/floor ratio printed (1.0: nothing but embedding).
`--no-floor` skips it. Each case also prints its median against the absolute goal of issue 25's third
pass (5,000 tiny files < 60 s CPU, the 100 KB heading file < 20 s, 1,000 emojis < 1 s).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from isolation import own_operator_home

ROOT = Path(__file__).resolve().parents[1]
STANDIN = ROOT / "tests" / "federation" / "standin_agent.py"
GOALS = {"tiny": 60.0, "heading": 20.0, "emojis": 1.0}   # CPU seconds (the 100 KB heading, 5,000 files)


def cpu_of(argv: list[str], cwd: Path, pythonpath: str | None) -> float:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])} failed: {proc.stderr.strip()[-300:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


FLOOR = """
import sys
from nika_brain.federation.embedding import E5Embedder
from nika_brain.federation.vault.chunking import discover, read_chunks
files, _ = discover(sys.argv[1:])
texts = [c.text for f in files for c in read_chunks(f, chunk_chars=1200, max_bytes=20_000_000)]
model = E5Embedder()
for s in range(0, len(texts), 64):
    model.embed(texts[s:s + 64], kind="passage")
print(len(texts))
"""


def new_brain(where: Path, checkout: Path) -> Path:
    """`nika-brain init`, then `kernel spawn` of kernel alpha (the stand-in agent on a tmux server of
    the brain's own, killed by `end_brain`)."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    subprocess.run([sys.executable, "-m", "nika_brain", "init", str(where)], env=env, check=True, capture_output=True)
    fed = {"agent_command": [sys.executable, str(STANDIN)], "tmux_socket": str(where / ".tmux.sock"),
           "supervisor": "manual"}
    (where / "nika-brain.yml").write_text("version: 1\nfederation: " + json.dumps(fed) + "\n")
    proc = subprocess.run([sys.executable, "-m", "nika_brain", "kernel", "spawn", "IT operations, servers and backups",
                           "--id", "alpha"], cwd=where, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"kernel spawn failed: {proc.stderr.strip()[-300:]}")
    return where


def end_brain(where: Path) -> None:
    """The kernel's tmux server and the door service its spawn started (by its pid file) end with it."""
    subprocess.run(["tmux", "-S", str(where / ".tmux.sock"), "kill-server"], capture_output=True)
    try:
        os.kill(int((where / ".nika" / "doors" / "server.pid").read_text().split()[0]), signal.SIGTERM)
    except (OSError, ValueError, IndexError):
        pass   # none started, or gone already
    shutil.rmtree(where, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, help="a checkout to compare with (default: python -c pass)")
    ap.add_argument("--files", type=int, default=500, help="tiny files to ingest (the issue used 5,000)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-floor", action="store_true", help="skip the bare embedder's floor of the ingest cases")
    ap.add_argument("--only", default="tiny,heading,emojis", help="cases to run (comma-separated)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="nika-bench-inputs-"))
    try:
        tiny = tmp / "tiny"
        tiny.mkdir()
        for i in range(args.files):
            (tiny / f"n{i:05d}.md").write_text(f"Note {i}: server {i * 7919 % 1000003} restarted on day {i % 31}.\n")
        heading = tmp / "heading.md"
        heading.write_text("# " + " ".join(f"term{i}" for i in range(15_000)) + "\n\n"
                           + "\n\n".join(f"Paragraph {i} is about topic {i}." for i in range(60)) + "\n")
        emojis = "😀" * 1000
        only = set(args.only.split(","))
        cases = {key: (name, argv) for key, name, argv in (
            ("tiny", f"rag ingest of {args.files} tiny files", ["rag", "ingest", str(tiny), "--kernel", "alpha"]),
            ("heading", "rag ingest, 100 KB heading", ["rag", "ingest", str(heading), "--kernel", "alpha"]),
            ("emojis", "triage of 1,000 emojis", ["triage", emojis])) if key in only}
        floors = {} if args.no_floor else {"tiny": tiny, "heading": heading}
        sides = {"checkout": ROOT}
        if args.baseline:
            sides["baseline"] = args.baseline.resolve()
        print(f"CPU seconds per process (min/median/max over {args.runs} runs), baseline: "
              f"{args.baseline or 'python -c pass'}")
        for key, (name, argv) in cases.items():
            cpu: dict[str, list[float]] = {s: [] for s in (*sides, "pass")}
            for run in range(args.runs):
                for side, checkout in sides.items():   # interleaved, a fresh brain each time (no cache)
                    brain = new_brain(tmp / f"b-{side}-{run}-{len(cpu[side])}", checkout)
                    try:
                        cpu[side].append(cpu_of([sys.executable, "-m", "nika_brain", *argv], brain, str(checkout)))
                    finally:
                        end_brain(brain)
                cpu["pass"].append(cpu_of([sys.executable, "-c", "pass"], tmp, None))
                if key in floors:
                    cpu.setdefault("floor", []).append(
                        cpu_of([sys.executable, "-c", FLOOR, str(floors[key])], tmp, str(ROOT)))
            base = cpu["baseline"] if "baseline" in cpu else cpu["pass"]
            ratios = sorted(a / b for a, b in zip(cpu["checkout"], base))
            fmt = lambda xs: f"{min(xs):.2f}/{statistics.median(xs):.2f}/{max(xs):.2f}"  # noqa: E731
            line = f"{name:<34} checkout {fmt(cpu['checkout'])} s"
            if "baseline" in cpu:
                line += f"   baseline {fmt(cpu['baseline'])} s"
            line += f"   ratio {fmt(ratios)}"
            if "floor" in cpu:
                line += (f"   embedder floor {fmt(cpu['floor'])} s, ingest/floor "
                         f"{fmt(sorted(a / b for a, b in zip(cpu['checkout'], cpu['floor'])))}")
            goal = GOALS[key] * (args.files / 5000 if key == "tiny" else 1)
            line += (f"   goal median < {goal:g} s: "
                     f"{'met' if statistics.median(cpu['checkout']) < goal else 'MISSED'}")
            print(line, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    with own_operator_home():
        sys.exit(main())
