"""A gate approved on machine 1 resumes a run driven on machine 2 (issue 22, item 1): two clones of one
brain sharing a bare git remote; the run records its driver (machine 2), so machine 1's approval only
decides the gate; machine 2's daemon sync pulls it and takes the transition; the new state goes out."""
from __future__ import annotations

from nika_brain.brain import Brain
from nika_brain.federation.daemon import syncing
from tests.kit.brain import git_out as git
from tests.kit.machines import install_machine
from tests.kit.orch import nb, orch_brain, run_file

GATED = """name: g
branch: theme/g
chain:
  - step: 1
    type: deploy
    scope: deploy/
    gate: human
"""


def test_a_gate_approved_on_machine_1_resumes_the_run_driven_on_machine_2(tmp_path, git_env):
    seed = orch_brain(tmp_path / "seed", {"g": GATED}, config="sync: {remote: origin, interval: 1}\n")
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(tmp_path / "remote.git"))
    git(seed.root, "remote", "add", "origin", str(tmp_path / "remote.git"))
    git(seed.root, "push", "-q", "origin", "main")
    m = []
    for name in ("m1", "m2"):
        git(tmp_path, "clone", "-q", str(tmp_path / "remote.git"), str(tmp_path / name))
        m.append(install_machine(Brain.at(tmp_path / name), name, seed.root))
    m1, m2 = m
    assert "GATE_PENDING" in nb(m2, "workflow-launch", "g", check=5).stdout
    run = run_file(m2, "g")
    assert run["status"] == "gated" and run["driver"] == "m2"
    nb(m2, "sync", check=0)
    nb(m1, "sync", check=0)
    gate = run_file(m1, "g")["gate"]
    nb(m1, "gate", "approve", gate, check=0)
    assert run_file(m1, "g")["status"] == "gated"  # driven on m2: m1 does not move its cursor
    nb(m1, "sync", check=0)
    svc = syncing.service(m2)
    assert svc.enabled and svc.every == 1.0
    svc.tick()  # what m2's daemon does every sync.interval
    assert svc.resumed == ["g"]
    after = run_file(m2, "g")
    assert after["status"] == "running" and after["claim"] and after["claim"].endswith("g-step-1")
    nb(m1, "sync", check=0)  # machine 2's new state came back through the remote
    assert run_file(m1, "g")["claim"] == after["claim"]


def _two_machines(tmp_path, config: str, names=("m1", "m2")) -> list[Brain]:
    seed = orch_brain(tmp_path / "seed", {"g": GATED}, config=config)
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(tmp_path / "remote.git"))
    git(seed.root, "remote", "add", "origin", str(tmp_path / "remote.git"))
    git(seed.root, "push", "-q", "origin", "main")
    out = []
    for name in names:
        git(tmp_path, "clone", "-q", str(tmp_path / "remote.git"), str(tmp_path / name))
        out.append(install_machine(Brain.at(tmp_path / name), name, seed.root))
    return out


def test_a_takeover_is_the_operators_explicit_act_refused_while_the_driver_is_up(tmp_path, git_env,
                                                                                 redis_server):
    """`workflow takeover`: refused to an agent, refused while the driving machine's daemon heartbeats
    on the bus, taken once its heartbeat expired; journaled and pushed, so the old driver leaves the run
    alone after its pull, and `workflow resume` on a machine that does not drive the run says who does."""
    from nika_brain.federation.daemon import machines as daemon_machines
    from nika_brain.federation.kernels import remote
    from tests.kit.wait import until
    m1, m2 = _two_machines(tmp_path, f"sync: {{remote: origin, interval: 1}}\nbus: redis\nredis_url: {redis_server}\n"
                           "federation: {machine_ttl: 2}\n", names=("tk1", "tk2"))
    assert "GATE_PENDING" in nb(m2, "workflow-launch", "g", check=5).stdout
    nb(m2, "sync", check=0)
    nb(m1, "sync", check=0)
    assert run_file(m1, "g")["driver"] == "tk2"
    refused = nb(m1, "workflow", "resume", "g", check=6)
    assert "driven by machine tk2" in refused.stderr and "workflow takeover g" in refused.stderr
    beat = daemon_machines.MachineService(m2)  # tk2's daemon's machine service: its heartbeat thread
    beat.start()
    try:
        refused = nb(m1, "workflow", "takeover", "g", check=6)
        assert "machine tk2 still drives workflow g" in refused.stderr and "--force" in refused.stderr
        assert "Traceback" not in refused.stderr and run_file(m1, "g")["driver"] == "tk2"
        agent = nb(m1, "workflow", "takeover", "g", "--force", env={"CLAUDECODE": "1"}, check=6)
        assert "operator's decision" in agent.stderr and run_file(m1, "g")["driver"] == "tk2"
    finally:
        beat.stop()  # tk2's daemon stops
    until(lambda: remote.alive(m1, "tk2") is None, what="tk2's heartbeat expired (its daemon is gone)")
    out = nb(m1, "workflow", "takeover", "g", "--note", "tk2 is down", check=0).stdout
    assert "driven by tk1 from now on (was tk2)" in out and "synced" in out
    assert run_file(m1, "g")["driver"] == "tk1"
    from nika_brain.engine import signals
    (rec,) = [r for r in signals.read(m1, workflow="g") if r["type"] == "RUN_TAKEN_OVER"]
    assert rec["payload"] == {"from": "tk2", "to": "tk1", "forced": False, "previous_alive": False}
    assert "tk2 is down" in rec["reason"]
    assert "already driven by this machine" in nb(m1, "workflow", "takeover", "g", check=0).stdout
    # tk2 comes back: after its pull the run is tk1's; deciding the gate there moves nothing on tk2
    nb(m2, "sync", check=0)
    assert run_file(m2, "g")["driver"] == "tk1"
    nb(m2, "gate", "approve", run_file(m2, "g")["gate"], check=0)
    assert syncing.resume_decided(m2) == [] and run_file(m2, "g")["status"] == "gated"
    assert nb(m2, "workflow", "resume", "g", check=6).stderr.count("driven by machine tk1") == 1
    nb(m2, "sync", check=0)
    svc = syncing.service(m1)
    svc.tick()  # tk1's daemon: the gate decided on tk2 resumes the run tk1 now drives
    assert svc.resumed == ["g"] and run_file(m1, "g")["status"] == "running"


def test_a_takeover_without_a_bus_to_tell_needs_force(tmp_path, git_env):
    m1, m2 = _two_machines(tmp_path, "sync: {remote: origin, interval: 1}\n")
    nb(m2, "workflow-launch", "g", check=5)
    nb(m2, "sync", check=0)
    nb(m1, "sync", check=0)
    refused = nb(m1, "workflow", "takeover", "g", check=6)
    assert "cannot tell whether machine m2" in refused.stderr and "--force" in refused.stderr
    assert "(forced)" not in nb(m1, "workflow", "takeover", "g", "--force", check=0).stdout
    assert run_file(m1, "g")["driver"] == "m1"
    bad = nb(m1, "workflow", "takeover", "nope")
    assert bad.returncode != 0 and "nope" in bad.stderr and "Traceback" not in bad.stderr

