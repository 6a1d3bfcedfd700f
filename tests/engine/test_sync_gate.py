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
    # a takeover is explicit: machine 1 drives the run from now on
    from nika_brain.state import runs
    assert runs.take_over(m1, "g").driver == "m1"

