"""Kernels anywhere (issue 22, item 3), on one host as three machines: three clones of one brain,
each with its own .nika/ (machine id, daemon, tmux server, stand-in kernels), sharing only a bare git
remote and one redis-server. A verb on machine 1 for a kernel placed on machine 3 travels over the
bus to machine 3's daemon, which runs it and answers; machine 2's daemon killed (-9) makes its
kernels `lost` once its heartbeat expires, its leases freed; a request to it meanwhile is held and
runs once when it comes back (the prompt is neither lost nor delivered twice)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nika_brain.brain import Brain
from nika_brain.engine import sync
from nika_brain.federation.asking import route
from nika_brain.federation.kernels import health, leases, remote, verbs
from nika_brain.state import machine
from nika_brain.state import prompts as queue
from tests.federation.fedkit import STANDIN
from tests.kit.brain import git_out as git
from tests.kit.brain import make_brain
from tests.kit.machines import install_machine, stop_machines
from tests.kit.wait import until

ROOT = Path(__file__).resolve().parents[2]
OFF = ["nika_brain.federation.daemon.embedder:service", "nika_brain.federation.daemon.stealing:service",
       "nika_brain.federation.daemon.schedule:triggers", "nika_brain.federation.daemon.schedule:daily",
       "nika_brain.federation.daemon.retention:service"]


def _config(tmp: Path, url: str, name: str) -> str:
    fed = {"agent_command": [sys.executable, str(STANDIN)], "tmux_socket": str(tmp / f"tmux-{name}.sock"),
           "supervisor": "manual", "deliver_timeout": 30, "kill_grace": 2, "redis_url": url,
           "lease_prefix": f"nika:lease:{tmp.name}:", "machine_ttl": 2,
           "daemon": {"disable": OFF}}
    return (f"version: 1\nlock_poll: 0.01\nbus: redis\nredis_url: {url}\nsync: {{remote: origin}}\n"
            "federation: " + json.dumps(fed) + "\n")


def _daemon(b: Brain, fault: str | None = None, wrap=lambda argv: argv, *, on_bus: bool = True) -> subprocess.Popen:
    """The machine's daemon, started; by default once it is on the bus (`on_bus=False`: at once)."""
    env = {**os.environ, "NIKA_BRAIN_DIR": str(b.root),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("NIKA_FAULT", None)
    if fault:
        env["NIKA_FAULT"] = fault  # a named point where it kills itself (support/faults.py)
    log = open(b.state_dir / "daemon-test.log", "ab")
    p = subprocess.Popen(wrap([sys.executable, "-m", "nika_brain.federation.daemon.host"]), cwd=b.root, env=env,
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    if not on_bus:
        return p
    until(lambda: p.poll() is not None or remote.alive(b, machine.load(b).id) is not None,
          what=f"{b.root.name}'s daemon on the bus")
    assert p.poll() is None, (b.state_dir / "daemon-test.log").read_text()[-2000:]
    return p


@pytest.fixture
def machines(tmp_path, git_env, redis_server):  # noqa: F811
    origin = make_brain(tmp_path / "seed", _config(tmp_path, redis_server, "seed"))
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(tmp_path / "remote.git"))
    git(origin.root, "remote", "add", "origin", str(tmp_path / "remote.git"))
    git(origin.root, "push", "-q", "origin", "main")
    out, procs = [], []
    for name in ("m1", "m2", "m3"):
        git(tmp_path, "clone", "-q", str(tmp_path / "remote.git"), str(tmp_path / name))
        (tmp_path / name / "nika-brain.yml").write_text(_config(tmp_path, redis_server, name))
        git(tmp_path / name, "update-index", "--skip-worktree", "nika-brain.yml")  # its own tmux server
        out.append(install_machine(Brain.at(tmp_path / name), name, origin.root))
    yield out, procs
    stop_machines(tmp_path, procs)


def _spawn(b: Brain, kid: str) -> None:
    verbs.kernel_spawn(b, f"goal of {kid}", kernel_id=kid, sandboxed=False)
    until(lambda: verbs.ready(b, verbs.kernels.load_kernel(b, kid)), what=f"{kid}'s session")
    sync.sync(b)


def test_ask_and_verbs_on_machine_1_reach_a_kernel_on_machine_3(machines, monkeypatch):
    (m1, _m2, m3), procs = machines
    procs += [_daemon(m1), _daemon(m3)]
    _spawn(m3, "k3")
    sync.sync(m1)
    k = verbs.kernels.load_kernel(m1, "k3")
    assert k.machine == "m3" and remote.elsewhere(m1, k) == "m3"
    out = verbs.kernel_invoke(m1, "k3", "what time is it", wait=True, timeout=60)
    assert out["kernel"] == "k3" and out["answer"].startswith("stand-in answer to: what time is it")
    assert not queue.path(m1, "k3").exists() or queue.pending(m1, "k3") == []  # nothing queued on m1
    # ask: the triage's route to k3, delivered and answered through m3's daemon
    monkeypatch.setattr(route, "decide", lambda brain, prompt, sent=None: {"decision": "kernel", "kernels": ["k3"],
                                                                 "reason": "pinned"})
    rec = route.ask(m1, "summarise the backups", wait=True, timeout=60)
    (r,) = rec["routes"]
    assert r["status"] == "answered" and r["answer"].startswith("stand-in answer to: summarise the backups")
    d = verbs.kernel_readjust(m1, "k3", "answer in French")
    assert d.text == "answer in French"
    assert [x.text for x in verbs.kernels.list_directives(m3, "k3")] == ["answer in French"]
    seen = verbs.kernel_observe(m1, "k3", "1h")
    assert seen["kernel"]["id"] == "k3" and seen["kernel"]["machine"] == "m3"
    # a verb's error comes back with its exit code
    with pytest.raises(verbs.BrainError) as exc:
        verbs.kernel_kill(m1, "k3", " ")
    assert "reason" in str(exc.value)
    done = verbs.kernel_kill(m1, "k3", "test over")
    assert done["status"] == "killed" and verbs.kernels.load_kernel(m3, "k3").status == "killed"


def _taken(b: Brain, kid: str, prompt: str) -> list[dict]:
    sha = health.prompt_sha(prompt)
    return [e for e in health.tail_events(b, kid) if e.get("event") == "taken" and e.get("sha") == sha]


def _lock_files(b: Brain) -> list[tuple[str, str]]:
    from nika_brain.state import locks
    return sorted((lk.scope, lk.owner) for lk in locks.list_locks(b))


def test_a_machine_killed_has_its_kernels_lost_its_locks_freed_and_its_prompts_held_once(machines,
                                                                                         monkeypatch):
    """kill -9 of machine 2's daemon at a named point (it ran machine 1's prompt, not acked yet) → k2
    `lost` once its heartbeat expired, its lease freed and its synced lock file dropped on machine 1
    (journaled); prompts for k2 meanwhile are held, and kernel list, federation status and ask show say
    so; machine 2 back → its own lock file of the freed lease dropped (journaled), not resurrected by
    its sync, the held prompts delivered once, the interrupted one not again, no two locks overlap."""
    (m1, m2, _m3), procs = machines
    from tests.kit.orch import nb
    procs.append(_daemon(m1))
    d2 = _daemon(m2, fault="after-remote-request")
    procs.append(d2)
    _spawn(m2, "k2")
    leases.lock_acquire(m2, "src/", "claim-k2", pid=None, ttl=3600)
    sync.sync(m2)  # its lock file travels to the others with the state
    sync.sync(m1)
    assert ("src/", "claim-k2") in _lock_files(m1)
    from nika_brain.cli.kernel import _row
    assert _row(m1, verbs.kernels.load_kernel(m1, "k2"))["status"] == "active"
    out = verbs.kernel_invoke(m1, "k2", "delivered then killed")  # m2's daemon dies right after running it
    assert out["kernel"] == "k2"
    assert d2.wait(timeout=60) == -signal.SIGKILL
    until(lambda: _row(m1, verbs.kernels.load_kernel(m1, "k2"))["status"] == "lost", timeout=60,
          what="k2 lost once m2's heartbeat expired")
    until(lambda: not [v for v in leases.open_leases(m1).held() if v["owner"] == "claim-k2"], timeout=60,
          what="m2's lease freed by m1's daemon")
    until(lambda: ("src/", "claim-k2") not in _lock_files(m1), what="m2's synced lock file dropped on m1")
    from nika_brain.engine import signals

    def freed() -> list[str]:
        return [r["payload"]["scope"] for r in signals.read(m1, types=("LOCK_FREED",))]
    # the daemon journals the drop right after removing the file: wait for the record, then once only
    until(lambda: freed() != [], what="the drop journaled on m1 (LOCK_FREED)")
    assert freed() == ["src/"]
    assert leases.lock_acquire(m1, "src/a.py", "claim-m1", pid=None, ttl=3600).scope == "src/a.py"
    # prompts for k2 meanwhile: held on m2's stream (not re-routed), said so at once and where one looks
    with pytest.raises(remote.Held) as exc:
        verbs.kernel_invoke(m1, "k2", "held while m2 is away")
    assert str(exc.value).startswith("held (machine m2 lost)")
    monkeypatch.setattr(route, "decide", lambda brain, prompt, sent=None: {"decision": "kernel", "kernels": ["k2"],
                                                                 "reason": "pinned"})
    rec = route.ask(m1, "asked while m2 is away")
    assert rec["routes"][0]["status"] == "held" and rec["routes"][0]["machine"] == "m2"
    listed = nb(m1, "kernel", "list", check=0).stdout
    assert "k2\tlost, 2 held (machine lost)\t" in listed
    assert "k2\tlost, 2 held (machine lost)\t" in nb(m1, "federation", "status").stdout
    shown = nb(m1, "ask", "show", rec["ask"]).stdout
    assert "[held]" in shown and "held (machine m2 lost)" in shown
    procs.append(_daemon(m2))  # machine 2 comes back
    assert ("src/", "claim-k2") not in _lock_files(m2)  # dropped before it said it was up
    (dropped,) = signals.read(m2, types=("LOCK_DROPPED",))
    assert dropped["payload"]["scope"] == "src/" and "freed its lease" in dropped["reason"]
    for prompt in ("held while m2 is away", "asked while m2 is away"):
        until(lambda p=prompt: _taken(m2, "k2", p), timeout=90, what=f"{prompt!r} taken on m2")
    until(lambda: remote.held(m1, "k2") == [], what="m2 ran what was held for it")
    assert _row(m1, verbs.kernels.load_kernel(m1, "k2"))["status"] == "active"
    after = json.loads(nb(m1, "ask", "show", rec["ask"], "--json", check=0).stdout)
    assert after["routes"][0]["status"] == "taken" and after["routes"][0]["prompt_id"]
    from nika_brain.federation.asking import record
    stored = json.loads((record.folder(m1) / f"{rec['ask']}.json").read_text())
    assert stored["routes"][0]["status"] == "taken"  # kept after the reply on the bus expires
    procs[-1].terminate()
    procs[-1].wait(timeout=30)
    procs.append(_daemon(m2))  # a second restart runs nothing again
    for b in (m2, m1, m2):
        sync.sync(b)  # m2's dropped lock is not resurrected by the sync, on either clone
    for b in (m1, m2):
        assert _lock_files(b) == [("src/a.py", "claim-m1")]
    for prompt in ("delivered then killed", "held while m2 is away", "asked while m2 is away"):
        assert len(_taken(m2, "k2", prompt)) == 1, prompt
        assert [x for x in queue.pending(m2, "k2") if x["prompt"] == prompt] == []


def test_a_spawn_not_placed_for_its_region_names_the_machine_of_that_region_that_is_up(machines):
    (m1, m2, m3), _procs = machines
    from nika_brain.federation.daemon.machines import MachineService
    for b, region in ((m1, "de"), (m2, "fr"), (m3, "fr")):
        machine.save(b, region=region)
        MachineService(b)._beat()  # what each machine's daemon does every machine_ttl/3
    until(lambda: remote.alive(m1, "m2") is None, what="m2's heartbeat expired (its daemon gone)")
    MachineService(m3)._beat()
    with pytest.raises(verbs.BrainError) as exc:  # with credentials: not placed (they never go on the bus)
        verbs.kernel_spawn(m1, "client data in France", kernel_id="kfr", region="fr", sandboxed=False,
                           env={"API_TOKEN": "secret"})
    msg = str(exc.value)
    assert exc.value.exit_code == 6 and "\n" not in msg and "secret" not in msg
    assert "region fr" in msg and "machine m3 of region fr is up: run this spawn there" in msg
    assert "credentials never travel over the bus" in msg
    assert "m2" not in msg.split(";")[-1] and not verbs.kernels.kernel_dir(m1, "kfr").exists()
    until(lambda: remote.alive(m1, "m3") is None, what="m3's heartbeat expired too")
    with pytest.raises(verbs.BrainError) as exc:
        verbs.kernel_spawn(m1, "client data in France", kernel_id="kfr", region="fr", sandboxed=False)
    assert "no machine of region fr is up (m2, m3 lost)" in str(exc.value)


def test_a_machine_cut_off_from_redis_is_lost_and_reconciles_when_its_path_comes_back(machines,
                                                                                      redis_server):
    """A network partition, not a kill: machine 3 reaches Redis only through its own relay; cut, its
    daemon runs on but its heartbeat expires, so machine 1 frees its lease and takes the scope; the
    path restored, machine 3's daemon (never restarted) drops its lock file of the freed lease
    (journaled) and no sync brings it back beside machine 1's lock."""
    from nika_brain.engine import signals
    from tests.kit.redis import Proxy
    (m1, _m2, m3), procs = machines
    proxy = Proxy(int(redis_server.rsplit(":", 1)[1].split("/")[0]))
    try:
        tmp = m3.root.parent
        (m3.root / "nika-brain.yml").write_text(_config(tmp, proxy.url, "m3"))
        m3 = Brain.at(m3.root)
        procs += [_daemon(m1), _daemon(m3)]
        leases.lock_acquire(m3, "docs/", "claim-k3", pid=None, ttl=3600)
        proxy.cut()
        until(lambda: not remote.machines(m1)["m3"]["up"], what="m3 lost once cut off")
        until(lambda: not [v for v in leases.open_leases(m1).held() if v["owner"] == "claim-k3"],
              what="m3's lease freed by m1's daemon")
        assert leases.lock_acquire(m1, "docs/a.md", "claim-m1", pid=None, ttl=3600).scope == "docs/a.md"
        assert procs[-1].poll() is None  # m3's daemon never stopped
        assert ("docs/", "claim-k3") in _lock_files(m3)
        proxy.restore()
        until(lambda: ("docs/", "claim-k3") not in _lock_files(m3), what="m3's freed lock dropped on return")
        # the daemon removes the file, then journals: wait for the record, not only for the file
        until(lambda: signals.read(m3, types=("LOCK_DROPPED",)), what="m3's LOCK_DROPPED journaled")
        (dropped,) = signals.read(m3, types=("LOCK_DROPPED",))
        assert dropped["payload"]["scope"] == "docs/" and "m1 freed its lease" in dropped["reason"]
        until(lambda: remote.machines(m1)["m3"]["up"], what="m3 up again")
        for b in (m3, m1, m3):
            sync.sync(b)
        for b in (m1, m3):
            assert _lock_files(b) == [("docs/a.md", "claim-m1")]
    finally:
        proxy.cut()


def test_a_machine_whose_redis_is_unreachable_when_its_daemon_starts_joins_once_its_path_is_back(machines,
                                                                                             redis_server):
    """The machine boots in a network outage: its daemon's machine service cannot start (Redis
    unreachable) and says so in the status; it is tried again, and once the path is back the machine
    is on the bus without a restart of its daemon (it used to stay off it until one)."""
    from nika_brain.federation.daemon import host
    from tests.kit.redis import Proxy
    (m1, _m2, m3), procs = machines
    proxy = Proxy(int(redis_server.rsplit(":", 1)[1].split("/")[0]))
    spec = "nika_brain.federation.daemon.machines:service"
    try:
        (m3.root / "nika-brain.yml").write_text(_config(m3.root.parent, proxy.url, "m3"))
        m3 = Brain.at(m3.root)
        until(lambda: not remote.machines(m1).get("m3", {}).get("up"), what="m3 off the bus before the test")
        proxy.cut()
        p = _daemon(m3, on_bus=False)   # it cannot get on the bus: Redis is cut
        procs.append(p)
        error = until(lambda: host.status(m3)["services"].get(spec, {}).get("error"),
                      what="m3's machine service refused")
        assert "did not start" in error and "unreachable" in error and "tried again" in error, error
        assert not remote.machines(m1).get("m3", {}).get("up")
        proxy.restore()
        until(lambda: remote.machines(m1).get("m3", {}).get("up"), what="m3 on the bus once its path is back")
        until(lambda: host.status(m3)["services"].get("machine", {}).get("running"), what="m3's machine service")
        assert p.poll() is None and spec not in host.status(m3)["services"]
    finally:
        proxy.cut()


def test_a_region_fr_kernel_spawned_on_a_machine_elsewhere_is_placed_on_the_fr_machine(machines):
    """Placement by region through the bus: spawned on m1 (region de) while m3 (region fr) is up, the
    kernel is spawned by m3's daemon, on m3; the request carries the operator's signature over what is
    spawned and where, so an unsigned, retargeted or replayed one is refused there and spawns nothing."""
    (m1, _m2, m3), procs = machines
    from nika_brain.state import authority
    from tests.kit.orch import nb
    machine.save(m1, region="de")
    machine.save(m3, region="fr")
    procs.append(_daemon(m3))
    out = nb(m1, "kernel", "spawn", "client data in France", "--id", "kfr", "--region", "fr", "--no-sandbox",
             check=0).stdout
    assert "spawned kfr on machine m3 (region fr: placed there through the bus" in out
    assert not verbs.kernels.kernel_dir(m1, "kfr").exists()
    k = verbs.kernels.load_kernel(m3, "kfr")
    assert (k.machine, k.region) == ("m3", "fr")
    until(lambda: verbs.ready(m3, verbs.kernels.load_kernel(m3, "kfr")), what="kfr's session on m3")
    fields = {"machine": "m3", "kernel": "kforged", "goal": "g", "kw": {"sandboxed": False},
              "at": remote.clock.iso(remote.clock.now()), "nonce": "n1"}
    for sig, why in (("00" * 64, "not signed by the operator"),
                     (authority.sign(m1, remote.SPAWN_KIND, {**fields, "machine": "m2"}), "is for machine m2")):
        spawn = {**fields, "machine": "m2"} if "m2" in why else fields
        with pytest.raises(verbs.BrainError) as exc:
            remote.call(m1, "m3", "kernel_spawn", "kforged", spawn=spawn, signature=sig)
        assert why in str(exc.value) and exc.value.exit_code == 6
    signed = authority.sign(m1, remote.SPAWN_KIND, fields)
    assert remote.call(m1, "m3", "kernel_spawn", "kforged", spawn=fields, signature=signed)
    with pytest.raises(verbs.BrainError) as exc:  # the same signed request again: a replay
        remote.call(m1, "m3", "kernel_spawn", "kforged", spawn=fields, signature=signed)
    assert "replay" in str(exc.value)
    assert sorted(k.id for k in verbs.kernels.list_kernels(m3)) == ["kforged", "kfr"]
