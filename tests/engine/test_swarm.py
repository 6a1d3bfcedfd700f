"""Mode 3 (swarm): the orchestrator launches each satellite itself and routes what it reports.

The satellite is tests/satellite_program.py, A REAL SMALL PROGRAM STANDING IN FOR CLAUDE CODE: a
separate process that reads its claim and brief, writes in its scope inside the theme worktree, and
reports by a JSON line or by closing its own claim. The default command (`claude -p ...`) is
exercised with an executable named `claude` on PATH that is that same stand-in program.
"""
from __future__ import annotations

import json
import os
import sys

from nika_brain.support.yamlsafe import load_file
from tests.kit.brain import git_out as git
from tests.kit.orch import PLAIN, SATELLITE, claims_of, journal, nb, orch_brain, run_file, satellite_config, worktree

SWARM = """name: swarm
branch: theme/swarm
chain:
  - step: 1
    type: code
    scope: src/a/
    story_angle: "build it; result=ok"
    test: "ls src/a/*.txt"
  - step: 2
    type: brain-write
    scope: docs/
    story_angle: "self-close result=ok"
  - step: 3
    type: search
    scope: notes/
    story_angle: "result=partial"
    on_partial: gate:human → "step 3 partiel — continuer ?"
  - step: 4
    type: deploy
    scope: deploy/
    story_angle: "try-gate result=ok"
"""


def test_swarm_runs_real_satellites_routes_each_result_and_merges(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"swarm": SWARM}, config=satellite_config())
    first = nb(brain, "workflow-launch", "swarm", "--mode", "swarm", check=5)
    # Steps 1 and 2 ran without anyone; step 3's partial result stops at the human gate.
    assert "GATE_PENDING" in first.stdout and "step 3 partiel" in first.stdout
    run = run_file(brain, "swarm")
    assert run["status"] == "gated" and run["mode"] == "swarm"
    c1, c2, c3 = claims_of(brain, "swarm")
    assert [c["status"] for c in (c1, c2, c3)] == ["closed"] * 3
    # Step 1 reported by a JSON line; its validated close ran the step's test in the worktree.
    assert c1["result"]["status"] == "ok" and c1["result"]["summary"] == "satellite wrote src/a/"
    assert c1["result"]["tests"]["failed"] == 0 and c1["result"]["tests"]["passed"] is not None
    # Step 2 closed its own claim through the CLI, from inside its own process.
    assert c2["result"]["summary"] == "satellite wrote docs/ (self-closed)"
    assert c3["result"]["status"] == "partial"
    # Each satellite's work is committed on the theme branch, attributed to its claim.
    log = git(brain.root, "log", "--format=%B", "theme/swarm")
    for c in (c1, c2, c3):
        assert f"Claim: {c['id']}" in log
    made = json.loads((worktree(brain, "theme/swarm") / "src" / "a" / f"{c1['id']}.txt").read_text())
    assert made["nika_agent"] == "1" and made["instructions"]["result"] == "ok"
    assert not list((brain.root / "locks").glob("*.yml")), "no lock held while a human decides"

    # A human gate unrelated to this run, pending while step 4's satellite runs: it tries to approve it.
    nb(brain, "gate", "open", "manual-check", "a human looks at this", check=0)
    nb(brain, "gate", "approve", run["gate"], check=0)
    done = nb(brain, "workflow-launch", "swarm", "--mode", "swarm", check=0)
    assert "DONE" in done.stdout
    c4 = claims_of(brain, "swarm")[3]
    tried = json.loads((brain.root / "deploy" / f"{c4['id']}.txt").read_text())
    assert tried["nika_agent"] == "1"
    assert [a["gate"] for a in tried["gate_attempts"]] == ["manual-check"]
    assert tried["gate_attempts"][0]["exit"] == 6 and "agent session" in tried["gate_attempts"][0]["said"]
    assert load_file(brain.root / "gates" / "manual-check.yml")["status"] == "pending"

    run = run_file(brain, "swarm")
    assert run["status"] == "done"
    assert run["report"]["delivered"] == ["1", "2", "4"] and run["report"]["partial"] == ["3"]
    for rel in (f"src/a/{c1['id']}.txt", f"docs/{c2['id']}.txt", f"notes/{c3['id']}.txt"):
        assert (brain.root / rel).is_file(), f"{rel} merged into main"
    assert len(git(brain.root, "log", "--merges", "--format=%H").split()) == 1
    done_steps = [(r["step"], r["payload"]["result"]) for r in journal(brain, "swarm") if r["type"] == "STEP_DONE"]
    assert done_steps == [("1", "ok"), ("2", "ok"), ("3", "partial"), ("4", "ok")]
    assert not list((brain.root / "locks").glob("*.yml"))


FAILING = """name: failing
branch: theme/failing
chain:
  - step: 1
    type: search
    scope: notes/
    story_angle: "fail"
  - step: 2
    type: search
    scope: docs/
    story_angle: "result=failed"
    on_fail: abort
"""


def test_a_crashed_satellite_is_a_failed_step_and_an_abort_action_stops_the_chain(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"failing": FAILING}, config=satellite_config())
    out = nb(brain, "workflow-launch", "failing", "--mode", "swarm", check=4)
    assert "BLOCKED_ON" in out.stdout and "Traceback" not in out.stderr
    (c1,) = claims_of(brain, "failing")
    assert c1["result"]["status"] == "failed"
    assert "failing on purpose" in c1["result"]["summary"], "the satellite's last stderr line is the summary"
    run = run_file(brain, "failing")
    assert run["status"] == "blocked" and run["cursor"] == "1"
    # Step 1 fixed (ADAPT replaces its angle); a human retries it, then step 2 fails into abort.
    nb(brain, "workflow", "adapt", "failing", "--replace", "1", "--step-yaml",
       '{type: search, scope: notes/, story_angle: "result=ok"}', check=0)
    nb(brain, "workflow-launch", "failing", "--mode", "swarm", check=4)  # still halted
    out = nb(brain, "workflow", "resume", "failing", "--retry", check=6)
    assert "ABORT" in out.stdout
    cs = claims_of(brain, "failing")
    assert [(c["step"], c["result"]["status"]) for c in cs] == [(1, "failed"), (1, "ok"), (2, "failed")]
    assert run_file(brain, "failing")["status"] == "aborted"
    assert not list((brain.root / "locks").glob("*.yml"))
    assert not git(brain.root, "log", "--merges", "--format=%H"), "an aborted chain merges nothing"


RED = """name: red
branch: theme/red
chain:
  - step: 1
    type: code
    scope: src/
    story_angle: "result=ok"
    test: "test -f src/never-written"
"""


def test_satellite_saying_ok_with_red_tests_is_a_failed_step(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"red": RED}, config=satellite_config())
    out = nb(brain, "workflow-launch", "red", "--mode", "swarm", check=4)
    assert "BLOCKED_ON" in out.stdout
    (c,) = claims_of(brain, "red")
    assert c["result"]["status"] == "failed" and c["result"]["summary"].startswith("tests not green")
    assert any("validated close refused" in r["reason"] for r in journal(brain, "red"))


LOOP = """name: loop
branch: theme/loop
chain:
  - step: 1
    type: search
    scope: src/
    story_angle: "fail"
    on_fail: trigger:1
"""


def test_swarm_never_relaunches_past_the_circuit_breaker(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"loop": LOOP}, config=satellite_config())
    out = nb(brain, "workflow-launch", "loop", "--mode", "swarm", check=4)
    assert "CIRCUIT_BREAK" in out.stdout
    assert len(claims_of(brain, "loop")) == 3, "exactly three attempts, then the breaker stops the loop"
    again = nb(brain, "workflow-launch", "loop", "--mode", "swarm", check=4)
    assert "CIRCUIT_BREAK" in again.stdout
    assert len(claims_of(brain, "loop")) == 3, "a relaunch does not run a fourth satellite"
    assert run_file(brain, "loop")["status"] == "breaker"


PROTECTED = """name: prot
branch: theme/prot
chain:
  - step: 1
    type: brain-write
    scope: kernel-area/
    agent: kernel-writer
    story_angle: "result=ok"
"""


def test_a_protected_zone_needs_a_human_go_before_the_satellite_runs(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"prot": PROTECTED}, config=satellite_config())
    out = nb(brain, "workflow-launch", "prot", "--mode", "swarm", check=5)
    assert "protected zone kernel" in out.stdout
    assert claims_of(brain, "prot") == [], "no satellite before the human go"
    nb(brain, "gate", "approve", run_file(brain, "prot")["gate"], check=0)
    nb(brain, "workflow-launch", "prot", "--mode", "swarm", check=0)
    (c,) = claims_of(brain, "prot")
    assert (brain.root / "kernel-area" / f"{c['id']}.txt").is_file()
    assert run_file(brain, "prot")["status"] == "done"




def test_default_satellite_command_is_claude_headless_with_the_kernel_settings(tmp_path, git_env, monkeypatch):
    # An executable named `claude` on PATH that is the stand-in program, not Claude Code.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    claude = bindir / "claude"
    claude.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SATELLITE}" --as-claude "$@"\n')
    claude.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-stand-in")   # a logged-in claude, as far as nika-brain can tell
    settings = '{"permissions": {"deny": ["Bash(git push:*)"]}}\n'
    brain = orch_brain(tmp_path / "b", {"plain": PLAIN.format(angle="look around")},
                       files={"kernels/k1/kernel.yml": "id: k1\ngoal: g\n"})
    # Untracked, as Claude Code settings are (they hold machine paths); the user's own rules.
    (brain.kernels_dir / "k1" / ".claude").mkdir()
    (brain.kernels_dir / "k1" / ".claude" / "settings.json").write_text(settings)
    nb(brain, "workflow-launch", "plain", "--mode", "swarm", "--context", '{"kernel": "k1"}', check=0)
    (c,) = claims_of(brain, "plain")
    assert c["result"] == {"status": "ok", "summary": "stand-in claude wrote notes/",
                           "tests": {"passed": None, "failed": None}}
    seen = json.loads((brain.root / "notes" / f"{c['id']}.txt").read_text())
    argv = seen["argv"]
    assert argv[0] == "-p" and argv[1].startswith("# Brief — plain / step 1 (search)")
    assert "- kernel: k1" in argv[1], "the run's context reaches the brief"
    assert argv[2:6] == ["--output-format", "json", "--permission-mode", "acceptEdits"]
    kernel_settings = brain.kernels_dir / "k1" / ".claude" / "settings.json"
    # The satellite's own settings: the kernel's, plus what makes its door the only way to change locks
    # and claims (claude/settings.satellite_settings).
    own = brain.root / ".nika" / "guarded" / "satellites" / c["id"] / "settings.json"
    assert argv[6:] == ["--settings", str(own)]
    mine = json.loads(own.read_text())
    # It ran in nika-brain's wall (bwrap runs here: claude/bwrap.satellite_wall), where Claude Code's
    # own bwrap cannot nest (no capabilities): off inside ours.
    assert seen["sandbox"] == "bwrap" and mine["sandbox"] == {"enabled": False}
    assert "Bash" in mine["permissions"]["allow"]   # as Claude Code allows a sandboxed command
    # Where no wall can be built (macOS's Seatbelt, bwrap missing), Claude Code's sandbox carries the
    # same walls: the door the only way to change locks, claims and the kernels' queues.
    from nika_brain.claude import settings as claude_settings
    bare = json.loads(claude_settings.satellite_settings(brain.root, kernel_settings, tmp_path / "s.json").read_text())
    assert {str(brain.root / "locks"), str(brain.root / "claims"), str(brain.root / ".git"),
            str(brain.kernels_dir / "k1" / "runs"), str(brain.kernels_dir / "k1" / "queue.jsonl")} \
        <= set(bare["sandbox"]["filesystem"]["denyWrite"])
    assert str(brain.root / ".nika" / "doors") in bare["sandbox"]["filesystem"]["denyRead"]
    assert bare["sandbox"]["network"]["allowAllUnixSockets"] is True
    # Installed before the satellite ran: nika-brain's hooks and isolation, the user's rule kept.
    merged = json.loads(kernel_settings.read_text())
    assert mine["hooks"] == merged["hooks"] and mine["permissions"]["deny"] == merged["permissions"]["deny"]
    assert "Bash(git push:*)" in merged["permissions"]["deny"] and merged["sandbox"]["enabled"]
    assert any("hook PreToolUse" in h["command"] for g in merged["hooks"]["PreToolUse"] for h in g["hooks"])
    assert os.path.realpath(seen["cwd"]) == os.path.realpath(worktree(brain, "theme/plain"))
    assert seen["nika_agent"] == "1"


def test_a_missing_satellite_command_fails_the_step_frees_the_scope_and_a_retry_runs_it(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"plain": PLAIN.format(angle="look around")},
                       config='satellite_command: ["nika-no-such-satellite", "{claim}"]\n')
    out = nb(brain, "workflow-launch", "plain", "--mode", "swarm", check=4)
    assert "satellite could not start: command not found: nika-no-such-satellite" in out.stdout
    assert "Traceback" not in out.stderr
    (c,) = claims_of(brain, "plain")
    assert c["status"] == "closed" and c["result"]["status"] == "failed"
    assert run_file(brain, "plain")["claim"] is None and not list((brain.root / "locks").glob("*.yml"))
    # Once the command is fixed, a human retries the step: a new claim, run by the satellite.
    cfg = brain.root / "nika-brain.yml"
    cfg.write_text(cfg.read_text().split("satellite_command")[0] + satellite_config())
    git(brain.root, "commit", "-qam", "real satellite")
    nb(brain, "workflow", "resume", "plain", "--retry", check=0)
    first, again = claims_of(brain, "plain")
    assert first["id"] == c["id"] and again["result"]["status"] == "ok"
    assert (brain.root / "notes" / f"{again['id']}.txt").is_file()


SEES_THE_INDEX = r"""
import json, os
text = open(os.path.join(os.environ["NIKA_BRAIN_DIR"], "BRAIN-INDEX.md")).read()
listed = os.environ["NIKA_CLAIM"] in text
print(json.dumps({"status": "ok" if listed else "failed",
                  "summary": "the index lists its claim" if listed else "the index does not list its claim"}))
"""


def test_each_satellite_finds_its_claim_in_the_index_and_the_state_commit_carries_the_last_index(tmp_path, git_env):
    """A drive regenerates the index when it hands over (engine/index.held): before each satellite
    starts, before each state commit, when it returns."""
    program = tmp_path / "sees_the_index.py"
    program.write_text(SEES_THE_INDEX)
    chain = "".join(f"  - step: {i}\n    type: search\n    scope: s{i}/\n" for i in (1, 2, 3))
    brain = orch_brain(tmp_path / "b", {"seen": f"name: seen\nbranch: theme/seen\nchain:\n{chain}"},
                       config=f'satellite_command: ["{sys.executable}", "{program}"]\n')
    done = nb(brain, "workflow-launch", "seen", "--mode", "swarm", check=0)
    assert "DONE" in done.stdout
    said = [(c["result"]["status"], c["result"]["summary"]) for c in claims_of(brain, "seen")]
    assert said == [("ok", "the index lists its claim")] * 3
    from nika_brain.engine import index
    assert index.is_current(brain)
    assert git(brain.root, "show", "HEAD:BRAIN-INDEX.md").strip() == (brain.root / "BRAIN-INDEX.md").read_text().strip()
