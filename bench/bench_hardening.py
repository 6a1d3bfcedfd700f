"""The figures of issues 10 and 25 (hardening), CPU time of whole processes as agents and scripts pay it.

Every process runs in a brain made by `nika-brain init`; each round runs a bare `python -c pass` and
every case once (interleaved), and each case is judged by the paired ratios (min / median / max):
  1. PreToolUse (an allowed Edit) on a brain with 3,000 locks and 2,000 open claims vs the same hook
     on an empty brain (target: under 1.2x). Nothing is prebuilt or cached (the hook finds the locks
     that may cover a path from the lock files' names), and a separate case gives every lock file a new
     inode and the folder a new mtime before each run (the first tool call after a clone or a checkout).
  2. one in-process `locks.acquire` with 3,000 locks held vs an empty brain (target: under 2x)
  3. `nika-brain lock acquire` and releasing the shell's own claim's lock (`lock release` with
     NIKA_CLAIM = the owner: outside a door, the operator's key check, no signature), `lock list`
     and `claim list`, vs `python -c pass` (each at most 3x, issue 25)
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
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from isolation import own_operator_home

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from paired import cpu_of as cpu_once  # noqa: E402
from paired import judge  # noqa: E402

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
    subprocess.run([sys.executable, "-m", "nika_brain", "init", str(root)], check=True, capture_output=True)
    (root / "brain" / "KERNEL.md").write_text(KERNEL_MD)
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
    return claim.id


def med(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def hook_and_cli(args, tmp: Path) -> bool:
    env0 = dict(os.environ)
    env0.pop("PYTHONDONTWRITEBYTECODE", None)
    env0["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    env0["PYTHONPATH"] = str(ROOT)
    brains = {}
    for name, (nl, nc) in {"empty": (0, 0), "full": (args.locks, args.claims)}.items():
        root = tmp / name
        claim_id = make_brain(root, nl, nc)
        env = dict(env0, NIKA_BRAIN_DIR=str(root), NIKA_CLAIM=claim_id)
        edit = {"session_id": "bench", "cwd": str(root), "hook_event_name": "PreToolUse",
                "tool_name": "Edit", "tool_input": {"file_path": str(root / "src/auth/login.py"),
                                                    "old_string": "a", "new_string": "b"}}
        brains[name] = (env, json.dumps(edit).encode(), claim_id, root)
    hook = [sys.executable, "-m", "nika_brain", "hook", "PreToolUse"]
    nb = [sys.executable, "-m", "nika_brain"]
    env_e, _, own, _ = brains["empty"]
    env_f, edit_f, _, root_f = brains["full"]
    def first_call() -> float:
        for p in sorted((root_f / "locks").iterdir()):   # as after a clone: new inodes, a new folder mtime
            text = p.read_bytes()
            p.unlink()
            p.write_bytes(text)
        (root_f / ".nika" / "locks.index").unlink(missing_ok=True)   # an older version's cache
        return cpu_once(hook, env_f, edit_f)

    full_name = f"PreToolUse, {args.locks} locks + {args.claims} claims"
    cases = {
        "PreToolUse, empty brain": lambda: cpu_once(hook, env_e, brains["empty"][1]),
        full_name: lambda: cpu_once(hook, env_f, edit_f),
        full_name + ", first call after a clone": first_call,
        "CLI lock acquire (own claim)": lambda: cpu_once(nb + ["lock", "acquire", "bench/x/", "--owner", own,
                                                               "--no-pid"], env_e),
        "CLI lock release (own lock)": lambda: cpu_once(nb + ["lock", "release", "bench/x/", "--owner", own],
                                                        env_e),
        "CLI lock list": lambda: cpu_once(nb + ["lock", "list"], env_e),
        "CLI claim list": lambda: cpu_once(nb + ["claim", "list"], env_e),
    }
    base_name = "python -c pass"
    for fn in cases.values():   # warm the bytecode cache; cpu_once stops on a failed answer
        fn()
    times: dict[str, list[float]] = {n: [] for n in (base_name, *cases)}
    for r in range(args.runs):   # the baseline first in even rounds, last in odd ones
        if r % 2 == 0:
            times[base_name].append(cpu_once([sys.executable, "-c", "pass"], env_e))
        for name, fn in cases.items():   # (the release follows its acquire)
            times[name].append(fn())
        if r % 2:
            times[base_name].append(cpu_once([sys.executable, "-c", "pass"], env_e))
    print(f"process CPU (user+sys), {args.runs} interleaved rounds (python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f})")
    base = times[base_name]
    ok = judge(f"{full_name} / the same hook on an empty brain (issue 10: <= 1.2x)",
               times["PreToolUse, empty brain"], times[full_name], ratio=1.2, base_name="empty brain")
    ok &= judge(f"{full_name}, first call after a clone / empty brain (<= 1.2x)",
                times["PreToolUse, empty brain"], times[full_name + ", first call after a clone"], ratio=1.2,
                base_name="empty brain")
    for name in ("CLI lock acquire (own claim)", "CLI lock release (own lock)", "CLI lock list", "CLI claim list"):
        ok &= judge(f"{name} (<= 3x python -c pass)", base, times[name], ratio=3.0)
    return ok


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
        ok = hook_and_cli(args, Path(tmp))
        acquire_scaling(args, Path(tmp))
        cycle_ratio(args, Path(tmp))
    print("goals of the process figures: " + ("met" if ok else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    with own_operator_home():
        sys.exit(main())
