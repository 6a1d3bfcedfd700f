"""Assisted mode (mode 1) through the real Claude Code CLI, interactive under tmux as an operator runs
it, against the Messages API STAND-IN (tests/claudecli/standin.py: a local HTTP server, not Claude).

`workflow-launch` prints `nika-brain claude start <claim>`; the operator runs it in a terminal (a tmux
pane here), types the step's prompt into Claude Code and ends the session with Ctrl-C. The session
acts as its claim only through the claim's door: `$NIKA_CLAIM`, `printf -v`, `--owner` and the lock
files themselves are no way to act as another claim (issue 24, hole 2 for assisted sessions).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nika_brain.federation.kernels.runtimes.tmux import input_box  # Claude Code's input box, read
from tests.kit.orch import claims_of, nb, run_file, worktree
from tests.kit.wait import until

from .harness import claude_binary, claude_env
from .standin import MessagesStandin, text, tool_use
from .test_real_claude import SATELLITE_WF, _satellite_turn, assert_held_through, door_plan, locked_brain

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
KEY = "sk-standin-not-a-key"   # claude_env's
RULE = "\u2500" * 20           # Claude Code's input box is drawn between rules of these

# `printf -v` re-spells the identity where the hook cannot see it (an interpreter runs the shell).
PRINTF_V = """import subprocess, sys
p = subprocess.run(["bash", "-c", "printf -v NIKA_CLAIM %s other-claim; export NIKA_CLAIM; "
                    + sys.executable + " -m nika_brain lock release src/locked/"], capture_output=True, text=True)
print(f"printf rc={p.returncode} {p.stderr.strip()[:300]}")
"""


@pytest.fixture(autouse=True)
def _binary():
    claude_binary()


class Pane:
    """One tmux pane on a private server: the operator's terminal."""

    def __init__(self, sock: Path):
        self.sock = sock

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-S", str(self.sock), *args], capture_output=True, text=True, timeout=30)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p").stdout

    def session(self, cwd: Path, command: str, env: dict, standin, *, prompt: str, results: int, last: str,
                rc: Path, started=lambda: None) -> None:
        """Run `command` (a Claude Code) in a new pane in `cwd`, type `prompt` once its input box shows
        (after `started()`), wait for `results` tool results and the `last` answer, end it with /exit
        (its exit code to `rc`), and stop the tmux server whatever happened."""
        subprocess.run(["tmux", "-S", str(self.sock), "new-session", "-d", "-x", "200", "-y", "50", "-c",
                        str(cwd), f"{command}; echo rc=$? > {rc}"], env=env, check=True)
        try:
            until(lambda: RULE in self.screen(), timeout=120, what="Claude Code's input box")
            started()
            self.enter(prompt, lambda: bool(standin.conversation()))
            until(lambda: len(standin.tool_results()) >= results, timeout=300, what="the session's script")
            until(lambda: last in self.screen(), what="the last answer")
            self.enter("/exit", rc.exists, shown="Exit the CLI")   # the operator ends the session
        finally:
            self.tmux("kill-server")

    def enter(self, line: str, taken, shown: str | None = None) -> None:
        """Type `line`, press Enter once the screen shows it (or `shown`), and again while it still sits
        in the input box and `taken()` says nothing read it (a loaded machine can turn a quick Enter
        into a newline)."""
        self.tmux("send-keys", "-l", line)
        mark = "".join((shown or line).split())
        until(lambda: mark in "".join(self.screen().split()), what=f"{line!r} typed")
        self.tmux("send-keys", "Enter")
        deadline = time.monotonic() + 120
        while not taken() and time.monotonic() < deadline:
            time.sleep(0.5)
            box = input_box(self.screen())
            if not taken() and box and line in box:
                self.tmux("send-keys", "Enter")
        assert taken(), f"{line!r} was never taken:\n{self.screen()}"


def test_an_assisted_session_started_with_claude_start_acts_as_its_claim_only_through_its_door(
        tmp_path, git_env):
    """The session the operator starts with the hint's command: another claim's lock survives
    `NIKA_CLAIM=<other>`, `printf -v NIKA_CLAIM`, `--owner <other>`, the door dropped, and python
    writing or unlinking its file; the session's own lock and claim close work through its door; the
    door is gone once the operator ends the session."""
    brain, held, lock_file, before = locked_brain(tmp_path, "sat", SATELLITE_WF)   # launched assisted here
    launched = nb(brain, "workflow-launch", "sat", check=0)   # assisted: the brief and the hint
    cid = run_file(brain, "sat")["claim"]
    hint = f"  nika-brain claude start {cid}"
    assert hint in launched.stdout.splitlines() and "NIKA_CLAIM=" not in launched.stdout, launched.stdout
    tree = worktree(brain, "theme/sat")
    home = tmp_path / "claude-home"
    home.mkdir()
    # an installed claude that has done its onboarding, trusts the worktree and knows the key
    (home / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True, "numStartups": 3,
        "projects": {str(tree.resolve()): {"hasTrustDialogAccepted": True}},
        "customApiKeyResponses": {"approved": [KEY[-20:]], "rejected": []}}))
    state: dict[str, str] = {}

    def respond(body: dict) -> list | None:
        claim, turn = _satellite_turn(state, body)
        plan = door_plan(tree, lock_file, brain.root, claim, extra=[
            [tool_use("Write", file_path=str(tree / "src" / "app" / "printf.py"), content=PRINTF_V)],
            [tool_use("Bash", command=f"{PY} src/app/printf.py", description="attack")]])
        return plan[turn] if turn < len(plan) else [text("done")]

    pane = Pane(tmp_path / "tmux.sock")
    sock = brain.guarded_dir / "doors" / cid / "door.sock"
    with MessagesStandin(respond=respond) as standin:
        env = claude_env(home, standin.url, {"PYTHONPATH": str(REPO), "TERM": "xterm-256color"})
        env.update({k: v for k, v in os.environ.items() if k.startswith(("GIT_", "NSS_WRAPPER", "LD_PRELOAD"))})
        # the operator's terminal, in the brain, running the hint's command (the key: the operator's)
        command = f"{PY} -m nika_brain {hint.strip().removeprefix('nika-brain ')} -- --permission-mode acceptEdits"

        def has_door() -> None:
            assert sock.exists(), "the session has no door"
        pane.session(brain.root, command, env, standin, prompt="do the step of your brief", results=9,
                     last="Step done; claim closed.", rc=tmp_path / "rc", started=has_door)
    results = list(standin.tool_results().values())
    _, attack, _, printf_v, acquire, renew, _, release, close = results[:9]
    assert_held_through(brain, held, lock_file, before, attack, session="assisted session")
    assert "printf rc=6" in printf_v["text"] and "other-claim" in printf_v["text"], printf_v
    for step in (acquire, renew, release, close):
        assert not step["is_error"], step["text"]
    assert "acquired src/app/" in acquire["text"] and "released src/app/" in release["text"]
    assert "closed " in close["text"], close["text"]
    (claim,) = claims_of(brain, "sat")
    assert claim["id"] == state["claim"] == cid and claim["result"]["status"] == "ok"
    assert not sock.exists(), "the door outlived its session"
    assert (tmp_path / "rc").read_text().strip() == "rc=0"
    # the step it closed: committed and routed by `claude start` once the session ended (git is
    # read-only in the session's sandbox), merged into main: the run is done
    assert run_file(brain, "sat")["status"] == "done"
    assert (brain.root / "src" / "app" / "main.py").read_text() == "print('hi')\n"


def test_a_claude_code_started_by_hand_with_another_claims_name_acts_as_no_claim(tmp_path, git_env):
    """Issue 24: a door is the only agent path. `NIKA_CLAIM=<the step's claim> claude` typed in a terminal
    (not `claude start`): its Bash `nika-brain lock release` and `lock renew` of that claim's lock are
    refused with no effect (the operator's key is out of its sandbox's reach, and without a door
    `$NIKA_CLAIM` proves nothing), its Write under the lock is refused by the hook, and it was told so
    at its start in one line naming `nika-brain claude start <claim>`."""
    brain, _held, _lock_file, _before = locked_brain(tmp_path, "sat", SATELLITE_WF)
    nb(brain, "workflow-launch", "sat", check=0)   # assisted: the step's claim holds src/app/
    cid = run_file(brain, "sat")["claim"]
    tree = worktree(brain, "theme/sat")
    locks_before = {p.name: p.read_bytes() for p in (brain.root / "locks").iterdir()}
    assert len(locks_before) == 2 and any(cid.encode() in b for b in locks_before.values())
    home = tmp_path / "claude-home"
    home.mkdir()
    (home / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True, "numStartups": 3,
        "projects": {str(brain.root.resolve()): {"hasTrustDialogAccepted": True}},
        "customApiKeyResponses": {"approved": [KEY[-20:]], "rejected": []}}))
    nbc = f"{PY} -m nika_brain"
    script = [   # in the brain, under the brain's own settings (`claude install`: its sandbox, its hooks)
        [tool_use("Bash", command=f"{nbc} lock release src/app/", description="release")],
        [tool_use("Bash", command=f"{nbc} lock renew src/app/ --ttl 3000", description="renew")],
        [tool_use("Write", file_path=str(tree / "src" / "app" / "main.py"), content="print('hi')\n")],
        [text("Nothing changed here.")],
    ]
    pane = Pane(tmp_path / "tmux.sock")
    with MessagesStandin(script=script) as standin:
        env = claude_env(home, standin.url, {"PYTHONPATH": str(REPO), "TERM": "xterm-256color", "NIKA_CLAIM": cid})
        # the operator's own user and passwd home: the key is on disk, Claude Code's sandbox hides it
        env.update({k: v for k, v in os.environ.items() if k.startswith(("GIT_", "NSS_WRAPPER", "LD_PRELOAD"))})
        pane.session(brain.root, f"{claude_binary()} --permission-mode acceptEdits", env, standin,
                     prompt="free the lock on src/app/", results=3, last="Nothing changed here.", rc=tmp_path / "rc")
        told = standin.sent_text()
    release, renew, write = list(standin.tool_results().values())[:3]
    for step in (release, renew):
        assert "operator's authority" in step["text"], step
        assert f"`nika-brain claude start {cid}`" in step["text"], step
    assert write["is_error"] and f"nika-brain claude start {cid}" in write["text"], write
    assert {p.name: p.read_bytes() for p in (brain.root / "locks").iterdir()} == locks_before
    assert not (tree / "src" / "app" / "main.py").exists()
    assert claims_of(brain, "sat")[0]["status"] == "open"
    assert "acts as no claim" in told and f"`nika-brain claude start {cid}`" in told, told[-3000:]
