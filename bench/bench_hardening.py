"""The figures of issue 10 (hardening), CPU time of whole processes as agents and scripts pay it.

Prints medians over interleaved runs, and ratios against a baseline measured in the same run:
  1. PreToolUse (an allowed Edit) on a brain with 3,000 locks and 2,000 open claims vs an empty brain
     (target: under 1.2x)
  2. one in-process `locks.acquire` with 3,000 locks held vs an empty brain (target: under 2x)
  3. `nika-brain lock acquire` and `lock release` processes vs a bare `python -c pass` (target: each
     under 3x)
  4. uncontended in-process lock cycles (acquire+release, fsync on) next to a bare atomic write+unlink
     cycle, as the ratio lock/base

CPU = user + system time of the child (resource.getrusage(RUSAGE_CHILDREN) deltas); processes use a
warm bytecode cache (PYTHONPYCACHEPREFIX), as an installed package does.

    python bench/bench_hardening.py [--runs 15] [--locks 3000] [--claims 2000]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.kit.orch import CARD  # noqa: E402  (the satellite card of the orchestrator tests)

KERNEL_MD = """---
zones:
  - name: state
    level: tool-only
    paths: [claims/, locks/, gates/]
  - name: project
    level: open
    paths: [.]
---
"""


def make_brain(root: Path, n_locks: int, n_claims: int) -> str:
    from nika_brain.brain import Brain
    from nika_brain.state import claims, locks
    from nika_brain.support.yamlsafe import dumps
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "nika-brain.yml").write_text("version: 1\n")
    (root / "brain").mkdir()
    (root / "brain" / "KERNEL.md").write_text(KERNEL_MD)
    (root / "agents").mkdir()
    (root / "agents" / "satellite-boot.md").write_text(CARD.format(name="satellite-boot", zones="project"))
    brain = Brain.at(root)
    claim = claims.open_claim(brain, workflow="auth", step=1, satellite_type="code", scope=["src/auth/"])
    now = datetime.now(timezone.utc)
    (root / "locks").mkdir(exist_ok=True)
    for i in range(n_locks):   # written directly (as a merge or a checkout would bring them)
        scope, owner = f"src/mod{i % 300}/part{i}/", f"sess-other-{i}"
        lk = locks.Lock(scope, owner, "exclusive", i + 1, now, now + timedelta(hours=2),
                        locks.Holder("elsewhere"), locks.lock_path(brain, scope, owner))
        lk.path.write_text(locks._dump(lk))
    for i in range(n_claims):
        c = claims.Claim(f"sess-20260101-0000-bulk-step-{i}", "bulk", "bulk", str(i), "code", "domain",
                         (f"src/mod{i % 300}/",), None, "open", now)
        claims.claim_path(brain, c.id).write_text(dumps(claims.to_dict(c)))
    if n_locks:
        locks.list_locks(brain)   # one full parse, as the first reader after a checkout does
        locks._index(brain)
    return claim.id


def cpu_of(cmd: list[str], data: bytes, env: dict) -> tuple[float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, input=data, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.returncode


def med(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def hook_and_cli(args, tmp: Path) -> None:
    env0 = dict(os.environ)
    env0.pop("PYTHONDONTWRITEBYTECODE", None)
    env0["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    env0["PYTHONPATH"] = str(ROOT)
    brains = {}
    for name, (nl, nc) in {"empty": (0, 0), "full": (args.locks, args.claims)}.items():
        root = tmp / name
        root.mkdir()
        claim_id = make_brain(root, nl, nc)
        env = dict(env0, NIKA_BRAIN_DIR=str(root), NIKA_CLAIM=claim_id)
        edit = {"session_id": "bench", "cwd": str(root), "hook_event_name": "PreToolUse",
                "tool_name": "Edit", "tool_input": {"file_path": str(root / "src/auth/login.py"),
                                                    "old_string": "a", "new_string": "b"}}
        brains[name] = (env, json.dumps(edit).encode())
    hook = [sys.executable, "-m", "nika_brain", "hook", "PreToolUse"]
    cli = [sys.executable, "-m", "nika_brain", "lock"]
    env_e = brains["empty"][0]
    full_name = f"PreToolUse, {args.locks} locks + {args.claims} claims"
    cases = {
        "python -c pass": ([sys.executable, "-c", "pass"], b"", env_e),
        "PreToolUse, empty brain": (hook, brains["empty"][1], brains["empty"][0]),
        full_name: (hook, brains["full"][1], brains["full"][0]),
        "CLI lock acquire": (cli + ["acquire", "bench/x/", "--owner", "sess-bench", "--no-pid"], b"", env_e),
        "CLI lock release": (cli + ["release", "bench/x/", "--owner", "sess-bench"], b"", env_e),
    }
    for name, (cmd, data, env) in cases.items():   # warm the bytecode cache; check the answers
        _, code = cpu_of(cmd, data, env)
        assert code == 0, (name, code)
    times: dict[str, list[float]] = {n: [] for n in cases}
    for _ in range(args.runs):
        for name, (cmd, data, env) in cases.items():
            t, code = cpu_of(cmd, data, env)
            times[name].append(t)
    base = med(times["python -c pass"])
    print(f"process CPU (user+sys), median of {args.runs} interleaved runs "
          f"(python {sys.version.split()[0]}, {os.cpu_count()} cpus)")
    for name, xs in times.items():
        print(f"  {name:44} {med(xs):7.1f} ms  {med(xs) / base:5.2f}x python -c pass")
    empty, full = med(times["PreToolUse, empty brain"]), med(times[full_name])
    verdict = "ok" if full / empty < 1.2 else "MISSED"
    print(f"  PreToolUse full/empty: {full / empty:.2f}x (target < 1.2x: {verdict})")
    for name in ("CLI lock acquire", "CLI lock release"):
        r = med(times[name]) / base
        print(f"  {name} / python -c pass: {r:.2f}x (target < 3x: {'ok' if r < 3 else 'MISSED'})")


def acquire_scaling(args, tmp: Path) -> None:
    from nika_brain.brain import Brain
    from nika_brain.state import locks
    out = {}
    for name, nl in (("empty", 0), ("full", args.locks)):
        root = tmp / f"acq-{name}"
        root.mkdir()
        make_brain(root, nl, 0)
        brain = Brain.at(root)
        xs = []
        for i in range(args.runs * 4):
            t = time.process_time()
            locks.acquire(brain, f"bench/{i}/", "sess-bench", pid=None)
            xs.append(time.process_time() - t)
            locks.release(brain, f"bench/{i}/", "sess-bench")
        out[name] = med(xs)
    r = out["full"] / out["empty"]
    print(f"in-process acquire CPU: empty {out['empty']:.2f} ms, {args.locks} held {out['full']:.2f} ms: "
          f"{r:.2f}x (target < 2x: {'ok' if r < 2 else 'MISSED'})")


def cycle_ratio(args, tmp: Path) -> None:
    from nika_brain.brain import Brain
    from nika_brain.state import locks
    from nika_brain.support.fsio import atomic_write
    root = tmp / "cycles"
    root.mkdir()
    make_brain(root, 0, 0)
    brain = Brain.at(root)
    n = 200
    lock_rates, base_rates = [], []
    target = root / "locks" / "base.yml"
    target.parent.mkdir(exist_ok=True)
    for _ in range(max(3, args.runs // 3)):
        t = time.perf_counter()
        for _ in range(n):
            locks.acquire(brain, "src/cycle/", "sess-cycle", pid=None)
            locks.release(brain, "src/cycle/", "sess-cycle")
        lock_rates.append(n / (time.perf_counter() - t))
        t = time.perf_counter()
        for _ in range(n):
            atomic_write(target, "scope: x\n", fsync=True)
            os.unlink(target)
        base_rates.append(n / (time.perf_counter() - t))
    lr, br = statistics.median(lock_rates), statistics.median(base_rates)
    print(f"uncontended cycles, fsync on: lock {lr:.0f}/s, atomic write+unlink {br:.0f}/s, "
          f"ratio {lr / br:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--locks", type=int, default=3000)
    ap.add_argument("--claims", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        hook_and_cli(args, Path(tmp))
        acquire_scaling(args, Path(tmp))
        cycle_ratio(args, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
