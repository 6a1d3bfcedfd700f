"""`.claude/settings.json` install/uninstall (merge with the user's own entries) and the status line,
whose commands are then run as the real processes Claude Code would spawn."""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nika_brain.claude import settings as claude_settings
from nika_brain.errors import BrainError
from nika_brain.state import sessions
from tests.kit.claude import FIXTURES, SID, bound_env, clean_env, fixture, hook_brain

EVENTS = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart", "Stop", "PreCompact",
          "SessionEnd")
# Tool names of current Claude Code builds (2.1.3xx); LS and NotebookRead are gone, Monitor and
# PowerShell run shell commands.
TOOLS = {"Edit", "Write", "MultiEdit", "NotebookEdit", "Read", "Grep", "Glob", "Bash", "Monitor", "PowerShell",
         "WebFetch", "WebSearch"}   # the network tools: a kernel's doctrine may refuse them

USER_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(pytest *)"], "deny": ["Read(./.env)"], "defaultMode": "acceptEdits"},
    "env": {"MY_VAR": "1"},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "my-guard.sh", "timeout": 5}]}],
        "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
    },
    "statusLine": {"type": "command", "command": "my-status.sh"},
}


@pytest.fixture
def hb(tmp_path, git_env):
    return hook_brain(tmp_path / "brain")


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def _abs(root, glob: str) -> str:
    return f"Read(/{root.as_posix()}/{glob})"


def ours(settings: dict, event: str) -> list[dict]:
    return [h for g in settings.get("hooks", {}).get(event, []) for h in g["hooks"]
            if "-m nika_brain hook" in h["command"]]


def test_install_writes_valid_hooks_for_every_event(hb):
    brain, _ = hb
    path = claude_settings.install(brain.root)
    assert path == brain.root / ".claude" / "settings.json"
    data = read(path)
    for event in EVENTS:
        groups = data["hooks"][event]
        assert len(groups) == 1
        handler = groups[0]["hooks"][0]
        assert handler["type"] == "command"
        # Seconds, not milliseconds: a 10000 here would be a 2.7-hour hook.
        assert isinstance(handler["timeout"], int) and 1 <= handler["timeout"] <= 60
        assert shlex.split(handler["command"])[0] == sys.executable
        assert handler["command"].endswith(f"-m nika_brain hook {event}")
    for event in ("PreToolUse", "PostToolUse"):
        matcher = data["hooks"][event][0]["matcher"]
        # An exact-name list: anything else is a regex in Claude Code and may match other tools.
        assert re.fullmatch(r"[A-Za-z]+(\|[A-Za-z]+)*", matcher)
        assert set(matcher.split("|")) <= TOOLS
    assert {"Edit", "Write", "MultiEdit", "NotebookEdit", "Bash", "Read"} <= set(
        data["hooks"]["PreToolUse"][0]["matcher"].split("|"))
    assert set(data["hooks"]["PostToolUse"][0]["matcher"].split("|")) == {"Edit", "Write", "MultiEdit", "NotebookEdit"}
    assert data["statusLine"]["command"].endswith("-m nika_brain claude statusline")
    assert "env" not in data  # the brain install binds no kernel
    deny = data["permissions"]["deny"]
    assert _abs(brain.root, "**/.env") in deny and _abs(brain.root, "**/terraform.tfvars") in deny
    assert not any("/kernels/" in r for r in deny)  # no kernel to isolate
    box = data["sandbox"]
    assert box["enabled"] is True and box["failIfUnavailable"] is False
    assert box["allowUnsandboxedCommands"] is False
    assert box["filesystem"]["allowWrite"] == [str(brain.root)]
    assert str(brain.root / ".claude") in box["filesystem"]["denyWrite"]


def test_installed_commands_run_as_claude_code_would_spawn_them(hb):
    brain, claim_id = hb
    data = read(claude_settings.install(brain.root))
    pre = data["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    payload = json.dumps(fixture("pre_tool_use_edit_locked", brain))
    # Claude Code runs the command string through a shell, with the brain announced by the env.
    proc = subprocess.run(["sh", "-c", pre], input=payload, text=True, capture_output=True,
                          env=bound_env(brain, claim_id), cwd="/")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    status = subprocess.run(["sh", "-c", data["statusLine"]["command"]], input="{}", text=True,
                            capture_output=True, env=bound_env(brain, claim_id, "alpha"))
    assert status.returncode == 0 and "kernel alpha" in status.stdout


def test_merge_keeps_user_entries_and_uninstall_restores_them(hb):
    brain, _ = hb
    path = brain.root / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(USER_SETTINGS, indent=4))
    claude_settings.install(brain.root)
    data = read(path)
    assert data["model"] == "opus"
    assert data["statusLine"] == USER_SETTINGS["statusLine"]  # theirs, not replaced
    assert data["hooks"]["PreToolUse"][0] == USER_SETTINGS["hooks"]["PreToolUse"][0]  # theirs first
    assert len(ours(data, "PreToolUse")) == 1
    assert data["hooks"]["Notification"] == USER_SETTINGS["hooks"]["Notification"]
    assert data["permissions"]["allow"] == USER_SETTINGS["permissions"]["allow"]
    assert data["permissions"]["deny"][0] == "Read(./.env)"  # theirs first, ours after
    assert data["env"] == USER_SETTINGS["env"]
    claude_settings.uninstall(brain.root)
    assert read(path) == USER_SETTINGS
    assert not (path.parent / claude_settings.SIDECAR).exists()


def test_install_is_idempotent_and_refreshes_a_stale_command(hb):
    brain, _ = hb
    path = claude_settings.install(brain.root)
    first = path.read_bytes()
    claude_settings.install(brain.root)
    assert path.read_bytes() == first
    claude_settings.install(brain.root, command="/usr/bin/env nika-brain")
    data = read(path)
    assert [h["command"] for h in ours(data, "Stop")] == []  # the old python path is gone...
    stop = [h["command"] for g in data["hooks"]["Stop"] for h in g["hooks"]]
    assert stop == ["/usr/bin/env nika-brain hook Stop"]  # ...replaced, not duplicated


def test_kernel_install_isolates_the_kernel(hb):
    brain, _ = hb
    folder = brain.root / "kernels" / "alpha"
    data = read(claude_settings.install(folder))
    root = brain.root.as_posix()
    deny = data["permissions"]["deny"]
    for other in ("beta", "gamma"):
        assert f"Read(/{root}/kernels/{other}/**)" in deny
        assert f"Edit(/{root}/kernels/{other}/**)" in deny
    assert not any("/kernels/alpha/" in rule for rule in deny)
    assert f"Read(/{root}/**/.env)" in deny
    # No Edit rule on the state folders: Claude Code turns Edit rules into sandbox denyWrite, and the
    # agent's own `nika-brain claim close` writes there (the hook refuses hand edits).
    assert f"Edit(/{root}/gates/**)" not in deny and f"Edit(/{root}/.claude/**)" in deny
    assert all(rule.startswith(("Read(//", "Edit(//")) for rule in deny)  # absolute, not settings-relative
    from nika_brain.state import authority
    assert f"Read(/{authority.private_dir().as_posix()}/**)" in deny
    box = data["sandbox"]["filesystem"]
    assert str(brain.root / "kernels" / "beta") in box["denyRead"]
    assert str(authority.private_dir()) in box["denyRead"]
    assert str(brain.root / "kernels" / "alpha" / ".claude") in box["denyWrite"]
    assert data["env"] == {"NIKA_KERNEL_ID": "alpha", "NIKA_BRAIN_DIR": str(brain.root)}
    assert (folder / ".claude" / "settings.json").is_file()
    assert not (brain.root / ".claude").exists()


def test_uninstall_removes_only_what_it_added(hb):
    brain, _ = hb
    folder = brain.root / "kernels" / "alpha"
    root = brain.root.as_posix()
    theirs = f"Read(/{root}/kernels/beta/**)"  # the user wrote one of our rules before us
    path = folder / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"permissions": {"deny": [theirs]}}))
    claude_settings.install(folder)
    assert read(path)["permissions"]["deny"].count(theirs) == 1
    data = read(path)
    data["env"]["NIKA_BRAIN_DIR"] = "/elsewhere"  # changed by the user after install: now theirs
    path.write_text(json.dumps(data))
    claude_settings.uninstall(folder)
    left = read(path)
    assert left == {"permissions": {"deny": [theirs]}, "env": {"NIKA_BRAIN_DIR": "/elsewhere"}}


def test_uninstall_of_a_file_that_was_all_ours_removes_it(hb):
    brain, _ = hb
    path = claude_settings.install(brain.root)
    claude_settings.uninstall(brain.root)
    assert not path.exists()
    claude_settings.uninstall(brain.root)  # nothing installed: nothing to do, no error
    assert not path.exists()


@pytest.mark.parametrize("text,line", [('{\n  "hooks": {\n    "Stop": [,]\n  }\n}\n', 3), ("[1, 2]", 1)])
def test_unreadable_settings_are_never_clobbered(hb, text, line):
    brain, _ = hb
    path = brain.root / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(BrainError) as err:
        claude_settings.install(brain.root)
    assert err.value.file == str(path) and err.value.line == line
    assert path.read_text() == text


def test_settings_with_wrong_shapes_are_refused(hb):
    brain, _ = hb
    path = brain.root / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"hooks": {"Stop": "not a list"}}))
    with pytest.raises(BrainError) as err:
        claude_settings.install(brain.root)
    assert err.value.key == "hooks.Stop"


def test_missing_interpreter_is_refused(hb):
    brain, _ = hb
    with pytest.raises(BrainError, match="127"):
        claude_settings.install(brain.root, command="/no/such/python -m nika_brain")
    assert not (brain.root / ".claude" / "settings.json").exists()


# ---- status line ------------------------------------------------------------------------------

def statusline(stdin: str, env: dict[str, str], cwd: Path | str = "/") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nika_brain", "claude", "statusline"], input=stdin,
                          text=True, capture_output=True, env=env, cwd=str(cwd))


def test_statusline_shows_kernel_claim_and_context(hb):
    brain, claim_id = hb
    start = fixture("session_start_startup", brain, cwd=brain.root / "kernels" / "alpha")
    subprocess.run([sys.executable, "-m", "nika_brain", "hook", "SessionStart"], input=json.dumps(start),
                   text=True, env=bound_env(brain, claim_id, "alpha"), capture_output=True, check=True)
    info = {"session_id": SID, "transcript_path": str(FIXTURES / "transcript.jsonl"),
            "model": {"id": "claude-sonnet-4-5", "display_name": "Sonnet 4.5"},
            "workspace": {"current_dir": str(brain.root / "kernels" / "alpha"), "project_dir": str(brain.root)},
            "context_window": {"context_window_size": 200000, "used_percentage": 41.6}}
    proc = statusline(json.dumps(info), clean_env())
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"nika · kernel alpha · claim {claim_id} · ctx 42%"
    # Early in a session Claude Code has no figure yet: the transcript gives it.
    info["context_window"] = None
    assert statusline(json.dumps(info), clean_env()).stdout.strip().endswith("ctx 23%")


def test_statusline_prefers_the_recorded_heartbeat(hb):
    brain, _ = hb
    sessions.heartbeat(brain, SID, used=120_000, window=200_000, pct=60.0)
    info = {"session_id": SID, "workspace": {"current_dir": str(brain.root)}}
    assert statusline(json.dumps(info), clean_env()).stdout.strip().endswith("ctx 60%")


@pytest.mark.parametrize("stdin", ["", "not json", "[]", '{"session_id": 5, "context_window": "x"}'])
def test_statusline_never_fails(tmp_path, stdin):
    proc = statusline(stdin, clean_env(), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.strip() == "nika (no brain)"


def test_assisted_mode_says_how_to_start_claude_under_the_hooks(tmp_path, git_env):
    from tests.kit.orch import nb, orch_brain, run_file
    wf = "name: plain\nbranch: theme/plain\nchain:\n  - step: 1\n    type: code\n    scope: src/\n"
    brain = orch_brain(tmp_path / "b", {"plain": wf})
    out = nb(brain, "workflow-launch", "plain", check=0)
    settings = brain.root / ".claude" / "settings.json"
    claim = run_file(brain, "plain")["claim"]
    assert f"\n  nika-brain claude start {claim}\n" in out.stdout   # its door, not a NIKA_CLAIM to rewrite
    assert "NIKA_CLAIM=" not in out.stdout
    data = read(settings)  # installed first: hooks, deny rules, sandbox
    assert ours(data, "PreToolUse") and data["sandbox"]["enabled"] is True


def test_claude_start_says_in_one_line_why_it_cannot_start_a_session(tmp_path, git_env):
    """`claude start` with nothing to start, an unknown or closed claim, or no `claude` on PATH: one
    line and a failing exit code, no traceback, no door left behind."""
    from tests.kit.orch import nb, orch_brain, run_file
    wf = "name: plain\nbranch: theme/plain\nchain:\n  - step: 1\n    type: code\n    scope: src/\n"
    brain = orch_brain(tmp_path / "b", {"plain": wf})
    bindir = tmp_path / "bin"   # a `claude` that must never run here
    bindir.mkdir()
    (bindir / "claude").write_text(f"#!/bin/sh\ntouch {tmp_path}/ran\n")
    (bindir / "claude").chmod(0o755)
    path = {"PATH": f"{bindir}:/usr/bin:/bin"}
    def refused(args: tuple, says: str) -> None:
        out = nb(brain, "claude", "start", *args, env=path)
        assert out.returncode != 0 and out.stderr.startswith("nika-brain: ") and says in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1, out.stderr   # one line, no traceback

    refused((), "no assisted run waits on a step")
    nb(brain, "workflow-launch", "plain", check=0)
    cid = run_file(brain, "plain")["claim"]
    refused(("nope",), "nope")
    no_claude = nb(brain, "claude", "start", cid, env={"PATH": "/usr/bin:/bin"})
    assert no_claude.returncode == 1 and "`claude` is not on PATH" in no_claude.stderr, no_claude.stderr
    nb(brain, "claim", "close", cid, "--status", "failed", "--summary", "x", check=0)
    closed = nb(brain, "claude", "start", cid, env=path)
    assert closed.returncode == 6 and f"claim {cid} is closed" in closed.stderr, closed.stderr
    assert not (tmp_path / "ran").exists() and not list(brain.guarded_dir.rglob("door.sock"))


def test_install_says_what_the_sandbox_needs_when_it_is_missing(hb, monkeypatch, tmp_path):
    from tests.kit.orch import nb
    brain, _ = hb
    # A PATH without bwrap and socat: the machine of an operator who has not installed them.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("git",):
        (bindir / tool).symlink_to(shutil.which(tool))
    env = {"PATH": str(bindir)}
    out = nb(brain, "claude", "install", env=env, check=0)
    assert "apt-get install bubblewrap socat" in out.stderr
    refused = nb(brain, "claude", "install", "--sandbox", "required", env=env, check=1)
    assert "apt-get install bubblewrap socat" in refused.stderr and "Traceback" not in refused.stderr
    nb(brain, "claude", "install", "--sandbox", "off", check=0)
    assert "sandbox" not in read(brain.root / ".claude" / "settings.json")  # ours, taken out
