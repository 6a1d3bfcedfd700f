"""What the kernel sandbox (issue 20) costs: spawn with it vs without, and a tool call's hook inside it
vs outside.

Prints, each as min / median / max over --runs paired samples (taken in turn, the order alternating),
and the median of the paired ratios:
  spawn         `kernel spawn --runtime headless` of a new kernel (record, settings, credentials,
                goals index, start), sandboxed (bwrap probe paid each time, as each CLI spawn pays it;
                its door opened by the door service) vs `--no-sandbox`
  PreToolUse    `nika-brain hook PreToolUse` for an Edit in the kernel's folder (the agent's every
                tool call), run inside the kernel's bwrap sandbox (the argv the launcher uses) vs
                outside it, both with a warm bytecode cache
The kernels run the stand-in agent (tests/federation/standin_agent.py); spawns go through the verbs'
Python API, as the operator's CLI does after its operator check.

    python bench/bench_sandbox.py [--runs 10]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from isolation import own_operator_home

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired import pairs, summary  # noqa: E402

from nika_brain.brain import Brain  # noqa: E402
from nika_brain.federation.kernels import sandbox, verbs  # noqa: E402
from nika_brain.state import kernels  # noqa: E402
from tests.federation.fedkit import fed_config  # noqa: E402
from tests.kit.brain import IDENTITY, make_brain  # noqa: E402


def report(name: str, base: list[float], xs: list[float], base_name: str) -> dict:
    rs = [x / b for b, x in zip(base, xs) if b > 0]
    print(f"{name}\n    sandboxed {summary(xs)} ms; {base_name} {summary(base)} ms (min / median / max, "
          f"n={len(xs)})\n    paired ratio sandboxed / {base_name}: median {statistics.median(rs):.2f}x "
          f"(min {min(rs):.2f}x, max {max(rs):.2f}x)")
    return {"sandboxed_ms": statistics.median(xs) * 1000, "base_ms": statistics.median(base) * 1000,
            "ratio": statistics.median(rs)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    why = sandbox.unavailable()
    if why:
        print(f"bench_sandbox: no bubblewrap sandbox here: {why}", file=sys.stderr)
        return 1
    os.environ.update(IDENTITY)
    with tempfile.TemporaryDirectory(prefix="nika-bench-sandbox-") as tmp:
        t = Path(tmp)
        brain: Brain = make_brain(t / "brain", fed_config(t))
        os.environ["NIKA_BRAIN_DIR"] = str(brain.root)
        n = [0]

        def spawn(sandboxed: bool) -> float:
            n[0] += 1
            sandbox._WHY.clear()   # each CLI spawn is a new process: it probes bwrap again
            t0 = time.perf_counter()
            verbs.kernel_spawn(brain, "Watch public tenders", kernel_id=f"s{n[0]}", runtime="headless",
                               sandboxed=sandboxed)
            return time.perf_counter() - t0

        spawn(True), spawn(False)   # warm: the door service, the goals index's embedder
        base, boxed = pairs(args.runs, lambda: spawn(False), lambda: spawn(True))
        out = {"spawn": report("kernel spawn (headless)", base, boxed, "--no-sandbox")}

        k = kernels.load_kernel(brain, "s1")
        folder = kernels.kernel_dir(brain, "s1")
        box = sandbox.wrap(brain, k)
        cache = t / "pycache"
        env = {**os.environ, "NIKA_KERNEL_ID": "s1", "PYTHONPYCACHEPREFIX": str(cache),
               "PYTHONDONTWRITEBYTECODE": ""}
        env.pop("PYTHONDONTWRITEBYTECODE")
        event = json.dumps({"hook_event_name": "PreToolUse", "session_id": "11111111-2222-3333-4444-555555555555",
                            "cwd": str(folder), "tool_name": "Edit",
                            "tool_input": {"file_path": str(folder / "notes.md"), "old_string": "a",
                                           "new_string": "b"}}).encode()
        hook = [sys.executable, "-m", "nika_brain", "hook", "PreToolUse"]

        def run(argv: list[str]) -> float:
            t0 = time.perf_counter()
            p = subprocess.run(argv, input=event, cwd=folder, env=env, capture_output=True)
            took = time.perf_counter() - t0
            if p.returncode != 0 or b"deny" in p.stdout:
                raise SystemExit(f"hook failed: {p.returncode} {p.stdout[-300:]!r} {p.stderr[-300:]!r}")
            return took

        run(hook), run(box + hook)   # the bytecode cache written, both sides warm
        base, boxed = pairs(max(args.runs * 2, 10), lambda: run(hook), lambda: run(box + hook))
        out["hook"] = report("PreToolUse hook (Edit in the kernel's folder)", base, boxed, "outside")
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    with own_operator_home():
        sys.exit(main())
