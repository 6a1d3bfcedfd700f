"""End-to-end: the kernel-orchestrator loop driven through the real CLI, in real git repositories."""
from __future__ import annotations

import pytest

from nika_brain.support import faults
from nika_brain.support.yamlsafe import load_file
from tests.kit.brain import git_out as git
from tests.kit.orch import BREAKER, journal, nb, open_claim_id, orch_brain, run_file, worktree

FOUR = """name: four
branch: theme/four
test: "test -f src/a/done"
chain:
  - step: 1
    type: code
    scope: src/a/
    story_angle: create src/a/done
    test: "test -f src/a/done"
  - step: 2
    type: brain-write
    scope: docs/
    on_partial: gate:human → "step 2 partiel — continuer ?"
  - step: 3
    type: search
    scope: notes/
  - step: 4
    type: deploy
    scope: deploy/
    gate: human
"""


def _write(brain, branch, rel, text="x\n"):
    p = worktree(brain, branch) / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_four_steps_through_ok_partial_failed_and_gated_paths(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"four": FOUR})
    out = nb(brain, "workflow-launch", "workflows/four.yml", check=0)
    assert "# Brief — four / step 1 (code)" in out.stdout
    c1 = open_claim_id(brain, "four")
    assert c1.startswith("sess-") and c1.endswith("-four-step-1")
    assert f"nika-brain claim close {c1} --status" in out.stdout
    # The theme branch has its own worktree; the scope is locked by the claim.
    assert git(worktree(brain, "theme/four"), "branch", "--show-current") == "theme/four"
    lock = load_file(next((brain.root / "locks").glob("*.yml")))
    assert lock["owner"] == c1 and lock["scope"] == "src/a/"

    # Validated close: a red test keeps the claim open, and commits nothing.
    _write(brain, "theme/four", "src/a/wip")
    red = nb(brain, "claim", "close", c1, "--status", "ok", "--summary", "not yet", check=4)
    assert "tests not green" in red.stderr and "Traceback" not in red.stderr
    assert load_file(brain.root / "claims" / f"{c1}.yml")["status"] == "open"
    assert git(brain.root, "log", "-1", "--format=%s", "theme/four") == "brain for tests"
    _write(brain, "theme/four", "src/a/done")
    nb(brain, "claim", "close", c1, "--status", "ok", "--summary", "made done", check=0)
    closed = load_file(brain.root / "claims" / f"{c1}.yml")
    assert closed["status"] == "closed" and closed["result"]["tests"]["failed"] == 0
    assert not list((brain.root / "locks").glob("*.yml")), "the step's locks are released"
    assert git(brain.root, "log", "-1", "--format=%s", "theme/four") == "four step 1: made done"

    # Partial → gate:human; rejection would abort, approval goes on.
    nb(brain, "workflow-launch", "four", check=0)
    c2 = open_claim_id(brain, "four")
    nb(brain, "claim", "close", c2, "--status", "partial", "--summary", "half", check=0)
    run = run_file(brain, "four")
    assert run["status"] == "gated"
    gate = run["gate"]
    assert load_file(brain.root / "gates" / f"{gate}.yml")["message"] == "step 2 partiel — continuer ?"
    assert nb(brain, "workflow-launch", "four").returncode == 5  # still waiting on the human
    # An agent cannot approve its own gate.
    refused = nb(brain, "gate", "approve", gate, env={"CLAUDECODE": "1"}, check=6)
    assert "agent session" in refused.stderr
    nb(brain, "gate", "approve", gate, check=0)
    assert load_file(brain.root / "gates" / f"{gate}.yml")["decided_by"]

    # Failed → default on_fail signal:BLOCKED_ON: the run halts until a human says --retry or --skip.
    nb(brain, "workflow-launch", "four", check=0)
    c3 = open_claim_id(brain, "four")
    assert c3.endswith("step-3")
    nb(brain, "claim", "close", c3, "--status", "failed", "--summary", "no source found", check=0)
    assert run_file(brain, "four")["status"] == "blocked"
    assert nb(brain, "claim", "close", c3, "--status", "ok", check=6).stderr.count("\n") == 1
    assert "--retry" in nb(brain, "workflow-launch", "four", check=4).stdout
    nb(brain, "workflow", "resume", "four", "--retry", check=0)
    c3b = open_claim_id(brain, "four")
    assert c3b != c3 and "step-3" in c3b
    nb(brain, "claim", "close", c3b, "--status", "ok", "--summary", "found", check=0)

    # Step 4 has gate: human before it runs.
    gated = nb(brain, "workflow-launch", "four", check=5)
    assert "GATE_PENDING" in gated.stdout
    nb(brain, "gate", "approve", run_file(brain, "four")["gate"], check=0)
    nb(brain, "workflow-launch", "four", check=0)
    c4 = open_claim_id(brain, "four")
    assert c4.endswith("step-4")
    assert load_file(brain.root / "claims" / f"{c4}.yml")["satellite_level"] == "leaf"
    _write(brain, "theme/four", "deploy/v1")
    done = nb(brain, "claim", "close", c4, "--status", "ok", "--summary", "deployed", check=0)
    assert "closed" in done.stdout and "DONE" in done.stdout  # the last close finishes the run
    final = nb(brain, "workflow-launch", "four", check=0)
    assert "DONE" in final.stdout

    run = run_file(brain, "four")
    assert run["status"] == "done"
    assert run["report"]["delivered"] == ["1", "3", "4"] and run["report"]["partial"] == ["2"]
    assert len(run["report"]["gates"]) == 2
    parents = git(brain.root, "log", "-1", "--format=%P", run["report"]["merge"]).split()
    assert len(parents) == 2, "theme branch merged with --no-ff"
    assert (brain.root / "src" / "a" / "done").exists()
    types = [r["type"] for r in journal(brain, "four")]
    for t in ("STEP_DONE", "GATE_PENDING", "BLOCKED_ON", "DONE"):
        assert t in types
    assert not list((brain.root / "locks").glob("*.yml"))
    status = nb(brain, "workflow", "status", "four", check=0).stdout
    assert "done" in status and "step 2: partial" in status


ATOMIC = """name: atom
branch: theme/atom
chain:
  - step: 1
    type: code
    scope: src/
  - step: 2
    type: search
    scope: notes/
"""


def test_code_step_without_tests_goes_to_a_human_gate_and_leaf_closes_at_once(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"atom": ATOMIC})
    nb(brain, "workflow-launch", "atom", check=0)
    c1 = open_claim_id(brain, "atom")
    nb(brain, "claim", "close", c1, "--status", "ok", "--empty", check=0)
    run = run_file(brain, "atom")
    assert run["status"] == "gated"
    g = load_file(brain.root / "gates" / f"{run['gate']}.yml")
    assert g["reason"] == "no-tests"
    nb(brain, "gate", "reject", run["gate"], check=0)
    out = nb(brain, "workflow-launch", "atom", check=6)
    assert "ABORT" in out.stdout
    assert run_file(brain, "atom")["status"] == "aborted"
    assert "ABORT" in [r["type"] for r in journal(brain, "atom")]



def test_breaker_trips_on_third_consecutive_failure_and_needs_a_human_reset(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"brk": BREAKER})
    ids = []
    for i in range(3):
        nb(brain, "workflow-launch", "brk", check=0)
        ids.append(open_claim_id(brain, "brk"))
        nb(brain, "claim", "close", ids[-1], "--status", "failed", "--summary", f"fail {i}", check=0)
        expected = "running" if i < 2 else "breaker"
        assert run_file(brain, "brk")["status"] == expected
    assert len(set(ids)) == 3
    assert "CIRCUIT_BREAK" in [r["type"] for r in journal(brain, "brk")]
    b = load_file(next((brain.root / "breakers").glob("*.yml")))
    assert b["fails"] == 3 and b["tripped"] is True
    # Never an automatic relaunch: launching again stays stopped, preflight names the breaker.
    again = nb(brain, "workflow-launch", "brk", check=4)
    assert "CIRCUIT_BREAK" in again.stdout
    assert run_file(brain, "brk")["claim"] is None
    pre = nb(brain, "preflight", "check", "src/x.py", "project", check=4)
    assert "circuit breaker tripped on src/" in pre.stdout
    assert nb(brain, "preflight", "reset", "src/", env={"CLAUDECODE": "1"}, check=6)
    nb(brain, "preflight", "reset", "src/", check=0)
    assert not list((brain.root / "breakers").glob("*.yml"))
    assert nb(brain, "preflight", "check", "src/x.py", "project", check=0)
    nb(brain, "workflow-launch", "brk", check=0)
    c = open_claim_id(brain, "brk")
    assert c not in ids
    nb(brain, "claim", "close", c, "--status", "ok", check=0)
    assert nb(brain, "workflow-launch", "brk", check=0)
    assert run_file(brain, "brk")["status"] == "done"


CONFLICT = """name: conf
branch: theme/conf
chain:
  - step: 1
    type: search
    scope: shared.txt
"""


def test_merge_conflict_blocks_with_the_conflicting_paths(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"conf": CONFLICT}, files={"shared.txt": "base\n"})
    nb(brain, "workflow-launch", "conf", check=0)
    _write(brain, "theme/conf", "shared.txt", "theme side\n")
    (brain.root / "shared.txt").write_text("main side\n")
    git(brain.root, "commit", "-qam", "main edits shared.txt")
    nb(brain, "claim", "close", open_claim_id(brain, "conf"), "--status", "ok", check=0)
    out = nb(brain, "workflow-launch", "conf", check=4)
    assert "merge conflict on shared.txt" in out.stdout
    run = run_file(brain, "conf")
    assert run["status"] == "blocked" and "shared.txt" in run["reason"]
    assert (brain.root / "shared.txt").read_text() == "main side\n"
    assert not (brain.root / ".git" / "MERGE_HEAD").exists()
    assert any(r["type"] == "BLOCKED_ON" and "shared.txt" in r["reason"] for r in journal(brain, "conf"))


CRASH = """name: crash
branch: theme/crash
chain:
  - step: 1
    type: search
    scope: notes/
    on_done: gate:human → "go on?"
  - step: 2
    type: search
    scope: docs/
"""


@pytest.mark.parametrize("point", faults.POINTS)
def test_kill_at_every_step_boundary_resumes_without_rerun_or_leak(tmp_path, git_env, point):
    brain = orch_brain(tmp_path / "b", {"crash": CRASH})
    fault = {"NIKA_FAULT": point}
    killed = 0

    def launch():
        nonlocal killed
        p = nb(brain, "workflow-launch", "crash", env=fault)
        if p.returncode == -9:
            killed += 1
            p = nb(brain, "workflow-launch", "crash")
        return p

    def close(status="ok"):
        nonlocal killed
        claim = open_claim_id(brain, "crash")
        _write(brain, "theme/crash", f"notes/{claim}.md")
        p = nb(brain, "claim", "close", claim, "--status", status, env=fault)
        if p.returncode == -9:
            killed += 1
            nb(brain, "workflow", "resume", "crash")
        return claim

    launch()
    close()
    gate = run_file(brain, "crash")["gate"]
    assert gate, run_file(brain, "crash")
    nb(brain, "gate", "approve", gate, check=0)
    launch()
    close()
    launch()
    assert killed >= 1, f"fault point {point} was never reached"
    run = run_file(brain, "crash")
    assert run["status"] == "done", run
    claims = [load_file(p) for p in (brain.root / "claims").glob("*.yml")]
    per_step = {}
    for c in claims:
        per_step.setdefault(str(c["step"]), []).append(c)
    assert sorted(per_step) == ["1", "2"]
    assert all(len(v) == 1 for v in per_step.values()), "no step ran twice"
    assert all(c["status"] == "closed" for c in claims)
    assert not list((brain.root / "locks").glob("*.yml")), "no lock leaked"
    merges = git(brain.root, "log", "--merges", "--format=%H").split()
    assert len(merges) == 1
