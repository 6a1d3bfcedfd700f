"""Locks enforced where agents act, across machines (issue 22, item 2): two clones of one brain share
one redis-server; the PreToolUse and pre-commit hooks of clone a see a lock taken on clone b through
the lease mirror a's daemon keeps, and refuse writes (reads go on) when that mirror cannot be
trusted: missing, stale, its daemon gone, Redis unreachable; writes come back when Redis does."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nika_brain.brain import Brain
from nika_brain.federation.kernels import leases, leases_mirror
from nika_brain.state import claims, leasemirror
from tests.federation.test_claim_door import _door  # a real claim door serving this process's tree
from tests.kit.brain import git_out as git
from tests.kit.brain import make_brain
from tests.kit.claude import bound_env, hook
from tests.kit.redis import Proxy, RedisServer
from tests.kit.wait import until

ROOT = Path(__file__).resolve().parents[2]


def _config(url: str, prefix: str, **extra) -> str:
    return ("version: 1\nlock_poll: 0.005\nfsync: false\nfederation: " +
            json.dumps({"redis_url": url, "lease_prefix": prefix, **extra}) + "\n")


def _machines(tmp_path: Path, url: str, **extra) -> tuple[Brain, Brain, str]:
    a = make_brain(tmp_path / "a", _config(url, f"nika:lease:{tmp_path.name}:", **extra))
    (a.root / "src" / "core").mkdir(parents=True)
    (a.root / "src" / "core" / "x.py").write_text("X = 1\n")
    (a.root / "docs").mkdir()
    git(a.root, "add", "-A")
    git(a.root, "commit", "-qm", "src")
    git(tmp_path, "clone", "-q", str(a.root), str(tmp_path / "b"))
    c = claims.open_claim(a, workflow="w", step=1, satellite_type="code", scope=["src/", "docs/"],
                          story_angle="edit core")
    return a, Brain.at(tmp_path / "b"), c.id


def _edit(brain: Brain, claim_id: str, rel: str, door=None):
    """The hook's verdict on an Edit by claim_id's session (`door`: its claim door's socket, the session
    nika-brain started for it: the claim's own locks are its own only then)."""
    env = {**bound_env(brain, claim_id), **({"NIKA_DOOR": str(door)} if door else {})}
    return hook("PreToolUse", {"session_id": "s-mirror", "hook_event_name": "PreToolUse",
                               "cwd": str(brain.root), "tool_name": "Edit",
                               "tool_input": {"file_path": str(brain.root / rel), "old_string": "1",
                                              "new_string": "2"}},
                env=env, cwd=brain.root)


def _read(brain: Brain, claim_id: str, rel: str):
    return hook("PreToolUse", {"session_id": "s-mirror", "hook_event_name": "PreToolUse",
                               "cwd": str(brain.root), "tool_name": "Read",
                               "tool_input": {"file_path": str(brain.root / rel)}},
                env=bound_env(brain, claim_id), cwd=brain.root)


def _mirror_has(brain: Brain, n: int):
    def check():
        try:
            doc = json.loads(leasemirror.path(brain).read_text())
        except (OSError, ValueError):
            return False
        return doc["error"] is None and len(doc["leases"]) == n
    return check


@pytest.fixture
def mirror():
    started = []

    def start(brain: Brain) -> leases_mirror.MirrorService:
        svc = leases_mirror.service(brain)
        svc.start()
        started.append(svc)
        return svc
    yield start
    for svc in started:
        svc.stop()


def test_the_hook_sees_a_lock_taken_on_another_machine(tmp_path, git_env, redis_server, mirror):  # noqa: F811
    a, b, claim_a = _machines(tmp_path, redis_server)
    mirror(a)
    assert _edit(a, claim_a, "src/core/x.py").allowed  # nobody holds it: allowed
    leases.lock_acquire(b, "src/core/", "claim-b", pid=None, ttl=600)  # the CLI on machine b
    until(_mirror_has(a, 1), what="the lease on a's mirror")
    ans = _edit(a, claim_a, "src/core/x.py")
    assert ans.denied, ans.stdout
    assert "claim-b" in ans.reason and "redis lease" in ans.reason
    assert _edit(a, claim_a, "docs/readme.md").allowed   # outside b's scope
    assert _read(a, claim_a, "src/core/x.py").allowed    # reads go on
    leases.lock_release(b, "src/core/", "claim-b")
    until(_mirror_has(a, 0), what="the release on a's mirror")
    assert _edit(a, claim_a, "src/core/x.py").allowed


def test_the_pre_commit_hook_refuses_a_commit_into_another_machines_lock(tmp_path, git_env, redis_server,  # noqa: F811
                                                                        mirror):
    a, b, claim_a = _machines(tmp_path, redis_server)
    mirror(a)
    leases.lock_acquire(b, "src/core/", "claim-b", pid=None, ttl=600)
    until(_mirror_has(a, 1), what="the lease on a's mirror")
    from nika_brain.hooks import git as githook
    conflicts = githook.lock_conflicts(a, ["src/core/x.py", "docs/a.md"], claim_a)
    assert [(p, lk.owner) for p, lk in conflicts] == [("src/core/x.py", "claim-b")]
    assert githook.lock_conflicts(a, ["src/core/x.py"], "claim-b") == []  # its own lock


def test_writes_are_refused_with_the_reason_when_the_mirror_cannot_be_trusted(tmp_path, git_env,  # noqa: F811
                                                                              redis_server, mirror):
    a, _b, claim_a = _machines(tmp_path, redis_server)
    ans = _edit(a, claim_a, "src/core/x.py")   # no daemon, no mirror
    assert ans.denied and "no lease mirror" in ans.reason and "federation up" in ans.reason
    assert _read(a, claim_a, "src/core/x.py").allowed
    svc = mirror(a)
    assert _edit(a, claim_a, "src/core/x.py").allowed
    svc.stop()  # a clean stop removes the mirror: refused again
    assert _edit(a, claim_a, "src/core/x.py").denied
    # a mirror whose daemon was killed (its pid is gone)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    doc = {"v": 1, "pid": dead.pid, "written": time.time(), "redis_ms": 0, "error": None, "leases": []}
    leasemirror.path(a).write_text(json.dumps(doc))
    ans = _edit(a, claim_a, "src/core/x.py")
    assert ans.denied and "is gone" in ans.reason
    # a mirror not refreshed within the bound (a daemon wedged)
    leasemirror.path(a).write_text(json.dumps({**doc, "pid": os.getpid(), "written": time.time() - 60}))
    ans = _edit(a, claim_a, "src/core/x.py")
    assert ans.denied and "stale" in ans.reason
    leasemirror.path(a).write_text("{not json")
    assert _edit(a, claim_a, "src/core/x.py").denied
    assert _read(a, claim_a, "src/core/x.py").allowed


def test_redis_unreachable_refuses_writes_with_the_reason_and_they_come_back_after(tmp_path, git_env, mirror):
    server = RedisServer(tmp_path / "redis")
    url = server.start()
    a, _b, claim_a = _machines(tmp_path, url, lease_mirror_every=0.2)
    try:
        svc = mirror(a)
        assert _edit(a, claim_a, "src/core/x.py").allowed
        port = server.port
        server.stop()
        until(lambda: json.loads(leasemirror.path(a).read_text()).get("error"), what="the mirror's error")
        ans = _edit(a, claim_a, "src/core/x.py")
        assert ans.denied and "redis unreachable" in ans.reason, ans.reason
        assert _read(a, claim_a, "src/core/x.py").allowed
        again = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                  "--appendonly", "no"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        try:
            until(_mirror_has(a, 0), what="the mirror back once redis answers")
            until(lambda: svc.error is None, what="the daemon's service clear of its error")
            assert _edit(a, claim_a, "src/core/x.py").allowed
        finally:
            again.kill()
            again.wait()
    finally:
        server.stop()


def test_redis_cut_for_one_machine_refuses_that_machines_writes_only_and_they_come_back(
        tmp_path, git_env, redis_server, mirror):  # noqa: F811
    """Redis unreachable for ONE machine (its own path to the shared server is cut; the server runs on):
    its agents' writes are refused by the PreToolUse hook with the reason, its CLI cannot lock, reads go
    on; the other machine's mirror, hook and locks go on; restored, it sees what was taken meanwhile."""
    a, b, claim_a = _machines(tmp_path, redis_server, lease_mirror_every=0.2)
    proxy = Proxy(int(redis_server.rsplit(":", 1)[1].split("/")[0]))
    try:
        (b.root / "nika-brain.yml").write_text(_config(proxy.url, f"nika:lease:{tmp_path.name}:",
                                                       lease_mirror_every=0.2))
        b = Brain.at(b.root)  # machine b reaches Redis only through its proxy
        claim_b = claims.open_claim(b, workflow="w", step=2, satellite_type="code", scope=["src/", "docs/"],
                                    story_angle="edit docs").id
        mirror(a)
        svc_b = mirror(b)
        assert _edit(a, claim_a, "src/core/x.py").allowed and _edit(b, claim_b, "docs/b.md").allowed
        proxy.cut()
        until(lambda: json.loads(leasemirror.path(b).read_text()).get("error"), what="b's mirror error")
        ans = _edit(b, claim_b, "docs/b.md")
        assert ans.denied and "redis unreachable" in ans.reason, ans.reason
        assert _read(b, claim_b, "docs/b.md").allowed
        with pytest.raises(leases.BrainError) as exc:
            leases.lock_acquire(b, "docs/", claim_b, pid=None)
        assert "Traceback" not in str(exc.value) and exc.value.exit_code == 1
        # machine a goes on: its mirror is fresh, its agents write, its CLI locks
        assert json.loads(leasemirror.path(a).read_text())["error"] is None
        assert _edit(a, claim_a, "src/core/x.py").allowed
        leases.lock_acquire(a, "src/core/", claim_a, pid=None, ttl=600)
        until(_mirror_has(a, 1), what="a's lease on a's mirror")
        assert _edit(a, claim_a, "src/core/x.py").denied   # its own lock, but no door: not its session's
        door, sock = _door(a, claim_a, os.getpid())        # the session nika-brain started for claim_a
        try:
            assert _edit(a, claim_a, "src/core/x.py", door=sock).allowed  # its own lock
        finally:
            door.stdin.write("end\n")
            door.stdin.close()
            door.wait(timeout=60)
        assert _edit(b, claim_b, "docs/b.md").denied       # b still cut off
        proxy.restore()
        until(_mirror_has(b, 1), what="b's mirror back, with the lease a took meanwhile")
        until(lambda: svc_b.error is None, what="b's service clear of its error")
        assert _edit(b, claim_b, "docs/b.md").allowed
        ans = _edit(b, claim_b, "src/core/x.py")
        assert ans.denied and claim_a in ans.reason and "redis lease" in ans.reason
        assert leases.lock_acquire(b, "docs/", claim_b, pid=None).scope == "docs/"
    finally:
        proxy.cut()


def test_eight_agents_across_three_machines_hook_calls_and_cli_acquires_never_overlap(tmp_path, git_env,  # noqa: F811
                                                                                     redis_server, mirror):
    import random
    import threading

    from nika_brain.state import scopes
    a, b, claim_a = _machines(tmp_path, redis_server)
    git(tmp_path, "clone", "-q", str(a.root), str(tmp_path / "c"))
    c = Brain.at(tmp_path / "c")
    ms = [a, b, c]
    bound = {a.root: claim_a}
    for m in (b, c):  # each machine's agents work under a claim of their own machine
        bound[m.root] = claims.open_claim(m, workflow="w", step=1, satellite_type="code",
                                          scope=["src/", "docs/"], story_angle="edit").id
    for m in ms:
        mirror(m)
    holds: list[tuple[str, float, float]] = []
    calls: list[tuple[str, float, float, bool]] = []
    paths = ["src/core/x.py", "src/a.py", "docs/x.md"]
    lock_scopes = ["src/", "src/core/", "src/a.py", "docs/", "docs/x.md"]
    errors: list[BaseException] = []

    def cli(i: int) -> None:  # an orchestrator's `lock acquire`, held while its step runs
        rnd = random.Random(i)
        try:
            for _ in range(3):
                scope = rnd.choice(lock_scopes)
                m = ms[i % 3]
                leases.lock_acquire(m, scope, f"cli-{i}", wait=600.0, pid=None, ttl=600)
                t_acq = time.monotonic()
                time.sleep(2.0)  # its step's work (a hook call may fall inside)
                t_rel = time.monotonic()
                holds.append((scope, t_acq, t_rel))
                leases.lock_release(m, scope, f"cli-{i}")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def agent(i: int) -> None:  # an agent's Edit, through the machine's PreToolUse hook
        rnd = random.Random(100 + i)
        try:
            for _ in range(3):
                m, rel = ms[i % 3], rnd.choice(paths)
                t0 = time.monotonic()
                ans = _edit(m, bound[m.root], rel)
                calls.append((rel, t0, time.monotonic(), ans.allowed))
                assert ans.allowed or ans.denied, ans.stdout + ans.stderr
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
    threads = [threading.Thread(target=cli, args=(i,)) for i in range(4)] + \
              [threading.Thread(target=agent, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(holds) == 12 and len(calls) == 12
    # two holders never at once on overlapping scopes, on any machine
    for i, (s1, a1, r1) in enumerate(holds):
        for s2, a2, r2 in holds[i + 1:]:
            assert not (scopes.scopes_overlap(s1, s2) and a1 < r2 and a2 < r1), (s1, s2)
    # no edit allowed while another machine's lock covered the path for the whole call
    bad = [(rel, s) for rel, t0, t1, ok in calls if ok
           for s, ta, tr in holds if ta <= t0 and t1 <= tr and scopes.covers(s, rel)]
    assert bad == []
