"""The orchestrator against its card (issue 18): each gap the audit found, walked through the real CLI
in a real git brain, as an operator meets it. Swarm satellites are tests/kit/satellite_program.py, A
REAL SMALL PROGRAM STANDING IN FOR CLAUDE CODE."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

from nika_brain.support.yamlsafe import load_file
from tests.kit.brain import git_out as git
from tests.kit.orch import (
    SATELLITE,
    W1,
    W2,
    claims_of,
    journal,
    nb,
    open_claim_id,
    orch_brain,
    run_file,
    satellite_config,
    worktree,
)
from tests.kit.wait import until as wait_until


def _last(proc) -> str:
    return proc.stdout.strip().splitlines()[-1]


def _write(brain, branch, rel, text="x\n"):
    p = worktree(brain, branch) / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def _in_main(brain, rel) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"main:{rel}"], cwd=brain.root).returncode == 0


def _merged(brain, branch) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", branch, "main"], cwd=brain.root).returncode == 0


def _state_clean(brain) -> bool:
    return git(brain.root, "status", "--porcelain", "--", "claims", "runs", "journal", "gates",
               "BRAIN-INDEX.md").strip() == ""


def _gone(pid: int) -> bool:
    """The process has exited (no longer in /proc, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _types(brain, wf):
    return [r["type"] for r in journal(brain, wf)]


# ---- 1. the 0-failures check tests what is merged ---------------------------------------------------

FLAG = """name: flag
branch: theme/flag
test: "test -f ok.flag"
chain:
  - step: 1
    type: search
    scope: notes/
"""


def test_1_the_0_failures_check_tests_the_committed_branch_not_the_worktree(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"flag": FLAG})
    nb(brain, "workflow-launch", "flag", check=0)
    c1 = open_claim_id(brain, "flag")
    _write(brain, "theme/flag", "notes/n.md")
    red = nb(brain, "claim", "close", c1, "--status", "ok", check=0)
    assert "0-failures gate is not green" in _last(red)
    # The operator fixes it in the theme worktree but does not commit: the branch tip is still red.
    _write(brain, "theme/flag", "ok.flag")
    again = nb(brain, "workflow", "resume", "flag", check=4)
    assert "0-failures gate is not green" in again.stdout and "ok.flag" in again.stdout, again.stdout
    assert not _merged(brain, "theme/flag")
    assert "MERGE" not in _types(brain, "flag") and "DONE" not in _types(brain, "flag")
    status = nb(brain, "workflow", "status", "flag", check=0).stdout
    assert "flag: blocked" in status and "done" not in status.splitlines()[0]
    # Committed on the branch, it is what the check tests and what main gets.
    git(worktree(brain, "theme/flag"), "add", "ok.flag")
    git(worktree(brain, "theme/flag"), "commit", "-q", "-m", "the flag")
    done = nb(brain, "workflow", "resume", "flag", check=0)
    assert "DONE" in done.stdout
    assert _in_main(brain, "ok.flag") and _merged(brain, "theme/flag")
    assert _state_clean(brain)
    types = _types(brain, "flag")
    assert types.index("MERGE") < types.index("DONE")


def test_1_a_dirty_worktree_after_the_merge_is_set_aside_never_a_raw_git_error(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"flag": FLAG.replace('test: "test -f ok.flag"\n', "")})
    nb(brain, "workflow-launch", "flag", check=0)
    c1 = open_claim_id(brain, "flag")
    _write(brain, "theme/flag", "notes/n.md")
    _write(brain, "theme/flag", "scratch/left.txt")   # outside the step's scope: not committed
    done = nb(brain, "claim", "close", c1, "--status", "ok", check=0)
    assert "DONE" in done.stdout and done.stderr == ""
    assert "scratch/left.txt" in done.stdout
    assert not worktree(brain, "theme/flag").exists()
    assert _state_clean(brain)
    assert not _in_main(brain, "scratch/left.txt")
    ref = [line for line in git(brain.root, "for-each-ref", "--format=%(refname)", "refs/nika/").split()]
    assert ref and any("flag" in r for r in ref)
    assert "scratch/left.txt" in git(brain.root, "show", "--stat", "--format=", ref[0] + "^{tree}")\
        or "left.txt" in git(brain.root, "ls-tree", "-r", "--name-only", ref[0])


# ---- 2. the validated tier never accepts red tests ---------------------------------------------------

CODE = """name: code
branch: theme/code
chain:
  - step: 1
    type: code
    scope: src/
"""


def test_2_a_close_reporting_failed_tests_is_refused_and_the_claim_stays_open(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"code": CODE})
    nb(brain, "workflow-launch", "code", check=0)
    c1 = open_claim_id(brain, "code")
    _write(brain, "theme/code", "src/a.py")
    red = nb(brain, "claim", "close", c1, "--status", "ok", "--tests-passed", "1", "--tests-failed", "3", check=4)
    assert "3 failed" in red.stderr and "stays open" in red.stderr
    assert load_file(brain.root / "claims" / f"{c1}.yml")["status"] == "open"
    assert "MERGE" not in _types(brain, "code") and run_file(brain, "code")["status"] == "running"
    # Green self-reported tests close; a validated step with its own counts goes on.
    nb(brain, "claim", "close", c1, "--status", "ok", "--tests-passed", "4", "--tests-failed", "0", check=0)
    assert run_file(brain, "code")["status"] == "done"


# ---- 3. one bad file elsewhere does not break a run half-way ------------------------------------------

GOOD = """name: good
branch: theme/good
chain:
  - step: 1
    type: search
    scope: notes/
"""


def test_3_an_invalid_unrelated_workflow_or_gate_file_breaks_nothing(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"good": GOOD},
                       files={"workflows/typo.yml": "name: typo\nchain: 5\n",
                              "gates/handmade.yml": "id: handmade\nstatus: maybe\n"})
    launched = nb(brain, "workflow-launch", "good", check=0)
    assert launched.stderr == ""
    c1 = open_claim_id(brain, "good")
    index = (brain.root / "BRAIN-INDEX.md").read_text()
    assert "workflows/typo.yml" in index and "gates/handmade.yml" in index and c1 in index
    nb(brain, "index", check=0)  # what scripts/brain-index-regen.sh runs
    _write(brain, "theme/good", "notes/n.md")
    closed = nb(brain, "claim", "close", c1, "--status", "ok", check=0)
    assert "DONE" in closed.stdout and run_file(brain, "good")["status"] == "done"
    bad = nb(brain, "validate")
    assert bad.returncode != 0 and "workflows/typo.yml" in bad.stdout + bad.stderr


def test_3_the_runs_own_workflow_made_invalid_mid_run_refuses_the_close_before_anything_changes(tmp_path,
                                                                                                 git_env):
    brain = orch_brain(tmp_path / "b", {"good": GOOD})
    nb(brain, "workflow-launch", "good", check=0)
    c1 = open_claim_id(brain, "good")
    _write(brain, "theme/good", "notes/n.md")
    path = brain.root / "workflows" / "good.yml"
    path.write_text("name: good\nchain: 5\n")   # hand-edited while the step runs
    refused = nb(brain, "claim", "close", c1, "--status", "ok")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
    assert "stays open" in refused.stderr and "workflows/good.yml" in refused.stderr, refused.stderr
    assert load_file(brain.root / "claims" / f"{c1}.yml")["status"] == "open"
    assert "STEP_DONE" not in _types(brain, "good") and run_file(brain, "good")["claim"] == c1
    # Fixed, the same close goes through: the step's work is committed and merged.
    path.write_text(GOOD)
    done = nb(brain, "claim", "close", c1, "--status", "ok", check=0)
    assert "DONE" in done.stdout and _in_main(brain, "notes/n.md")


# ---- 4. ADAPT while a gate is pending --------------------------------------------------------------

ADAPTED = """name: ad
branch: theme/ad
chain:
  - step: 1
    type: search
    scope: notes/
    on_partial: gate:human → "partial — go on?"
  - step: 2
    type: search
    scope: docs/
  - step: 3
    type: search
    scope: src/
"""


def test_4_the_cursor_follows_the_adapted_plan_across_a_pending_gate(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"ad": ADAPTED})
    nb(brain, "workflow-launch", "ad", check=0)
    c1 = open_claim_id(brain, "ad")
    _write(brain, "theme/ad", "notes/n.md")
    nb(brain, "claim", "close", c1, "--status", "partial", check=0)
    gate = run_file(brain, "ad")["gate"]
    nb(brain, "workflow", "adapt", "ad", "--skip", "2", "--insert-after", "1",
       "--step-yaml", '{step: "1.5", type: search, scope: extra/}', check=0)
    approved = nb(brain, "gate", "approve", gate, check=0)
    assert _last(approved) == "next: step 1.5 of ad — `nika-brain workflow resume ad`"
    # --step reaches the inserted step.
    nb(brain, "workflow-launch", "ad", "--step", "1.5", check=0)
    c15 = open_claim_id(brain, "ad")
    assert c15.endswith("step-1.5")
    _write(brain, "theme/ad", "extra/e.md")
    nb(brain, "claim", "close", c15, "--status", "ok", check=0)
    nb(brain, "workflow", "resume", "ad", check=0)
    c3 = open_claim_id(brain, "ad")
    assert c3.endswith("step-3")
    _write(brain, "theme/ad", "src/s.md")
    nb(brain, "claim", "close", c3, "--status", "ok", check=0)
    assert run_file(brain, "ad")["status"] == "done"
    assert not any(c["step"] == 2 or c["step"] == "2" for c in claims_of(brain, "ad"))


def test_4_a_go_gate_of_a_step_skipped_meanwhile_moves_on_in_the_adapted_plan(tmp_path, git_env):
    wf = ADAPTED.replace("  - step: 2\n    type: search\n", "  - step: 2\n    type: search\n    gate: human\n")
    brain = orch_brain(tmp_path / "b", {"ad": wf})
    nb(brain, "workflow-launch", "ad", check=0)
    c1 = open_claim_id(brain, "ad")
    _write(brain, "theme/ad", "notes/n.md")
    nb(brain, "claim", "close", c1, "--status", "ok", check=0)
    nb(brain, "workflow", "resume", "ad", check=5)
    gate = run_file(brain, "ad")["gate"]
    nb(brain, "workflow", "adapt", "ad", "--skip", "2", check=0)
    approved = nb(brain, "gate", "approve", gate, check=0)
    assert _last(approved) == "next: step 3 of ad — `nika-brain workflow resume ad`"
    nb(brain, "workflow", "resume", "ad", check=0)
    assert open_claim_id(brain, "ad").endswith("step-3")


# ---- 5. a failed step let through by a human does not dead-end the run --------------------------------

LETGO = """name: letgo
branch: theme/letgo
chain:
  - step: 1
    type: search
    scope: notes/
    on_fail: gate:human → "step 1 failed — go on without it?"
  - step: 2
    type: search
    scope: docs/
"""


def test_5_a_human_go_on_a_failed_step_is_its_recorded_override(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"letgo": LETGO})
    nb(brain, "workflow-launch", "letgo", check=0)
    nb(brain, "claim", "close", open_claim_id(brain, "letgo"), "--status", "failed", check=0)
    gate = run_file(brain, "letgo")["gate"]
    nb(brain, "gate", "approve", gate, check=0)
    nb(brain, "workflow", "resume", "letgo", check=0)
    c2 = open_claim_id(brain, "letgo")
    _write(brain, "theme/letgo", "docs/d.md")
    done = nb(brain, "claim", "close", c2, "--status", "ok", check=0)
    assert "DONE" in done.stdout, done.stdout
    report = run_file(brain, "letgo")["report"]
    assert report["accepted"] == ["1"] and report["delivered"] == ["2"]
    merge = [r for r in journal(brain, "letgo") if r["type"] == "MERGE"][0]
    assert "accepted" in merge["reason"] and "1" in merge["reason"]


NOTIFY = """name: nf
branch: theme/nf
chain:
  - step: 1
    type: search
    scope: notes/
    story_angle: "result=failed"
    on_fail: notify:step 1 failed, going on
  - step: 2
    type: search
    scope: docs/
    story_angle: "result=ok"
"""


def test_5_retry_and_skip_work_on_a_blocked_run_in_swarm(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"nf": NOTIFY}, config=satellite_config())
    blocked = nb(brain, "workflow-launch", "nf", "--mode", "swarm", check=4)
    assert "failed steps: 1" in blocked.stdout
    retried = nb(brain, "workflow", "resume", "nf", "--retry", check=4)
    assert "not halted" not in retried.stderr
    assert len([c for c in claims_of(brain, "nf") if str(c["step"]) == "1"]) == 2
    skipped = nb(brain, "workflow", "resume", "nf", "--skip", check=0)
    assert "DONE" in skipped.stdout
    assert run_file(brain, "nf")["status"] == "done"
    assert run_file(brain, "nf")["report"]["skipped"] == ["1"]


def test_5_a_forced_merge_finishes_the_run_with_its_report(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"nf": NOTIFY}, config=satellite_config())
    nb(brain, "workflow-launch", "nf", "--mode", "swarm", check=4)
    forced = nb(brain, "branch", "merge", "theme/nf", "--no-tests", "--force-human", "--note", "ok", check=0)
    assert "DONE" in forced.stdout and "delivered" in forced.stdout
    run = run_file(brain, "nf")
    assert run["status"] == "done" and run["report"]["forced"] is True
    assert "DONE" in _types(brain, "nf")
    status = nb(brain, "workflow", "status", "nf", check=0).stdout
    assert status.startswith("nf: done")


# ---- 6. a step never runs twice at once ----------------------------------------------------------------

SLOW = """name: slow
branch: theme/slow
chain:
  - step: 1
    type: search
    scope: notes/
    story_angle: "signal=started await=go result=ok"
"""


def _orchestrator_killed_while_its_satellite_runs(tmp_path):
    """A swarm launch of `slow` killed -9 once its satellite has started (the satellite lives on,
    waiting at its rendezvous): the brain, the environment, the rendezvous folder and the launch log."""
    meet = tmp_path / "meet"
    meet.mkdir()
    launches = tmp_path / "launches"
    config = (f'satellite_command: ["/bin/sh", "-c", "echo $$ >> {launches}; exec \\"$0\\" \\"$@\\"", '
              f'"{sys.executable}", "{SATELLITE}", "{{claim}}", "{{brief_file}}"]\n')
    brain = orch_brain(tmp_path / "b", {"slow": SLOW}, config=config)
    env = {**os.environ, "SATELLITE_RENDEZVOUS": str(meet)}
    first = subprocess.Popen([sys.executable, "-m", "nika_brain", "workflow-launch", "slow", "--mode", "swarm"],
                             cwd=brain.root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: (meet / "started").exists(), what="the satellite started")
    first.send_signal(signal.SIGKILL)
    first.wait()
    return brain, env, meet, launches


def test_6_resume_after_a_killed_orchestrator_waits_for_the_live_satellite(tmp_path, git_env):
    brain, env, meet, launches = _orchestrator_killed_while_its_satellite_runs(tmp_path)
    second = subprocess.Popen([sys.executable, "-m", "nika_brain", "workflow", "resume", "slow"],
                              cwd=brain.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The resume found the orphan satellite alive: it waits for it, it does not start another.
    wait_until(lambda: any(r["type"] == "INFO" and "still running" in r.get("reason", "")
                           for r in journal(brain, "slow")), what="resume saw the live satellite")
    assert len(launches.read_text().split()) == 1
    (meet / "go").write_text("")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, out + err
    assert "DONE" in out
    assert len(launches.read_text().split()) == 1
    [c1] = claims_of(brain, "slow")
    assert c1["result"]["status"] == "ok" and "satellite wrote notes/" in c1["result"]["summary"]


def test_6_resume_adopts_the_result_of_a_satellite_that_finished_while_no_orchestrator_ran(tmp_path, git_env):
    brain, env, meet, launches = _orchestrator_killed_while_its_satellite_runs(tmp_path)
    c1 = open_claim_id(brain, "slow")
    (meet / "go").write_text("")   # the orphan reports while no orchestrator runs, and exits
    assert len(launches.read_text().split()) == 1
    # the pid the launcher recorded (its pid on this host: the satellite's own `$$` is its pid in its
    # wall's pid namespace)
    pid = json.loads((brain.state_dir / "satellites" / f"{c1}.json").read_text())["pid"]
    wait_until(lambda: _gone(int(pid)), what="the orphan satellite ended")
    resumed = nb(brain, "workflow", "resume", "slow", env={"SATELLITE_RENDEZVOUS": str(meet)}, check=0)
    assert "DONE" in resumed.stdout
    assert len(launches.read_text().split()) == 1     # adopted, not run a second time
    [claim] = claims_of(brain, "slow")
    assert claim["result"]["status"] == "ok" and "satellite wrote notes/" in claim["result"]["summary"]
    assert _in_main(brain, f"notes/{c1}.txt")


def test_6_a_relaunch_of_a_dead_satellites_claim_runs_preflight(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"slow": SLOW.replace("signal=started await=go ", "")},
                       config=satellite_config())
    # A crash between the claim's opening and the satellite's start: the claim is open, no satellite.
    nb(brain, "workflow-launch", "slow", "--mode", "swarm", env={"NIKA_FAULT": "after-claim-open"})
    assert [c["status"] for c in claims_of(brain, "slow")] == ["open"]
    (brain.root / "breakers").mkdir(exist_ok=True)
    (brain.root / "breakers" / "notes.yml").write_text(
        "scope: notes/\nfails: 3\ntripped: true\nlast_claim: x\nupdated: '2026-01-01T00:00:00+00:00'\n")
    out = nb(brain, "workflow", "resume", "slow")
    assert "preflight" in out.stdout and "breaker" in out.stdout, out.stdout + out.stderr
    assert not (worktree(brain, "theme/slow") / "notes").exists()


# ---- 7. mode 3's residual gates -------------------------------------------------------------------------

PARTIAL = """name: pa
branch: theme/pa
chain:
  - step: 1
    type: search
    scope: notes/
    story_angle: "result=partial"
  - step: 2
    type: search
    scope: docs/
    story_angle: "result=ok"
"""

ZONED = """name: zn
branch: theme/zn
chain:
  - step: 1
    type: search
    scope: kernel-area/
    agent: {agent}
    story_angle: "result=ok"
"""


def test_7_a_partial_result_in_swarm_gets_a_human_gate(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"pa": PARTIAL}, config=satellite_config())
    out = nb(brain, "workflow-launch", "pa", "--mode", "swarm", check=5)
    assert "GATE_PENDING" in out.stdout and run_file(brain, "pa")["status"] == "gated"
    assert [str(c["step"]) for c in claims_of(brain, "pa")] == ["1"]
    nb(brain, "gate", "approve", run_file(brain, "pa")["gate"], check=0)
    nb(brain, "workflow", "resume", "pa", check=0)
    assert run_file(brain, "pa")["status"] == "done"


def test_7_preflight_runs_before_the_protected_zone_gate(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"zn": ZONED.format(agent="satellite-boot")}, config=satellite_config())
    out = nb(brain, "workflow-launch", "zn", "--mode", "swarm", check=4)
    assert "not granted zone kernel" in out.stdout and not list((brain.root / "gates").glob("*.yml"))
    brain2 = orch_brain(tmp_path / "c", {"zn": ZONED.format(agent="kernel-writer")}, config=satellite_config())
    gated = nb(brain2, "workflow-launch", "zn", "--mode", "swarm", check=5)
    assert "protected zone kernel" in gated.stdout


# ---- 8. only the claim's work is committed ---------------------------------------------------------------

RETRY = """name: rt
branch: theme/rt
chain:
  - step: 1
    type: search
    scope: notes/
"""


def test_8_a_failed_attempt_is_set_aside_and_out_of_scope_changes_are_left_out(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"rt": RETRY})
    nb(brain, "workflow-launch", "rt", check=0)
    c1 = open_claim_id(brain, "rt")
    _write(brain, "theme/rt", "notes/attempt-1.txt")
    failed = nb(brain, "claim", "close", c1, "--status", "failed", check=0)
    ref = f"refs/nika/attempts/{c1}"
    assert ref in failed.stdout
    assert "notes/attempt-1.txt" in git(brain.root, "ls-tree", "-r", "--name-only", ref)
    assert not (worktree(brain, "theme/rt") / "notes" / "attempt-1.txt").exists()
    nb(brain, "workflow", "resume", "rt", "--retry", check=0)
    c1b = open_claim_id(brain, "rt")
    _write(brain, "theme/rt", "notes/good.txt")
    _write(brain, "theme/rt", "flag/green")
    done = nb(brain, "claim", "close", c1b, "--status", "ok", check=0)
    assert "flag/green" in done.stdout and "DONE" in done.stdout
    assert _in_main(brain, "notes/good.txt")
    assert not _in_main(brain, "notes/attempt-1.txt") and not _in_main(brain, "flag/green")


def test_8_a_failed_attempt_that_committed_on_the_branch_itself_is_set_aside_too(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"rt": RETRY})
    nb(brain, "workflow-launch", "rt", check=0)
    c1 = open_claim_id(brain, "rt")
    wt = worktree(brain, "theme/rt")
    tip = git(wt, "rev-parse", "HEAD").strip()
    _write(brain, "theme/rt", "notes/committed-attempt.txt")   # a satellite that commits its own work
    git(wt, "add", "notes/committed-attempt.txt")
    git(wt, "commit", "-q", "-m", "attempt")
    _write(brain, "theme/rt", "notes/loose-attempt.txt")
    failed = nb(brain, "claim", "close", c1, "--status", "failed", check=0)
    ref = f"refs/nika/attempts/{c1}"
    assert ref in failed.stdout and "notes/committed-attempt.txt" in failed.stdout, failed.stdout
    kept = git(brain.root, "ls-tree", "-r", "--name-only", ref)
    assert "notes/committed-attempt.txt" in kept and "notes/loose-attempt.txt" in kept
    assert git(wt, "rev-parse", "HEAD").strip() == tip and git(wt, "status", "--porcelain").strip() == ""
    nb(brain, "workflow", "resume", "rt", "--retry", check=0)
    _write(brain, "theme/rt", "notes/good.txt")
    nb(brain, "claim", "close", open_claim_id(brain, "rt"), "--status", "ok", check=0)
    assert _in_main(brain, "notes/good.txt") and not _in_main(brain, "notes/committed-attempt.txt")
    assert git(brain.root, "for-each-ref", "refs/nika/claim-base/").strip() == ""   # tidied at each close


TWO_MARKS = """name: marks
branch: theme/marks
chain:
  - step: 1
    type: search
    scope: notes/
  - step: 2
    type: search
    scope: docs/
"""


def _marks(brain) -> list[str]:
    return git(brain.root, "for-each-ref", "--format=%(refname:lstrip=3)", "refs/nika/claim-base/").split()


def test_8_each_claim_is_marked_at_its_opening_and_the_marks_are_tidied_by_the_next_one_and_at_the_end(tmp_path,
                                                                                                         git_env):
    """An accepted close leaves its claim's mark (the branch tip at its opening); the next claim's mark
    removes it in the same git process, and the run's end or abort removes what is left."""
    brain = orch_brain(tmp_path / "b", {"marks": TWO_MARKS, "rt": RETRY})
    nb(brain, "workflow-launch", "marks", check=0)
    c1 = open_claim_id(brain, "marks")
    assert _marks(brain) == [c1]
    _write(brain, "theme/marks", "notes/n.md")
    nb(brain, "claim", "close", c1, "--status", "ok", check=0)
    nb(brain, "workflow-launch", "marks", check=0)
    c2 = open_claim_id(brain, "marks")
    assert _marks(brain) == [c2]
    _write(brain, "theme/marks", "docs/d.md")
    assert "DONE" in nb(brain, "claim", "close", c2, "--status", "ok", check=0).stdout
    assert _marks(brain) == []
    nb(brain, "workflow-launch", "rt", check=0)
    assert _marks(brain) == [open_claim_id(brain, "rt")]
    nb(brain, "workflow", "abort", "rt", check=0)
    assert _marks(brain) == []


# ---- 9. what the operator is told ------------------------------------------------------------------------

TOLD = """name: told
branch: theme/told
chain:
  - step: 1
    type: search
    scope: notes/
    story_angle: "result=ok"
    on_done: notify:step one says hello
  - step: 2
    type: search
    scope: docs/
    story_angle: "result=ok"
"""


def test_9_notify_texts_satellite_results_and_the_report_are_printed_once(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"told": TOLD}, config=satellite_config())
    out = nb(brain, "workflow-launch", "told", "--mode", "swarm", check=0).stdout
    assert "notify: step one says hello" in out
    assert "step 1 satellite result: ok — satellite wrote notes/" in out
    assert "step 2 satellite result: ok" in out
    assert out.count("DONE") == 1, out
    assert "report: delivered 1, 2; partial -; skipped -; gates 0" in out
    brain2 = orch_brain(tmp_path / "c", {"told": TOLD}, config=satellite_config())
    js = json.loads(nb(brain2, "workflow-launch", "told", "--mode", "swarm", "--json", check=0).stdout)
    assert "notify: step one says hello" in js["events"] and js["report"]["delivered"] == ["1", "2"]
    assert any(e.startswith("step 2 satellite result: ok") for e in js["events"])


def test_9_a_launch_without_mode_keeps_a_swarm_run_in_swarm(tmp_path, git_env):
    wf = TOLD.replace('story_angle: "result=ok"\n    on_done: notify:step one says hello',
                      'story_angle: "result=ok"\n    gate: human')
    brain = orch_brain(tmp_path / "b", {"told": wf}, config=satellite_config())
    nb(brain, "workflow-launch", "told", "--mode", "swarm", check=5)
    nb(brain, "gate", "approve", run_file(brain, "told")["gate"], check=0)
    nb(brain, "workflow-launch", "told", check=0)
    assert run_file(brain, "told")["mode"] == "swarm" and run_file(brain, "told")["status"] == "done"


def test_9_a_commit_refused_by_the_hook_names_the_path_and_an_override_for_that_command(tmp_path, git_env):
    from nika_brain.gitrepo import githooks
    wf = "name: wk\nbranch: theme/wk\nchain:\n  - step: 1\n    type: search\n    scope: workflows/\n" \
         "    agent: kernel-writer\n"
    brain = orch_brain(tmp_path / "b", {"wk": wf})
    githooks.install(brain.root)
    nb(brain, "workflow-launch", "wk", check=0)
    c1 = open_claim_id(brain, "wk")
    _write(brain, "theme/wk", "workflows/broken.yml", "name: broken\nchain: 7\n")
    refused = nb(brain, "claim", "close", c1, "--status", "ok")
    assert refused.returncode != 0 and "workflows/broken.yml" in refused.stderr, refused.stderr
    assert f"nika-brain claim close {c1}" in refused.stderr and "--no-verify" not in refused.stderr
    assert load_file(brain.root / "claims" / f"{c1}.yml")["status"] == "open"


def test_9_a_hook_refusal_after_the_close_or_in_a_merge_names_the_command_that_redoes_it(tmp_path, git_env):
    from nika_brain.gitrepo import githooks
    brain = orch_brain(tmp_path / "b", {"good": GOOD})
    githooks.install(brain.root)
    nb(brain, "workflow-launch", "good", check=0)
    c1 = open_claim_id(brain, "good")
    _write(brain, "theme/good", "notes/n.md")
    bad = brain.root / "gates" / "handmade.yml"
    bad.parent.mkdir(exist_ok=True)
    bad.write_text("id: handmade\nstatus: maybe\n")   # hand-made: the hook refuses to commit it
    # The claim is closed before the state commit is refused: what redoes it is a resume, not the close.
    closed = nb(brain, "claim", "close", c1, "--status", "ok", "--summary", "done", check=0)
    assert "gates/handmade.yml" in closed.stdout, closed.stdout
    assert "run `nika-brain workflow resume good` again" in closed.stdout, closed.stdout
    assert "claim close" not in closed.stdout and run_file(brain, "good")["status"] == "blocked"
    # theme-branch-merge.sh: the command to run again is the one that failed, its options included.
    merge = nb(brain, "branch", "merge", "theme/good", "--no-tests")
    assert merge.returncode != 0 and "gates/handmade.yml" in merge.stderr, merge.stderr
    assert "run `nika-brain branch merge theme/good --no-tests` again" in merge.stderr, merge.stderr
    bad.unlink()
    again = nb(brain, "branch", "merge", "theme/good", "--no-tests", check=0)
    assert "DONE" in again.stdout and run_file(brain, "good")["status"] == "done"


def test_9_a_satellite_is_not_handed_the_orchestrators_command_to_rerun(tmp_path, git_env):
    seen = tmp_path / "seen"   # what a refusing hook would name to the satellite's own git commit
    config = (f'satellite_command: ["/bin/sh", "-c", "(printenv NIKA_COMMAND || echo unset) >> {seen}; '
              f'exec \\"$0\\" \\"$@\\"", "{sys.executable}", "{SATELLITE}", "{{claim}}", "{{brief_file}}"]\n')
    brain = orch_brain(tmp_path / "b", {"told": TOLD}, config=config)
    nb(brain, "workflow-launch", "told", "--mode", "swarm", check=0)
    assert seen.read_text().split() == ["unset", "unset"]


def test_9_gate_messages_an_agent_refusal_names_its_variable(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"told": TOLD})
    opened = nb(brain, "gate", "open", "g-hand", "first message", check=0)
    assert "pending" in opened.stdout
    assert any(r["type"] == "GATE_PENDING" and r["payload"]["gate"] == "g-hand" for r in journal(brain))
    again = nb(brain, "gate", "open", "g-hand", "second message", check=0)
    assert "ignored" in again.stdout and "first message" in again.stdout
    agent = nb(brain, "gate", "approve", "g-hand", env={"NIKA_AGENT": "1"})
    assert agent.returncode != 0 and "NIKA_AGENT=1" in agent.stderr


def test_9_step_and_restart_are_checked_and_said(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"told": TOLD})
    nb(brain, "workflow-launch", "told", check=0)
    nine = nb(brain, "workflow-launch", "told", "--step", "9")
    assert nine.returncode != 0 and "has no step 9" in nine.stderr
    restart = nb(brain, "workflow-launch", "told", "--restart")
    assert restart.returncode != 0 and "active run" in restart.stderr and "did nothing" in restart.stderr


def test_9_a_self_closing_satellite_is_not_told_to_run_operator_commands(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"told": TOLD})
    nb(brain, "workflow-launch", "told", check=0)
    c1 = open_claim_id(brain, "told")
    _write(brain, "theme/told", "notes/n.md")
    closed = nb(brain, "claim", "close", c1, "--status", "ok", env={"NIKA_AGENT": "1"}, check=0)
    assert "workflow resume" not in closed.stdout and "orchestrator" in _last(closed)


def test_9_a_hand_claim_open_regenerates_the_index(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"told": TOLD})
    cid = nb(brain, "claim", "open", "--workflow", "hand", "--step", "1", "--type", "search",
             "--scope", "scratch/", check=0).stdout.strip()
    assert cid in (brain.root / "BRAIN-INDEX.md").read_text()


def test_9_open_ended_signal_types_and_escalate_by_the_orchestrator(tmp_path, git_env):
    wf = "name: sig\nbranch: theme/sig\nchain:\n  - step: 1\n    type: search\n    scope: notes/\n" \
         "    on_done: signal:NEEDS_REVIEW\n  - step: 2\n    type: search\n    scope: kernel-area/\n"
    brain = orch_brain(tmp_path / "b", {"sig": wf})
    nb(brain, "validate", check=0)
    nb(brain, "workflow-launch", "sig", check=0)
    _write(brain, "theme/sig", "notes/n.md")
    nb(brain, "claim", "close", open_claim_id(brain, "sig"), "--status", "ok", check=0)
    assert "NEEDS_REVIEW" in _types(brain, "sig")
    blocked = nb(brain, "workflow", "resume", "sig", check=4)
    assert "not granted zone kernel" in blocked.stdout
    assert "ESCALATE" in _types(brain, "sig")
    bad = nb(brain, "workflow", "adapt", "sig", "--skip", "7")
    assert bad.returncode != 0
    assert [r for r in journal(brain, "sig") if r["type"] == "ESCALATE" and "ADAPT" in r["reason"]]


def test_9_status_after_done_shows_each_step_as_the_report(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"told": TOLD}, config=satellite_config())
    nb(brain, "workflow-launch", "told", "--mode", "swarm", "--step", "2", check=0)
    status = nb(brain, "workflow", "status", "told", check=0).stdout
    assert "step 1: skipped" in status and "step 2: done" in status
    assert run_file(brain, "told")["report"]["skipped"] == ["1"]




def test_9_a_trigger_starts_the_other_workflow_when_the_run_is_driven(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"w1": W1, "w2": W2}, config=satellite_config())
    out = nb(brain, "workflow-launch", "w1", "--mode", "swarm", check=0).stdout
    assert "trigger w2/1: starting w2 at step 1" in out
    assert run_file(brain, "w1")["status"] == run_file(brain, "w2")["status"] == "done"


def test_9_the_template_card_carries_the_whole_card(tmp_path, git_env):
    root = tmp_path / "fresh"   # the card as `nika-brain init` lays it in a new brain
    subprocess.run([sys.executable, "-m", "nika_brain", "init", str(root), "--no-hooks"], cwd=tmp_path,
                   check=True, capture_output=True, text=True, timeout=300)
    card = (root / "agents" / "kernel-orchestrator.md").read_text()
    sections = ("## Boot summary", "## Role", "## Activation", "## Execution loop", "## Exit triggers",
                "## Tiered close", "## Scripts", "## Circuit breaker", "## Interface with brain-hypervisor",
                "## Mode 1 (manual) vs mode 3 (swarm)", "## Sources to load")
    scripts = ("preflight-check.sh", "file-lock.sh acquire/release", "human-gate-ack.sh gate/approve/reject",
               "workflow-launch.sh", "theme-branch-open.sh", "theme-branch-merge.sh", "brain-index-regen.sh")
    actions = ("trigger:<step>", "trigger:next", "signal:<TYPE>", "gate:human", "notify:<msg>", "abort")
    tiers = ("| Atomic |", "| Validated |", "| Orchestrated |")
    signals_ = ("ORCHESTRATE", "ADAPT", "ABORT", "STEP_DONE", "GATE_PENDING", "BLOCKED_ON", "DONE",
                "CIRCUIT_BREAK", "ESCALATE")
    for part in (*sections, *scripts, *actions, *tiers, *signals_, "zone:kernel", "partial results"):
        assert part in card, part
    loop = card[card.index("## Execution loop"):card.index("## Exit triggers")]
    assert [n for n in range(1, 13) if f"\n{n}. " not in loop] == []   # the loop's 12 steps


def test_9_no_usable_satellite_is_said_and_not_counted_toward_the_breaker(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"told": TOLD})
    bindir = tmp_path / "bin"  # a PATH with git and no `claude`
    bindir.mkdir()
    (bindir / "git").symlink_to(shutil.which("git"))
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + str(bindir)}
    assert not any(os.path.exists(os.path.join(d, "claude")) for d in env["PATH"].split(os.pathsep))
    out = nb(brain, "workflow", "orchestrate", "told", env=env, check=4)
    assert "no satellite can run here" in out.stdout and "satellite_command" in out.stdout
    assert not list((brain.root / "breakers").glob("*.yml"))
    assert [c["status"] for c in claims_of(brain, "told")] == ["open"]


def test_9_a_claude_with_no_credentials_is_said_and_not_counted_toward_the_breaker(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"told": TOLD})
    bindir = tmp_path / "bin"   # a `claude` that would stop at its login prompt: no key, no login file
    bindir.mkdir()
    (bindir / "claude").write_text("#!/bin/sh\necho 'Not logged in · Please run /login'\nexit 1\n")
    (bindir / "claude").chmod(0o755)
    env = {"PATH": str(bindir) + os.pathsep + os.environ["PATH"], "ANTHROPIC_API_KEY": "",
           "HOME": str(tmp_path / "home")}
    for _ in range(4):   # past the breaker's threshold, were it counted
        out = nb(brain, "workflow", "orchestrate", "told", env=env, check=4)
        assert "has no credentials" in out.stdout and "/login" in out.stdout
    assert not list((brain.root / "breakers").glob("*.yml"))
    assert [c["status"] for c in claims_of(brain, "told")] == ["open"]


def test_9_preflight_reset_ends_with_a_next_line(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"told": TOLD})
    out = nb(brain, "preflight", "reset", "notes/", check=0)
    assert _last(out).startswith("next:")


def test_9_an_expired_lock_still_blocking_says_its_holder_is_alive(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"told": TOLD})
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        nb(brain, "lock", "acquire", "notes/", "--owner", "someone", "--ttl", "0.01", "--pid", holder.pid, check=0)
        wait_until(lambda: "still held" in nb(brain, "preflight", "check", "notes/").stdout,
                   what="the lock expired")
        out = nb(brain, "preflight", "check", "notes/", check=4).stdout
        assert f"its holder process {holder.pid} is alive" in out
    finally:
        holder.kill()
        holder.wait()
