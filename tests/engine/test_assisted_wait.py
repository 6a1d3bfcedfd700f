"""Mode 1 as an operator lives it: `workflow-launch --wait` in a real terminal (tmux) prints each
brief, and routes each result the human reports from another shell, up to DONE."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import uuid

from tests.kit.orch import nb, open_claim_id, orch_brain, run_file, worktree
from tests.kit.wait import until

WF = """name: duo
branch: theme/duo
chain:
  - step: 1
    type: search
    scope: notes/
    story_angle: collect the notes
  - step: 2
    type: brain-write
    scope: docs/
    story_angle: write the summary
"""


SOCKET = f"nika-test-{uuid.uuid4().hex[:8]}"  # our own tmux server: it inherits this test's env


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", SOCKET, *args], check=True, capture_output=True, text=True).stdout


def _screen(session: str) -> str:
    return _tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", session)


def _wait_for(predicate, what: str, timeout: float = 180.0):
    return until(predicate, timeout, every=0.1, what=what)


def test_launch_wait_in_a_terminal_routes_each_report_until_done(tmp_path, git_env):
    assert shutil.which("tmux"), "tmux is required (bash .ci/run installs it)"
    brain = orch_brain(tmp_path / "b", {"duo": WF})
    session = f"nika-{uuid.uuid4().hex[:8]}"
    done_flag = tmp_path / "exit-code"
    cmd = (f"cd {shlex.quote(str(brain.root))} && {shlex.quote(sys.executable)} -m nika_brain "
           f"workflow-launch duo --wait --poll 0.1; echo $? > {shlex.quote(str(done_flag))}")
    _tmux("new-session", "-d", "-s", session, "-x", "200", "-y", "50", cmd)
    _tmux("set-option", "-t", session, "remain-on-exit", "on")
    try:
        _wait_for(lambda: "collect the notes" in _screen(session), "the brief of step 1")
        c1 = _wait_for(lambda: run_file(brain, "duo").get("claim"), "claim 1")
        assert f"nika-brain claim close {c1}" in _screen(session)
        (worktree(brain, "theme/duo") / "notes").mkdir(parents=True)
        (worktree(brain, "theme/duo") / "notes" / "n.md").write_text("notes\n")
        nb(brain, "claim", "close", c1, "--status", "ok", "--summary", "notes collected", check=0)

        _wait_for(lambda: "write the summary" in _screen(session), "the brief of step 2")
        c2 = _wait_for(lambda: (c := run_file(brain, "duo").get("claim")) != c1 and c, "claim 2")
        nb(brain, "claim", "close", c2, "--status", "ok", "--summary", "summary written", check=0)

        _wait_for(done_flag.exists, "the launch to end")
        assert done_flag.read_text().strip() == "0"
        assert "DONE" in _screen(session)
    finally:
        subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True)
    run = run_file(brain, "duo")
    assert run["status"] == "done" and run["report"]["delivered"] == ["1", "2"]
    assert (brain.root / "notes" / "n.md").read_text() == "notes\n"
    assert open_claim_id(brain, "duo") is None
