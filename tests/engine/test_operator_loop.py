"""The workflow loop as an operator lives it (issue 8): one scenario per defect, through the real CLI
in a real git brain, and the exact `next:` line every outcome ends with."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nika_brain.support.yamlsafe import load_file
from tests.kit.brain import git_out as git
from tests.kit.orch import (
    BREAKER,
    PLAIN,
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

REPO = Path(__file__).resolve().parents[2]


def _last(proc) -> str:
    return proc.stdout.strip().splitlines()[-1]


def _write(brain, branch, rel, text="x\n"):
    p = worktree(brain, branch) / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


# ---- 1. halts hold -------------------------------------------------------------------------------

HALT = """name: halt
branch: theme/halt
chain:
  - step: 1
    type: search
    scope: notes/
    on_done: signal:ESCALATE
  - step: 2
    type: search
    scope: docs/
"""


def test_1_a_halt_holds_until_a_human_says_retry_or_skip(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"halt": HALT})
    first = nb(brain, "workflow-launch", "halt", check=0)
    c1 = open_claim_id(brain, "halt")
    assert _last(first) == (f"next: do step 1 of halt, then `nika-brain claim close {c1} "
                            "--status ok|partial|failed --summary \"...\"`")
    _write(brain, "theme/halt", "notes/n.md")
    closed = nb(brain, "claim", "close", c1, "--status", "ok", "--summary", "found", check=0)
    halted = ("halted: signal ESCALATE after step 1 (ok): found — `nika-brain workflow resume halt --retry` "
              "(run step 1 again), `nika-brain workflow resume halt --skip` (go past it) or "
              "`nika-brain workflow abort halt`")
    assert _last(closed) == halted
    # Launching again does not slip past the halt: exit 4, the same line, no claim for step 2.
    again = nb(brain, "workflow-launch", "halt", check=4)
    assert _last(again) == halted and again.stderr == ""
    assert [c["id"] for c in claims_of(brain, "halt")] == [c1]
    assert nb(brain, "workflow", "resume", "halt", check=4).stdout.strip().endswith(halted)
    # --retry runs step 1 again; its second halt is then skipped past.
    nb(brain, "workflow", "resume", "halt", "--retry", check=0)
    c1b = open_claim_id(brain, "halt")
    assert c1b != c1 and "-halt-step-1" in c1b
    _write(brain, "theme/halt", "notes/m.md")
    nb(brain, "claim", "close", c1b, "--status", "ok", check=0)
    skipped = nb(brain, "workflow", "resume", "halt", "--skip", check=0)
    c2 = open_claim_id(brain, "halt")
    assert c2.endswith("step-2") and "Brief — halt / step 2" in skipped.stdout
    refused = nb(brain, "workflow", "resume", "halt", "--skip", check=1)
    assert "is not halted" in refused.stderr
    types = [r["type"] for r in journal(brain, "halt")]
    assert types.count("ESCALATE") == 2 and "CLAIM_OPEN" in types and "BRANCH_OPEN" in types


def test_1_a_failed_step_halts_and_json_says_so(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"halt": HALT})
    nb(brain, "workflow-launch", "halt", check=0)
    c1 = open_claim_id(brain, "halt")
    out = json.loads(nb(brain, "claim", "close", c1, "--status", "failed", "--json", check=0).stdout)
    assert out["outcome"]["status"] == "halted" and out["outcome"]["exit"] == 4
    assert out["next"].startswith("halted: signal BLOCKED_ON after step 1 (failed)")
    launched = json.loads(nb(brain, "workflow-launch", "halt", "--json", check=4).stdout)
    assert launched["status"] == "halted" and launched["step"] == "1"
    status = json.loads(nb(brain, "workflow", "status", "halt", "--json", check=0).stdout)
    assert status["run"]["halted"] is True and status["steps"][0] == {"step": "1", "state": "blocked"}
    nb(brain, "workflow", "abort", "halt", check=0)
    assert run_file(brain, "halt")["status"] == "aborted"


# ---- 2. approving the breaker gate resets the breaker ----------------------------------------------


def test_2_approving_the_breaker_gate_is_the_reset(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"brk": BREAKER})
    for i in range(3):
        if i == 0:
            nb(brain, "workflow-launch", "brk", check=0)
        c = open_claim_id(brain, "brk")
        out = nb(brain, "claim", "close", c, "--status", "failed", "--summary", f"fail {i}", check=0)
        if i < 2:
            assert _last(out) == "next: step 1 of brk — `nika-brain workflow resume brk`"
            nb(brain, "workflow", "resume", "brk", check=0)
    gate = run_file(brain, "brk")["gate"]
    assert gate and run_file(brain, "brk")["status"] == "breaker"
    assert _last(out) == ("breaker: circuit breaker tripped on src/ — inspect, then "
                          f"`scripts/preflight-check.sh reset src/` or `nika-brain gate approve {gate}`, "
                          "then `nika-brain workflow resume brk`")
    # The third failure still gets its STEP_DONE (failed).
    done = [r for r in journal(brain, "brk") if r["type"] == "STEP_DONE"]
    assert len(done) == 3 and all(r["payload"]["result"] == "failed" for r in done)
    approved = nb(brain, "gate", "approve", gate, check=0)
    assert _last(approved) == "next: step 1 of brk — `nika-brain workflow resume brk`"
    assert not list((brain.root / "breakers").glob("*.yml")), "approving the gate reset the breaker"
    assert run_file(brain, "brk")["status"] == "running"
    recs = journal(brain)
    assert [r["type"] for r in recs].count("BREAKER_RESET") == 1
    assert any(r["type"] == "GATE_DECIDED" and r["payload"]["gate"] == gate for r in recs)
    nb(brain, "workflow", "resume", "brk", check=0)
    c = open_claim_id(brain, "brk")
    nb(brain, "claim", "close", c, "--status", "ok", check=0)
    assert run_file(brain, "brk")["status"] == "done"


def test_2_the_preflight_reset_approves_the_gate_the_same_way(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"brk": BREAKER})
    nb(brain, "workflow-launch", "brk", check=0)
    for i in range(3):
        nb(brain, "claim", "close", open_claim_id(brain, "brk"), "--status", "failed", check=0)
        if i < 2:
            nb(brain, "workflow", "resume", "brk", check=0)
    gate = run_file(brain, "brk")["gate"]
    nb(brain, "preflight", "reset", "src/", check=0)
    assert load_file(brain.root / "gates" / f"{gate}.yml")["status"] == "approved"
    assert [r["type"] for r in journal(brain)].count("BREAKER_RESET") == 1
    nb(brain, "workflow", "resume", "brk", check=0)
    tried = [r["claim"] for r in journal(brain, "brk") if r["type"] == "STEP_DONE"]
    assert open_claim_id(brain, "brk") not in tried


# ---- 3. theme-branch-merge.sh goes through the 0-failures check -----------------------------------

def _script(brain, name, *args, check):
    env = dict(os.environ, NIKA_BRAIN_DIR=str(brain.root), NIKA_BRAIN=f"{sys.executable} -m nika_brain")
    proc = subprocess.run(["sh", str(REPO / "scripts" / name), *args], cwd=brain.root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == check, proc.stdout + proc.stderr
    return proc


def test_3_theme_branch_merge_refuses_a_run_with_failed_steps_unless_a_human_forces_it(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"halt": HALT})
    nb(brain, "workflow-launch", "halt", check=0)
    _write(brain, "theme/halt", "notes/n.md")
    nb(brain, "claim", "close", open_claim_id(brain, "halt"), "--status", "failed", check=0)
    base = git(brain.root, "rev-parse", "main")
    refused = _script(brain, "theme-branch-merge.sh", "theme/halt", "--test", "true", check=4)
    assert "0-failures gate is not green: failed steps: 1; unresolved steps: 2" in refused.stderr
    assert git(brain.root, "rev-parse", "main") == base
    forced = nb(brain, "branch", "merge", "theme/halt", "--test", "true", "--force-human",
                "--note", "reviewed by hand", env={"NIKA_AGENT": "1"}, check=6)
    assert "human" in forced.stderr
    nb(brain, "branch", "merge", "theme/halt", "--test", "true", "--force-human",
       "--note", "reviewed by hand", check=0)
    assert git(brain.root, "rev-parse", "main") != base
    # The failed attempt's file is set aside on its ref, never merged (issue 18, item 8).
    assert not (brain.root / "notes" / "n.md").is_file()
    merge = [r for r in journal(brain) if r["type"] == "MERGE"]
    assert merge and merge[-1]["payload"]["failed"] == ["1"] and merge[-1]["payload"]["forced_by"]
    assert merge[-1]["payload"]["note"] == "reviewed by hand"


# ---- 4. a satellite that cannot start, dies, or hangs ---------------------------------------------



@pytest.mark.parametrize("case", ["missing", "crash", "timeout"])
def test_4_a_satellite_that_cannot_finish_fails_its_claim_and_frees_its_locks(tmp_path, git_env, case):
    config = {"missing": 'satellite_command: ["nika-no-such-satellite", "{claim}"]\n',
              "crash": satellite_config(), "timeout": satellite_config() + "satellite_timeout: 2\n"}[case]
    angle = {"missing": "result=ok", "crash": "fail", "timeout": "sleep=60 result=ok"}[case]
    brain = orch_brain(tmp_path / "b", {"plain": PLAIN.format(angle=angle)}, config=config)
    out = nb(brain, "workflow-launch", "plain", "--mode", "swarm", check=4)
    assert "Traceback" not in out.stderr and out.stderr == ""
    (c,) = claims_of(brain, "plain")
    assert c["status"] == "closed" and c["result"]["status"] == "failed"
    why = {"missing": "command not found: nika-no-such-satellite", "crash": "satellite exited 3",
           "timeout": "satellite timed out after 2s"}[case]
    assert why in c["result"]["summary"]
    assert not list((brain.root / "locks").glob("*.yml")), "never a held lock without a live holder"
    run = run_file(brain, "plain")
    assert run["status"] == "blocked" and run["claim"] is None
    assert "--retry" in _last(out)
    assert load_file(next((brain.root / "breakers").glob("*.yml")))["fails"] == 1


# ---- 5. only an accepted close commits ------------------------------------------------------------

TESTED = """name: tested
branch: theme/tested
chain:
  - step: 1
    type: test
    scope: tests/
    test: "test -f tests/green"
"""


def test_5_a_refused_close_commits_nothing(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"tested": TESTED})
    nb(brain, "workflow-launch", "tested", check=0)
    c = open_claim_id(brain, "tested")
    _write(brain, "theme/tested", "tests/test_x.py")
    for _ in range(2):
        red = nb(brain, "claim", "close", c, "--status", "ok", "--summary", "tests written", check=4)
        assert "tests not green" in red.stderr
    subjects = git(brain.root, "log", "--format=%s", "theme/tested").splitlines()
    assert not [s for s in subjects if "step 1" in s]
    _write(brain, "theme/tested", "tests/green")
    nb(brain, "claim", "close", c, "--status", "ok", "--summary", "tests written", check=0)
    log = git(brain.root, "log", "--format=%s", "theme/tested").splitlines()
    assert log.count("tested step 1: tests written") == 1


# ---- 6. work written in the wrong folder -------------------------------------------------------------

WRONG = """name: wrong
branch: theme/wrong
chain:
  - step: 1
    type: code
    scope: src/greeting/
    test: "true"
  - step: 2
    type: brain-write
    scope: docs/
"""


def test_6_work_in_the_brain_root_is_named_and_the_close_says_where_it_must_go(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"wrong": WRONG})
    nb(brain, "workflow-launch", "wrong", check=0)
    c1 = open_claim_id(brain, "wrong")
    (brain.root / "src" / "greeting").mkdir(parents=True)
    (brain.root / "src" / "greeting" / "__init__.py").write_text("x = 1\n")
    out = nb(brain, "claim", "close", c1, "--status", "ok", check=4)
    wt = worktree(brain, "theme/wrong")
    assert f"no change in src/greeting/ in the theme worktree {wt}" in out.stderr
    assert "src/greeting/__init__.py" in out.stderr and f"must be written in {wt}" in out.stderr
    assert run_file(brain, "wrong")["claim"] == c1
    (brain.root / "src" / "greeting" / "__init__.py").unlink()
    # A code step with no change at all asks for --empty.
    empty = nb(brain, "claim", "close", c1, "--status", "ok", check=4)
    assert "--empty" in empty.stderr
    nb(brain, "claim", "close", c1, "--status", "ok", "--empty", check=0)
    # A non-code step is closed, with a warning naming the right folder.
    nb(brain, "workflow", "resume", "wrong", check=0)
    c2 = open_claim_id(brain, "wrong")
    (brain.root / "docs").mkdir()
    (brain.root / "docs" / "d.md").write_text("x\n")
    warned = nb(brain, "claim", "close", c2, "--status", "ok", check=0)
    assert f"warning: no change in docs/ in the theme worktree {wt}" in warned.stdout


# ---- what the operator is told ----------------------------------------------------------------------

GATED = """name: gated
branch: theme/gated
chain:
  - step: 1
    type: search
    scope: notes/
    on_done: gate:human → "looked right?"
  - step: 2
    type: search
    scope: docs/
"""


def test_gate_next_lines_and_journal(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"gated": GATED})
    nb(brain, "workflow-launch", "gated", check=0)
    c1 = open_claim_id(brain, "gated")
    out = nb(brain, "claim", "close", c1, "--status", "ok", check=0)
    gate = run_file(brain, "gated")["gate"]
    assert gate == f"gate-{c1}-human"
    assert _last(out) == (f"next: gate {gate} — looked right? — `nika-brain gate approve {gate}` or "
                          f"`nika-brain gate reject {gate}`")
    listed = json.loads(nb(brain, "gate", "list", "--json", check=0).stdout)
    assert [g["id"] for g in listed] == [gate]
    assert _last(nb(brain, "gate", "approve", gate, check=0)) == \
        "next: step 2 of gated — `nika-brain workflow resume gated`"
    nb(brain, "workflow", "resume", "gated", check=0)
    out = nb(brain, "claim", "close", open_claim_id(brain, "gated"), "--status", "ok", check=0)
    merge = run_file(brain, "gated")["report"]["merge"]
    assert _last(out) == f"DONE: gated merged theme/gated into main ({merge})"
    types = [r["type"] for r in journal(brain)]
    for t in ("BRANCH_OPEN", "CLAIM_OPEN", "GATE_PENDING", "GATE_DECIDED", "MERGE", "DONE"):
        assert t in types, t


def test_rejecting_a_gate_says_the_run_is_aborted(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"gated": GATED})
    nb(brain, "workflow-launch", "gated", check=0)
    nb(brain, "claim", "close", open_claim_id(brain, "gated"), "--status", "ok", check=0)
    gate = run_file(brain, "gated")["gate"]
    out = nb(brain, "gate", "reject", gate, check=0)
    who = load_file(brain.root / "gates" / f"{gate}.yml")["decided_by"]
    assert _last(out) == (f"aborted: gate {gate} rejected by {who}"
                          " — start again with `nika-brain workflow-launch gated --restart`")


def test_flags_read_as_words_and_version_exists(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"gated": GATED})
    version = nb(brain, "--version", check=0)
    assert re.fullmatch(r"nika-brain \S+\n", version.stdout)
    for cmd in (("branch", "merge"), ("lock", "acquire"), ("workflow-launch",), ("workflow", "resume"),
                ("init",), ("claim", "close")):
        text = nb(brain, *cmd, "--help", check=0).stdout
        assert "--no-no-" not in text and not re.search(r"--\w[\w-]*/--no-", text), (cmd, text)


# ---- the README's quick start, exactly as written -------------------------------------------------

def test_readme_quick_start_walks_the_example_to_done(tmp_path, git_env):
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    script = section.split("```bash\n", 1)[1].split("```", 1)[0]
    demo = tmp_path / "nika-demo"
    script = script.replace("/tmp/nika-demo", str(demo))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "nika-brain"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m nika_brain "$@"\n')
    shim.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", PYTHONPATH=str(REPO))
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "example: done" in proc.stdout
    assert (demo / "src" / "greeting" / "__init__.py").is_file()
    assert (demo / "docs" / "greeting.md").is_file()
    run = load_file(demo / "runs" / "example.yml")
    assert run["status"] == "done" and run["report"]["delivered"] == ["1", "2", "3"]
    # The Claude Code settings the launch installed are this machine's (absolute paths): ignored,
    # so the brain's checkout is clean after the Quick start (issue 25 §4).
    assert (demo / ".claude" / "settings.json").is_file()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=demo, capture_output=True, text=True).stdout
    assert ".claude" not in status, status


# ---- 8. cross-workflow triggers -------------------------------------------------------------------



def test_8_a_trigger_is_listed_as_next_in_the_triggering_runs_mode(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"w1": W1, "w2": W2})
    nb(brain, "workflow-launch", "w1", check=0)
    c = open_claim_id(brain, "w1")
    _write(brain, "theme/w1", "notes/n.md")
    out = nb(brain, "claim", "close", c, "--status", "ok", check=0)
    merge = run_file(brain, "w1")["report"]["merge"]
    assert _last(out) == (f"DONE: w1 merged theme/w1 into main ({merge}) — next (triggered): "
                          "`nika-brain workflow-launch w2 --step 1 --mode assisted`")
    orch = [r for r in journal(brain, "w1") if r["type"] == "ORCHESTRATE"]
    assert orch[0]["payload"]["mode"] == "assisted"


def test_8_under_wait_the_triggered_run_starts_at_once_and_a_finished_one_is_not_rerun(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"w1": W1, "w2": W2}, config=satellite_config())
    out = nb(brain, "workflow-launch", "w1", "--mode", "swarm", "--wait", "--poll", "0.05", check=0)
    assert run_file(brain, "w1")["status"] == run_file(brain, "w2")["status"] == "done"
    assert run_file(brain, "w2")["mode"] == "swarm" and "[w2] DONE" in out.stdout
    refused = nb(brain, "workflow", "orchestrate", "w2", "--step", "1", check=6)
    assert "is done" in refused.stderr and "--restart" in refused.stderr
    assert len(claims_of(brain, "w2")) == 1
    nb(brain, "workflow", "orchestrate", "w2", "--step", "1", "--rerun", check=0)
    assert len(claims_of(brain, "w2")) == 2


# ---- gate: 0-failures has a visible effect --------------------------------------------------------

ZERO = """name: zero
branch: theme/zero
chain:
  - step: 1
    type: search
    scope: notes/
    gate: 0-failures
    test: "test -f notes/ready"
"""


def test_a_0_failures_gate_refuses_to_start_the_step_while_red(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"zero": ZERO})
    red = nb(brain, "workflow-launch", "zero", check=4)
    assert _last(red) == ("blocked: 0-failures gate red before step 1: 1 failed (test -f notes/ready) — "
                          "fix it, then `nika-brain workflow resume zero`")
    assert not claims_of(brain, "zero")
    _write(brain, "theme/zero", "notes/ready")
    nb(brain, "workflow", "resume", "zero", check=0)
    assert claims_of(brain, "zero")
    assert any("0-failures gate green before step 1" in r["reason"] for r in journal(brain, "zero"))
    bad = orch_brain(tmp_path / "c", {})
    (bad.root / "workflows" / "nogate.yml").write_text(ZERO.replace("name: zero", "name: nogate")
                                                       .replace('    test: "test -f notes/ready"\n', ""))
    out = nb(bad, "validate", "workflows/nogate.yml", check=1)
    assert "gate: 0-failures runs the step's (or the workflow's) test command" in out.stdout + out.stderr
