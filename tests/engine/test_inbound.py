"""Inbound signals ORCHESTRATE {workflow, step, context}, ADAPT {workflow, changes} and
ABORT {workflow, reason}: from the CLI, and from the bus inbox (the embedded SQLite bus, a real file)
consumed by `nika-brain workflow listen --once`. Satellites are tests/satellite_program.py, a real
small program standing in for Claude Code."""
from __future__ import annotations

from nika_brain.bus import open_bus
from nika_brain.engine import inbox
from nika_brain.engine.signals import INBOX
from nika_brain.support.yamlsafe import load_file
from tests.kit.brain import git_out as git
from tests.kit.orch import claims_of, journal, nb, open_claim_id, orch_brain, run_file, satellite_config

THREE = """name: three
branch: theme/three
chain:
  - step: 1
    type: search
    scope: one/
    story_angle: "result=ok"
  - step: 2
    type: search
    scope: two/
    story_angle: "result=ok"
  - step: 3
    type: search
    scope: three/
    story_angle: "result=ok"
"""


def _brain(tmp_path, **workflows):
    return orch_brain(tmp_path / "b", workflows or {"three": THREE}, config=satellite_config())


def _steps_run(brain, name):
    return [str(c["step"]) for c in claims_of(brain, name)]


# ---- from the CLI ---------------------------------------------------------------------------------

def test_orchestrate_from_the_cli_starts_at_the_step_with_the_context(tmp_path, git_env):
    brain = _brain(tmp_path)
    out = nb(brain, "workflow", "orchestrate", "three", "--step", "2", "--context",
             '{"from": "brain-hypervisor", "ticket": "T-7"}', check=0)
    assert "DONE" in out.stdout
    run = run_file(brain, "three")
    assert run["mode"] == "swarm", "ORCHESTRATE is mode 3 unless told otherwise"
    assert run["context"] == {"from": "brain-hypervisor", "ticket": "T-7"}
    assert _steps_run(brain, "three") == ["2", "3"]
    assert run["report"]["skipped"] == ["1"] and run["report"]["delivered"] == ["2", "3"]
    c2 = claims_of(brain, "three")[0]
    brief = (brain.state_dir / "briefs" / f"{c2['id']}.md").read_text()
    assert "## Context from the previous phase" in brief and "- ticket: T-7" in brief


def test_orchestrate_refuses_a_bad_context_and_an_unknown_step(tmp_path, git_env):
    brain = _brain(tmp_path)
    bad = nb(brain, "workflow", "orchestrate", "three", "--context", "[1, 2]", check=1)
    assert bad.stderr.strip() == "nika-brain: --context must be a JSON object ({...})"
    missing = nb(brain, "workflow", "orchestrate", "three", "--step", "9", check=1)
    assert missing.stderr.strip() == "nika-brain: workflow three has no step 9"
    assert not (brain.root / "runs" / "three.yml").exists(), "nothing started"


def test_adapt_from_the_cli_skips_inserts_and_replaces_mid_sequence(tmp_path, git_env):
    brain = _brain(tmp_path)
    nb(brain, "workflow-launch", "three", check=0)  # mode 1: step 1 is claimed, a human is on it
    c1 = open_claim_id(brain, "three")
    nb(brain, "workflow", "adapt", "three", "--skip", "2", check=0)
    nb(brain, "workflow", "adapt", "three", "--insert-after", "1", "--step-yaml",
       '{step: 1b, type: search, scope: extra/, story_angle: "result=ok"}', check=0)
    out = nb(brain, "workflow", "adapt", "three", "--replace", "3", "--step-yaml",
             'type: search\nscope: other/\nstory_angle: "result=partial"\non_partial: "trigger:next"\n',
             check=0)  # routes its partial result itself: no mode-3 residual gate
    assert out.stdout.strip() == "three: 3 adaptation(s) recorded"
    run = run_file(brain, "three")
    assert [(a["op"], str(a["step"]) if a["op"] != "insert" else a["after"]) for a in run["adaptations"]] == \
        [("skip", "2"), ("insert", "1"), ("replace", "3")]
    assert all(a["at"] for a in run["adaptations"]), "each change is time-stamped"
    assert git(brain.root, "status", "--porcelain", "--", "workflows") == "", "the declared file is untouched"
    status = nb(brain, "workflow", "status", "three", check=0).stdout
    assert "step 2: skipped" in status and "step 1b: pending" in status

    nb(brain, "claim", "close", c1, "--status", "ok", check=0)
    done = nb(brain, "workflow-launch", "three", "--mode", "swarm", check=0)
    assert "DONE" in done.stdout
    assert _steps_run(brain, "three") == ["1", "1b", "3"]
    c1b, c3 = claims_of(brain, "three")[1:]
    assert c1b["scope"] == ["extra/"] and c3["scope"] == ["other/"] and c3["result"]["status"] == "partial"
    assert (brain.root / "other" / f"{c3['id']}.txt").is_file() and not (brain.root / "two").exists()
    report = run_file(brain, "three")["report"]
    assert report["skipped"] == ["2"] and report["delivered"] == ["1", "1b"] and report["partial"] == ["3"]
    adapts = [r for r in journal(brain, "three") if r["type"] == "INFO" and r["reason"].startswith("ADAPT")]
    assert len(adapts) == 3 and adapts[0]["payload"]["changes"] == [{"op": "skip", "step": "2"}]


def test_invalid_adaptations_are_refused_and_not_recorded(tmp_path, git_env):
    brain = _brain(tmp_path)
    none = nb(brain, "workflow", "adapt", "three", "--skip", "2", check=1)
    assert "no active run to adapt" in none.stderr
    nb(brain, "workflow-launch", "three", check=0)
    cases = [(("--skip", "9"), "ADAPT skip: no step 9"),
             (("--insert-after", "1"), "--insert-after/--replace need --step-yaml"),
             (("--insert-after", "1", "--step-yaml", "{step: 2, type: search, scope: x/}"),
              "ADAPT insert: step 2 already exists"),
             (("--replace", "2", "--step-yaml", "{type: search, scope: x/, on_done: trigger:7}"),
              "trigger to step '7', which does not exist"),
             (("--skip", "1", "--skip", "2", "--skip", "3"), "ADAPT would leave the workflow without steps"),
             ((), "nothing to adapt")]
    for args, said in cases:
        p = nb(brain, "workflow", "adapt", "three", *args, check=1)
        assert said in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
    assert run_file(brain, "three")["adaptations"] == []


def test_abort_from_the_cli_closes_the_claim_and_frees_the_scope(tmp_path, git_env):
    brain = _brain(tmp_path)
    nb(brain, "workflow-launch", "three", check=0)
    c1 = open_claim_id(brain, "three")
    assert list((brain.root / "locks").glob("*.yml"))
    out = nb(brain, "workflow", "abort", "three", "--reason", "plan changed", check=0)
    assert "ABORT" in out.stdout and "plan changed" in out.stdout
    run = run_file(brain, "three")
    assert run["status"] == "aborted" and run["reason"] == "plan changed" and run["claim"] is None
    closed = load_file(brain.root / "claims" / f"{c1}.yml")
    assert closed["status"] == "closed" and closed["result"]["summary"] == "aborted: plan changed"
    assert not list((brain.root / "locks").glob("*.yml"))
    assert [r["reason"] for r in journal(brain, "three") if r["type"] == "ABORT"] == ["plan changed"]
    assert nb(brain, "workflow", "abort", "three", check=1).stderr.strip() == \
        "nika-brain: workflow three has no active run"
    assert nb(brain, "workflow-launch", "three", check=6).stdout.splitlines()[0] == "[three] ABORT: plan changed"
    # Only an explicit restart runs it again.
    assert "DONE" in nb(brain, "workflow-launch", "three", "--mode", "swarm", "--restart", check=0).stdout


# ---- from the bus ----------------------------------------------------------------------------------

def _post(brain, *messages):
    """The operator's messages: signed with the pinned key (the inbox obeys nothing else)."""
    bus = open_bus(brain)
    return [bus.publish(INBOX, inbox.sign(brain, m)) for m in messages]


def test_orchestrate_from_the_bus_runs_the_workflow(tmp_path, git_env):
    brain = _brain(tmp_path)
    _post(brain, {"type": "ORCHESTRATE", "workflow": "three", "step": 3, "context": {"from": "bus"}})
    out = nb(brain, "workflow", "listen", "--once", check=0)
    assert "ORCHESTRATE three: done merged theme/three into main" in out.stdout
    run = run_file(brain, "three")
    assert run["status"] == "done" and run["mode"] == "swarm" and run["context"] == {"from": "bus"}
    assert _steps_run(brain, "three") == ["3"]
    # The message was consumed by the orchestrator's group: listening again does nothing.
    again = nb(brain, "workflow", "listen", "--once", "--block", "0", check=0)
    assert again.stdout == ""
    assert _steps_run(brain, "three") == ["3"]


def test_adapt_then_abort_from_the_bus_in_order(tmp_path, git_env):
    brain = _brain(tmp_path)
    nb(brain, "workflow-launch", "three", check=0)
    c1 = open_claim_id(brain, "three")
    _post(brain, {"type": "ADAPT", "workflow": "three", "changes": [{"op": "skip", "step": 2}]},
          {"type": "ABORT", "workflow": "three", "reason": "hypervisor says stop"})
    out = nb(brain, "workflow", "listen", "--once", check=0)
    assert out.stdout.splitlines() == ["ADAPT three: 1 change(s) recorded",
                                       "ABORT three: hypervisor says stop"]
    run = run_file(brain, "three")
    assert run["status"] == "aborted" and run["reason"] == "hypervisor says stop"
    assert [a["op"] for a in run["adaptations"]] == ["skip"]
    assert load_file(brain.root / "claims" / f"{c1}.yml")["status"] == "closed"
    assert not list((brain.root / "locks").glob("*.yml"))


def test_bad_inbound_messages_are_refused_one_line_each_and_consumed(tmp_path, git_env):
    brain = _brain(tmp_path)
    _post(brain, {"type": "ORCHESTRATE"}, {"type": "REBOOT", "workflow": "three"},
          {"type": "ADAPT", "workflow": "three", "changes": "skip 2"},
          {"type": "ABORT", "workflow": "three", "reason": "nothing runs"},
          {"type": "ORCHESTRATE", "workflow": "nope"})
    out = nb(brain, "workflow", "listen", "--once", check=0)
    assert out.stdout.splitlines() == [
        "inbound signal refused: ORCHESTRATE without a workflow",
        "inbound signal refused: unknown signal 'REBOOT' (ORCHESTRATE, ADAPT, ABORT)",
        "inbound signal refused: inbound ADAPT: changes must be a list",
        "inbound signal refused: workflow three has no active run",
        "inbound signal refused: no workflow file nope",
    ]
    assert not (brain.root / "runs" / "three.yml").exists()
    refused = [r for r in journal(brain) if r["reason"].startswith("inbound signal refused")]
    assert len(refused) == 5
    assert nb(brain, "workflow", "listen", "--once", "--block", "0", check=0).stdout == ""


CHAIN_A = """name: first
branch: theme/first
chain:
  - step: 1
    type: search
    scope: first/
    story_angle: "result=ok"
    on_done: trigger:second/2
"""
CHAIN_B = """name: second
branch: theme/second
chain:
  - step: 1
    type: search
    scope: second-one/
  - step: 2
    type: search
    scope: second-two/
    story_angle: "result=ok"
"""


def test_a_trigger_into_another_workflow_goes_through_the_inbox(tmp_path, git_env):
    brain = _brain(tmp_path, first=CHAIN_A, second=CHAIN_B)
    # A driven (swarm) run starts the triggered workflow at once and says so (issue 18, item 9); the
    # ORCHESTRATE it posted is still on the inbox, and a listener does not run it a second time.
    first = nb(brain, "workflow-launch", "first", "--mode", "swarm", check=0).stdout
    assert "DONE" in first and "trigger second/2: starting second at step 2" in first
    sent = [r for r in journal(brain, "first") if r["type"] == "ORCHESTRATE"]
    assert sent and sent[0]["payload"] == {"workflow": "second", "step": "2", "context": {"from": "first"},
                                           "mode": "swarm"}
    assert run_file(brain, "second")["status"] == "done"
    out = nb(brain, "workflow", "listen", "--once", check=0)
    assert "ORCHESTRATE second: already started by first (done)" in out.stdout
    assert _steps_run(brain, "second") == ["2"]
    assert run_file(brain, "second")["context"] == {"from": "first"}
