"""Path locks on Redis leases: two clones of one brain (each with its own lock files) sharing one
Redis exclude each other on overlapping scopes; fencing tokens strictly increase; a Redis that goes
away refuses the lock with one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nika_brain.brain import Brain
from nika_brain.errors import EXIT_BUSY, BrainError
from nika_brain.federation.kernels import leases
from nika_brain.state import locks
from tests.kit.brain import git_out as git
from tests.kit.brain import make_brain
from tests.kit.redis import RedisServer, nothing_listening

PROCS, CYCLES = 8, 300


def _config(url: str, prefix: str) -> str:
    return ("version: 1\nlock_poll: 0.005\nfsync: false\nfederation: " +
            json.dumps({"redis_url": url, "lease_prefix": prefix}) + "\n")


def _clones(tmp_path: Path, url: str, prefix: str) -> tuple[Brain, Brain]:
    a = make_brain(tmp_path / "a", _config(url, prefix))
    git(tmp_path, "clone", "-q", str(a.root), str(tmp_path / "b"))
    return a, Brain.at(tmp_path / "b")


def test_two_clones_eight_processes_no_overlap(tmp_path, git_env, redis_server):  # noqa: F811
    a, b = _clones(tmp_path, redis_server, f"nika:lease:{tmp_path.name}:")
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]),
                                                          os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-m", "tests.federation.lease_worker",
                               str((a if i % 2 else b).root), str(markers), str(CYCLES), str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              cwd=Path(__file__).parents[2])
             for i in range(PROCS)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out))
    assert sum(r["overlaps"] for r in results) == 0
    everything = [t for r in results for t in r["tokens"]]
    assert len(everything) == PROCS * CYCLES and len(set(everything)) == len(everything)
    for r in results:
        assert r["tokens"] == sorted(r["tokens"]), "tokens strictly increase"
    assert locks.list_locks(a) == [] and locks.list_locks(b) == []


def test_busy_across_clones_same_exit_code(tmp_path, git_env, redis_server):  # noqa: F811
    a, b = _clones(tmp_path, redis_server, f"nika:lease:{tmp_path.name}:")
    lk = leases.lock_acquire(a, "src/", "claim-a", pid=None)
    assert lk.scope == "src/" and (a.root / "locks").is_dir()
    with pytest.raises(BrainError) as exc:
        leases.lock_acquire(b, "src/x/y.py", "claim-b", pid=None)
    assert exc.value.exit_code == EXIT_BUSY and "claim-a" in str(exc.value)
    status = subprocess.run([sys.executable, "-m", "nika_brain", "lock", "status", "src/x/"], cwd=b.root,
                            capture_output=True, text=True)
    assert status.returncode == 3 and "src/ held by claim-a" in status.stdout
    assert "redis lease" in status.stdout
    shared = leases.lock_acquire(b, "docs/", "claim-b", mode="shared", pid=None)
    assert shared.mode == "shared"
    leases.lock_acquire(a, "docs/", "claim-a", mode="shared", pid=None)  # shared with shared: fine
    with pytest.raises(BrainError):
        leases.lock_renew(b, "src/", "claim-b")  # not its lease
    leases.lock_renew(a, "src/", "claim-a", ttl=60)
    leases.lock_release(a, "src/", "claim-a")
    assert leases.lock_acquire(b, "src/x/y.py", "claim-b", pid=None).scope == "src/x/y.py"
    # an expired lease is taken over (PX), with a higher token
    t1 = leases.last_token(b, "src/x/y.py", "claim-b")
    leases.open_leases(b).renew("src/x/y.py", "claim-b", 0.001)
    import time
    time.sleep(0.01)
    tok, _ = leases.open_leases(a).try_acquire("src/", "claim-c", "exclusive", 5)
    assert tok is not None and tok > t1


def test_redis_gone_mid_run_refuses_with_one_line(tmp_path, git_env, cli):
    server = RedisServer(tmp_path / "r")
    url = server.start()
    try:
        (tmp_path / "brain" / "nika-brain.yml").write_text(_config(url, "nika:lease:"))
        ok = cli("lock", "acquire", "src/", "--owner", "c1")
        assert ok.returncode == 0, ok.stderr
        busy = cli("lock", "acquire", "src/a.py", "--owner", "c2")
        assert busy.returncode == 3 and "redis lease" in busy.stderr
    finally:
        server.stop()
    gone = cli("lock", "acquire", "docs/", "--owner", "c3")
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1 and "redis lease" in gone.stderr
    assert "Traceback" not in gone.stderr
    with nothing_listening() as dead:
        (tmp_path / "brain" / "nika-brain.yml").write_text(_config(dead, "nika:lease:"))
        refused = cli("lock", "acquire", "docs/", "--owner", "c3")
        assert refused.returncode == 1 and "redis lease" in refused.stderr
    assert not any(lk.scope == "docs/" for lk in locks.list_locks(Brain.at(tmp_path / "brain")))
