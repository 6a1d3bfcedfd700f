"""One brain on several machines (issue 22), on one host: clones of one brain sharing a bare git remote
and one redis-server (started here).

  hook     the PreToolUse hook (an allowed Edit) in a clone whose locks are Redis leases, reading the
           lease mirror its daemon keeps (20 leases of another machine in it), paired run by run with
           the same hook in the same clone without `federation.redis_url` (local locks only). CPU time
           of each process and wall time; goal: median paired ratio <= 1.3x.
  ask      `kernel invoke --wait` (what each route of `ask` does) of a stand-in kernel on machine 3,
           from machine 3 itself and from machine 1 (over the bus, machine 3's daemon delivering),
           interleaved; medians and the paired ratio.
  gate     a gate approved on machine 1 until machine 2 has it: `gate approve` + machine 1's sync,
           then machine 2's sync as its daemon does it (the sync interval comes on top: at most
           `sync.interval` seconds, 30 by default).

    python bench/bench_machines.py [--runs 30] [--only hook,ask,gate]
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

from paired import cpu_of, judge, pairs  # noqa: E402


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def bench_hook(tmp: Path, url: str, runs: int) -> bool:
    from nika_brain.brain import Brain
    from nika_brain.federation.kernels import leases, leases_mirror
    from nika_brain.state import claims
    from tests.kit.brain import make_brain
    prefix = "nika:lease:bench:"
    local_cfg = "version: 1\nlock_poll: 0.005\nfsync: false\n"
    fed_cfg = local_cfg + "federation: " + json.dumps({"redis_url": url, "lease_prefix": prefix}) + "\n"
    a = make_brain(tmp / "a", fed_cfg)
    (a.root / "src" / "core").mkdir(parents=True)
    (a.root / "src" / "core" / "x.py").write_text("X = 1\n")
    _git(a.root, "add", "-A")
    _git(a.root, "commit", "-qm", "src")
    _git(tmp, "clone", "-q", str(a.root), str(tmp / "b"))
    b = Brain.at(tmp / "b")
    for i in range(20):
        leases.lock_acquire(b, f"docs/d{i}/", f"claim-b{i}", pid=None, ttl=3600)
    c = claims.open_claim(a, workflow="w", step=1, satellite_type="code", scope=["src/"], story_angle="x")
    svc = leases_mirror.service(a)
    svc.start()
    payload = json.dumps({"session_id": "s-bench", "hook_event_name": "PreToolUse", "cwd": str(a.root),
                          "tool_name": "Edit", "tool_input": {"file_path": str(a.root / "src/core/x.py"),
                                                              "old_string": "1", "new_string": "2"}}).encode()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NIKA_", "CLAUDE"))}
    env.update(NIKA_BRAIN_DIR=str(a.root), NIKA_CLAIM=c.id, PYTHONPATH=str(ROOT),
               PYTHONPYCACHEPREFIX=str(tmp / "pycache"))
    cmd = [sys.executable, "-m", "nika_brain", "hook", "PreToolUse"]
    cfg = a.root / "nika-brain.yml"

    def run(text: str) -> tuple[float, float]:
        cfg.write_text(text)
        t0 = time.perf_counter()
        cpu = cpu_of(cmd, env, payload, cwd=str(a.root))
        return cpu, time.perf_counter() - t0
    for text in (local_cfg, fed_cfg):  # warm the bytecode cache; the allow is an allow
        cfg.write_text(text)
        out = subprocess.run(cmd, input=payload, env=env, cwd=a.root, capture_output=True)
        assert out.returncode == 0 and not out.stdout.strip(), (out.stdout, out.stderr)
    walls: dict[str, list[float]] = {"local": [], "leases": []}

    def local() -> float:
        cpu, wall = run(local_cfg)
        walls["local"].append(wall)
        return cpu

    def remote() -> float:
        cpu, wall = run(fed_cfg)
        walls["leases"].append(wall)
        return cpu
    base, xs = pairs(runs, local, remote)
    svc.stop()
    ok = judge("PreToolUse CPU, remote leases (mirror) vs local-only", base, xs, ratio=1.3,
               base_name="local-only")
    judge("PreToolUse wall, remote leases (mirror) vs local-only", walls["local"], walls["leases"],
          base_name="local-only")
    return ok


def bench_ask(tmp: Path, url: str, runs: int) -> None:
    import shutil

    from nika_brain.brain import Brain
    from nika_brain.engine import sync
    from nika_brain.federation.kernels import verbs
    from nika_brain.state import authority, machine
    from tests.federation import test_machines as tm
    from tests.kit.brain import make_brain
    seed = make_brain(tmp / "seed", tm._config(tmp, url, "seed"))
    _git(tmp, "init", "-q", "--bare", "-b", "main", str(tmp / "remote.git"))
    _git(seed.root, "remote", "add", "origin", str(tmp / "remote.git"))
    _git(seed.root, "push", "-q", "origin", "main")
    ms = []
    for name in ("m1", "m3"):
        _git(tmp, "clone", "-q", str(tmp / "remote.git"), str(tmp / name))
        (tmp / name / "nika-brain.yml").write_text(tm._config(tmp, url, name))
        _git(tmp / name, "update-index", "--assume-unchanged", "nika-brain.yml")
        b = Brain.at(tmp / name)
        machine.save(b, machine_id=name)
        for src, dst in zip(authority.key_paths(seed.root), authority.key_paths(b.root)):
            shutil.copyfile(src, dst)
            dst.chmod(0o600)
        ms.append(b)
    m1, m3 = ms
    procs = [tm._daemon(m1), tm._daemon(m3)]
    try:
        tm._spawn(m3, "k3")
        sync.sync(m1)

        def on(b):
            def go() -> float:
                t0 = time.perf_counter()
                out = verbs.kernel_invoke(b, "k3", f"ping {time.perf_counter()}", wait=True, timeout=120)
                assert out["answer"].startswith("stand-in answer to: ping")
                return time.perf_counter() - t0
            return go
        base, xs = pairs(runs, on(m3), on(m1))
        judge("kernel invoke --wait: from machine 1 (over the bus) vs on machine 3", base, xs,
              base_name="on machine 3")
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        subprocess.run(["tmux", "-S", str(tmp / "tmux-m3.sock"), "kill-server"], capture_output=True)


def bench_gate(tmp: Path, runs: int) -> None:
    from nika_brain.brain import Brain
    from nika_brain.engine import service, sync
    from nika_brain.federation.daemon import syncing
    from nika_brain.state import authority, gates, machine
    from tests.kit.orch import orch_brain
    wf = "name: g\nbranch: theme/g\nchain:\n  - step: 1\n    type: deploy\n    scope: deploy/\n    gate: human\n"
    seed = orch_brain(tmp / "seed", {"g": wf}, config="sync: {remote: origin, interval: 1}\n")
    _git(tmp, "init", "-q", "--bare", "-b", "main", str(tmp / "remote.git"))
    _git(seed.root, "remote", "add", "origin", str(tmp / "remote.git"))
    _git(seed.root, "push", "-q", "origin", "main")
    ms = []
    for name in ("m1", "m2"):
        _git(tmp, "clone", "-q", str(tmp / "remote.git"), str(tmp / name))
        b = Brain.at(tmp / name)
        machine.save(b, machine_id=name)
        for src, dst in zip(authority.key_paths(seed.root), authority.key_paths(b.root)):
            dst.write_bytes(src.read_bytes())
            dst.chmod(0o600)
        ms.append(b)
    m1, m2 = ms
    took = []
    for i in range(runs):
        gid = f"gate-bench-{i}"
        gates.open_gate(m2, gid, "go?")
        sync.sync(m2)
        sync.sync(m1)
        t0 = time.perf_counter()
        service.decide_gate(m1, gid, "approved")
        sync.sync(m1)
        syncing.service(m2).tick()
        took.append(time.perf_counter() - t0)
        assert not gates.load_gate(m2, gid).pending
    print(f"gate approved on m1 -> decided on m2 (approve + 2 syncs, sync interval excluded): "
          f"min {min(took):.2f} / median {statistics.median(took):.2f} / max {max(took):.2f} s (n={runs})")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--only", default="hook,ask,gate")
    args = ap.parse_args()
    only = set(args.only.split(","))
    from tests.kit.redis import RedisServer
    ok = True
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        os.environ.setdefault("GIT_AUTHOR_NAME", "bench")
        os.environ.setdefault("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        os.environ.setdefault("GIT_COMMITTER_NAME", "bench")
        os.environ.setdefault("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        os.environ["HOME"] = str(tmp / "home")
        (tmp / "home").mkdir()
        from nika_brain.state import operator_home
        operator_home.passwd_home = lambda: str(tmp / "home")  # keys out of the real home, as the tests do
        print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
        if "hook" in only:
            server = RedisServer(tmp / "redis")
            url = server.start()
            try:
                (tmp / "h").mkdir()
                ok &= bench_hook(tmp / "h", url, args.runs)
            finally:
                server.stop()
        if "ask" in only:
            server = RedisServer(tmp / "redis-ask")
            url = server.start()
            try:
                (tmp / "a").mkdir()
                bench_ask(tmp / "a", url, max(2, args.runs // 3))
            finally:
                server.stop()
        if "gate" in only:
            (tmp / "g").mkdir()
            bench_gate(tmp / "g", max(1, args.runs // 6))
    return 0 if ok else 1


if __name__ == "__main__":
    with own_operator_home():
        raise SystemExit(main())
