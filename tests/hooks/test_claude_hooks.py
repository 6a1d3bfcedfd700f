"""`nika-brain hook <Event>` run as Claude Code runs it: a real process, recorded stdin fixtures,
a real brain (git repository) in tmp_path. Claude itself is the only thing not here; the fixtures
stand in for what it writes on the hook's stdin."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nika_brain.brain import Brain
from nika_brain.state import claims, kernels, locks, sessions
from tests.federation.test_claim_door import _door, door_of_another_session  # real claim doors
from tests.kit.brain import git_out as git
from tests.kit.claude import FIXTURES, SID, bound_env, clean_env, fixture, hook

# ---- every fixture, both decisions ------------------------------------------------------------

DECISIONS = [
    # fixture, kernel bound, expected: None = allowed silently, else a substring of the deny reason
    ("pre_tool_use_edit_in_scope", "alpha", None),
    ("pre_tool_use_notebook_edit_in_scope", "alpha", None),
    ("pre_tool_use_edit_locked", "alpha", "locked"),
    ("pre_tool_use_write_out_of_scope", "alpha", "outside the scope of claim"),
    ("pre_tool_use_multiedit_protected_zone", "alpha", "zone 'kernel'"),
    ("pre_tool_use_write_gate_file", "alpha", "under gates/"),
    ("pre_tool_use_bash_gate_approve", "alpha", "human gate"),
    ("pre_tool_use_bash_write_locks", "alpha", "under locks/"),
    ("pre_tool_use_bash_tests", "alpha", None),
    ("pre_tool_use_read_other_kernel", "alpha", "belongs to kernel gamma"),
    ("pre_tool_use_glob_other_kernel", "alpha", "belongs to kernel gamma"),
    ("pre_tool_use_read_secret", "alpha", "secret"),
    ("pre_tool_use_read_in_brain", "alpha", None),
    ("pre_tool_use_task", "alpha", None),
]


@pytest.mark.parametrize("name,kernel,expected", DECISIONS, ids=[d[0] for d in DECISIONS])
def test_pre_tool_use_fixture_decisions(hb, name, kernel, expected):
    brain, claim_id = hb
    ans = hook("PreToolUse", fixture(name, brain), env=bound_env(brain, claim_id, kernel))
    assert ans.code == 0, ans.stderr
    if expected is None:
        assert ans.stdout == "" and ans.stderr == ""  # allowed without a word
    else:
        assert ans.denied, ans.stdout
        assert expected in ans.reason
        assert ans.specific["hookEventName"] == "PreToolUse"
        assert "permissionDecision" not in ans.json  # top-level keys would be ignored by Claude


def test_deny_reason_names_the_lock_holder(hb):
    brain, claim_id = hb
    ans = hook("PreToolUse", fixture("pre_tool_use_edit_locked", brain), env=bound_env(brain, claim_id))
    assert "sess-other-claim" in ans.reason and "BLOCKED_ON" in ans.reason


# ---- locks ------------------------------------------------------------------------------------

def edit(brain: Brain, rel: str, tool: str = "Edit", cwd: Path | None = None, sid: str = SID) -> dict:
    key = "notebook_path" if tool == "NotebookEdit" else "file_path"
    return {"session_id": sid, "cwd": str(cwd or brain.root), "hook_event_name": "PreToolUse",
            "tool_name": tool, "tool_input": {key: str(brain.root / rel), "old_string": "a",
                                              "new_string": "b"}}


@pytest.mark.parametrize("tool", ["Edit", "Write", "MultiEdit", "NotebookEdit"])
def test_every_write_tool_is_checked_against_locks(hb, tool):
    brain, claim_id = hb
    assert hook("PreToolUse", edit(brain, "src/auth/locked.py", tool), env=bound_env(brain, claim_id)).denied


def test_own_lock_allows_and_shared_or_expired_locks_of_others_do_not_block(hb, request):
    brain, claim_id = hb
    locks.acquire(brain, "src/auth/mine.py", claim_id, pid=None, ttl=3600)
    # Without the claim's door (`NIKA_CLAIM=<claim> claude` started by hand) its lock is anyone's:
    # $NIKA_CLAIM narrows, never widens.
    ans = hook("PreToolUse", edit(brain, "src/auth/mine.py"), env=bound_env(brain, claim_id))
    assert ans.denied and f"`nika-brain claude start {claim_id}`" in ans.reason, ans.stdout
    # A door of another claim says who the session is: not this claim.
    other, other_sock = _door(brain, "sess-other-claim", os.getpid())
    try:
        ans = hook("PreToolUse", edit(brain, "src/auth/mine.py"),
                   env={**bound_env(brain, claim_id), "NIKA_DOOR": str(other_sock)})
        assert ans.denied, ans.stdout
    finally:
        other.stdin.write("end\n")
        other.stdin.close()
        other.wait(timeout=60)
    # The session nika-brain started for the claim (its door, serving this process's tree): its own.
    proc, sock = _door(brain, claim_id, os.getpid())
    env = {**bound_env(brain, claim_id), "NIKA_DOOR": str(sock)}
    request.addfinalizer(lambda: (proc.stdin.write("end\n"), proc.stdin.close(), proc.wait(timeout=60)))
    locks.acquire(brain, "src/auth/shared.py", "sess-reader", mode="shared", pid=None, ttl=3600)
    from datetime import datetime, timedelta, timezone
    old = datetime.now(timezone.utc) - timedelta(hours=3)
    locks.acquire(brain, "src/auth/stale.py", "sess-gone", pid=None, ttl=60, now=old)
    for rel in ("src/auth/mine.py", "src/auth/shared.py", "src/auth/stale.py"):
        ans = hook("PreToolUse", edit(brain, rel), env=env)
        assert ans.allowed, (rel, ans.code, ans.stdout, ans.stderr)
    # A lock on a folder covers every file below it.
    locks.acquire(brain, "tests/auth/", "sess-other-claim", pid=None, ttl=3600)
    assert hook("PreToolUse", edit(brain, "tests/auth/test_x.py"), env=env).denied


def test_the_claims_own_door_named_from_another_process_tree_gives_none_of_its_locks(hb):
    """An agent in another session points `$NIKA_DOOR` at the real door of the claim it names: the door
    answers only the session nika-brain started for the claim (here another process), so this session
    is not the claim, and the claim's lock stops its write as anyone's."""
    brain, claim_id = hb
    locks.acquire(brain, "src/auth/mine.py", claim_id, pid=None, ttl=3600)
    with door_of_another_session(brain, claim_id) as sock:
        ans = hook("PreToolUse", edit(brain, "src/auth/mine.py"),
                   env={**bound_env(brain, claim_id), "NIKA_DOOR": str(sock)})
        assert ans.denied and f"`nika-brain claude start {claim_id}`" in ans.reason, ans.stdout
        refused = brain.root.joinpath(".nika", "doors", "refusals.jsonl").read_text().splitlines()
        assert [json.loads(x)["op"] for x in refused] == ["ping"]   # the door was asked, and said no


def test_unreadable_lock_file_fails_closed(hb):
    brain, claim_id = hb
    (brain.locks_dir / "broken.yml").write_text("scope: [unclosed\n")
    ans = hook("PreToolUse", edit(brain, "src/auth/login.py"), env=bound_env(brain, claim_id))
    assert ans.denied
    assert "broken.yml" in ans.reason and "could not check" in ans.reason
    # Reads are not a safety matter: they stay allowed.
    read = {**edit(brain, "src/auth/login.py"), "tool_name": "Read"}
    assert hook("PreToolUse", read, env=bound_env(brain, claim_id)).allowed


def test_lock_applies_to_a_session_without_any_binding(hb):
    brain, _ = hb
    # An operator's own session in the brain: no claim, no kernel; locks still bind everyone.
    ans = hook("PreToolUse", edit(brain, "src/auth/locked.py"), env=clean_env(), cwd=brain.root)
    assert ans.denied and "locked" in ans.reason
    assert hook("PreToolUse", edit(brain, "src/auth/login.py"), env=clean_env(), cwd=brain.root).allowed


# ---- claim scope and binding ------------------------------------------------------------------

def test_scope_is_enforced_only_while_the_claim_is_open(hb):
    brain, claim_id = hb
    env = bound_env(brain, claim_id)
    assert hook("PreToolUse", edit(brain, "docs/readme.md"), env=env).denied
    assert hook("PreToolUse", edit(brain, "tests/auth/test_login.py"), env=env).allowed
    claims.close_claim(brain, claim_id, "ok", "done")
    assert hook("PreToolUse", edit(brain, "docs/readme.md"), env=env).allowed


def test_binding_made_at_session_start_is_used_later_without_environment(hb):
    brain, claim_id = hb
    start = hook("SessionStart", fixture("session_start_startup", brain, cwd=brain.root / "kernels" / "alpha"),
                 env=bound_env(brain, claim_id, "alpha"))
    assert start.code == 0, start.stderr
    rec = sessions.load(brain, SID)
    assert rec.claim == claim_id and rec.kernel == "alpha"
    assert claims.load_claim(brain, claim_id).session == SID
    # Later events carry only the session id; the cwd finds the brain.
    later = clean_env()
    assert hook("PreToolUse", edit(brain, "docs/readme.md"), env=later).denied
    assert hook("PreToolUse", edit(brain, "src/auth/login.py"), env=later).allowed
    other_session = edit(brain, "docs/readme.md", sid="another-session")
    assert hook("PreToolUse", other_session, env=later).allowed


def test_unreadable_claim_fails_closed_for_writes(hb):
    brain, claim_id = hb
    claims.claim_path(brain, claim_id).write_text("id: [broken\n")
    ans = hook("PreToolUse", edit(brain, "src/auth/login.py"), env=bound_env(brain, claim_id))
    assert ans.denied and claim_id in ans.reason


def test_linked_worktree_paths_are_judged_as_brain_paths(hb):
    brain, claim_id = hb
    git(brain.root, "add", "-A")
    git(brain.root, "commit", "-q", "-m", "setup")
    wt = brain.root / ".nika" / "worktrees" / "auth"
    git(brain.root, "worktree", "add", "-q", "-b", "theme/auth", str(wt))
    env = bound_env(brain, claim_id, "alpha")
    ok = edit(brain, ".nika/worktrees/auth/src/auth/login.py", cwd=wt)
    assert hook("PreToolUse", ok, env=env).allowed
    out = hook("PreToolUse", edit(brain, ".nika/worktrees/auth/docs/x.md", cwd=wt), env=env)
    assert out.denied and "docs/x.md is outside the scope" in out.reason
    gate = hook("PreToolUse", edit(brain, ".nika/worktrees/auth/gates/g.yml", cwd=wt), env=env)
    assert gate.denied and "gates/g.yml is under gates/" in gate.reason


# ---- zones ------------------------------------------------------------------------------------

ZONE_CASES = [
    # kernel, path, denied?
    ("alpha", "brain/KERNEL.md", True),          # protected, card satellite-boot lacks 'kernel'
    ("alpha", "agents/new.md", True),
    ("alpha", "kernels/alpha/kernel.yml", True),  # its own goal is for a human to change
    ("alpha", "kernels/alpha/memory/notes.md", False),  # its own notebook
    ("gamma", "brain/KERNEL.md", False),          # card kernel-writer grants 'kernel'
    ("gamma", "claims/x.yml", True),              # tool-only, whatever the card
    ("alpha", "BRAIN-NOTES.md", False),           # open zone '.'
    ("gamma", ".git/hooks/pre-commit", True),     # git's own folder: switching a guard off
    ("gamma", ".claude/settings.json", True),     # the hooks guarding the session itself
    ("gamma", "kernels/gamma/.claude/settings.local.json", True),
    ("gamma", ".claude/commands/review.md", False),
]


@pytest.mark.parametrize("kernel,rel,denied", ZONE_CASES)
def test_zone_matrix(hb, kernel, rel, denied):
    brain, _ = hb
    ans = hook("PreToolUse", edit(brain, rel), env=bound_env(brain, None, kernel))
    assert ans.denied is denied, ans.reason


def test_missing_card_fails_closed_for_zoned_writes(hb):
    brain, _ = hb
    (brain.root / "kernels" / "alpha" / "kernel.yml").write_text("id: alpha\ngoal: g\ncard: nobody\n")
    ans = hook("PreToolUse", edit(brain, "src/x.py"), env=bound_env(brain, None, "alpha"))
    assert ans.denied and "nobody" in ans.reason


def test_bare_claim_session_uses_the_default_agent_card(hb):
    brain, claim_id = hb
    # No kernel: the claim's satellite follows satellite-boot (config default_agent).
    ans = hook("PreToolUse", edit(brain, "brain/KERNEL.md"), env=bound_env(brain, claim_id))
    assert ans.denied  # outside the scope, and in a zone the card does not grant


# ---- other kernels' folders, secrets, gates ---------------------------------------------------

KERNEL_CASES = [
    ("Read", "kernels/gamma/memory/notes.md", True),
    ("Read", "kernels/alpha/memory/notes.md", False),
    ("Read", "kernels/alpha/memory/notes.md", False),
    ("Write", "kernels/gamma/memory/notes.md", True),
    ("Grep", "kernels/gamma", True),
    ("LS", "kernels/gamma/", True),
    ("Read", "kernels/beta/secrets/token.txt", True),
    ("Read", "src/.env", True),
    ("Read", "deploy/server.pem", True),
    ("Read", ".env.example", False),
]


@pytest.mark.parametrize("tool,rel,denied", KERNEL_CASES)
def test_other_kernels_and_secrets_matrix(hb, tool, rel, denied):
    brain, _ = hb
    key = {"Grep": "path", "LS": "path"}.get(tool, "file_path")
    payload = {"session_id": SID, "cwd": str(brain.root / "kernels" / "alpha"), "tool_name": tool,
               "hook_event_name": "PreToolUse", "tool_input": {key: str(brain.root / rel), "pattern": "x"}}
    ans = hook("PreToolUse", payload, env=bound_env(brain, None, "alpha"))
    assert ans.denied is denied, ans.reason


def test_kernel_is_inferred_from_the_session_folder(hb):
    brain, _ = hb
    payload = fixture("pre_tool_use_read_other_kernel", brain, cwd=brain.root / "kernels" / "alpha")
    assert hook("PreToolUse", payload, env=clean_env()).denied
    # The same read from the brain root by an unbound operator session is allowed.
    payload = fixture("pre_tool_use_read_other_kernel", brain, cwd=brain.root)
    assert hook("PreToolUse", payload, env=clean_env()).allowed


def test_successor_may_read_but_not_write_its_predecessor(hb):
    brain, _ = hb
    cwd = brain.root / "kernels" / "beta"
    start = hook("SessionStart", fixture("session_start_startup", brain, cwd=cwd), env=clean_env())
    assert "successor of alpha" in start.context
    read = {"session_id": SID, "cwd": str(cwd), "tool_name": "Read", "hook_event_name": "PreToolUse",
            "tool_input": {"file_path": str(brain.root / "kernels/alpha/memory/handover.md")}}
    assert hook("PreToolUse", read, env=clean_env()).allowed
    write = hook("PreToolUse", edit(brain, "kernels/alpha/memory/handover.md", cwd=cwd), env=clean_env())
    assert write.denied and "belongs to kernel alpha" in write.reason
    gamma = {**read, "tool_input": {"file_path": str(brain.root / "kernels/gamma/memory/x.md")}}
    assert hook("PreToolUse", gamma, env=clean_env()).denied


BASH_CASES = [
    ("nika-brain gate approve g1", "human gate"),
    ("bash scripts/human-gate-ack.sh reject g1 'no'", "human gate"),
    ("python -m nika_brain gate approve g1", "human gate"),
    ("gh pr review 12 --approve", "human gate"),
    ("echo 'status: approved' >> gates/g1.yml", "under gates/"),
    ("rm -f locks/*.yml", "under locks/"),
    ("mv /tmp/x.yml claims/sess-1.yml", "under claims/"),
    ("sed -i 's/open/closed/' claims/sess-1.yml", "under claims/"),
    ("cd claims && touch x.yml", "under claims/"),
    ("bash -c 'cp /tmp/a gates/'", "under gates/"),
    ("tee locks/a.yml < /dev/null", "under locks/"),
    ("rm .git/hooks/pre-commit", "git's own folder"),
    ("echo '{}' > .claude/settings.json", "guard this session"),
    ("cat kernels/gamma/memory/notes.md", "belongs to kernel gamma"),
    ("cat .env", "secret"),
    ("nika-brain gate list", None),
    ("nika-brain lock acquire src/auth/ --owner x", None),
    ("cat gates/g1.yml && ls claims/ locks/", None),
    ("git commit -m 'mention gates/ and .env in text'", None),
    ("python -m pytest -q tests/auth 2>&1 | tail -5", None),
    ("ls kernels/", None),
]


@pytest.mark.parametrize("command,expected", BASH_CASES, ids=[c for c, _ in BASH_CASES])
def test_bash_matrix(hb, command, expected):
    brain, claim_id = hb
    payload = {"session_id": SID, "cwd": str(brain.root), "tool_name": "Bash", "hook_event_name": "PreToolUse",
               "tool_input": {"command": command, "description": "x"}}
    ans = hook("PreToolUse", payload, env=bound_env(brain, claim_id, "alpha"))
    if expected is None:
        assert ans.allowed, (ans.code, ans.stdout, ans.stderr)
    else:
        assert ans.denied and expected in ans.reason


# ---- SessionStart, UserPromptSubmit: context --------------------------------------------------

def test_session_start_injects_goal_claim_brief_directives_once(hb):
    brain, claim_id = hb
    kernels.readjust(brain, "alpha", "Prefer small commits", by="operator")
    (brain.state_dir / "briefs").mkdir(parents=True)
    (brain.state_dir / "briefs" / f"{claim_id}.md").write_text("# Brief\nRaise TIMEOUT to 30 seconds.\n")
    env_file = brain.root.parent / "claude-env.sh"
    env = bound_env(brain, claim_id, "alpha")
    env["CLAUDE_ENV_FILE"] = str(env_file)
    ans = hook("SessionStart", fixture("session_start_startup", brain, cwd=brain.root / "kernels" / "alpha"), env=env)
    assert ans.code == 0 and ans.specific["hookEventName"] == "SessionStart"
    ctx = ans.context
    assert "You are kernel alpha. Goal: goal of alpha" in ctx
    assert f"Your claim: {claim_id}" in ctx and "src/auth/, tests/auth/" in ctx
    assert "Raise TIMEOUT to 30 seconds." in ctx
    assert "Prefer small commits" in ctx
    assert "successor" not in ctx
    exported = env_file.read_text()
    assert f"export NIKA_CLAIM={claim_id}" in exported and "export NIKA_KERNEL_ID=alpha" in exported
    # Seen once: a resume does not repeat it; a new directive arrives at the next prompt.
    again = hook("SessionStart", fixture("session_start_resume", brain, cwd=brain.root / "kernels" / "alpha"),
                 env=clean_env())
    assert "Prefer small commits" not in again.context and "goal of alpha" in again.context
    kernels.readjust(brain, "alpha", "Stop touching the CSS", by="operator")
    prompt = hook("UserPromptSubmit", fixture("user_prompt_submit", brain), env=clean_env(), cwd=brain.root)
    assert prompt.specific["hookEventName"] == "UserPromptSubmit"
    assert "Stop touching the CSS" in prompt.context and "Prefer small commits" not in prompt.context
    quiet = hook("UserPromptSubmit", fixture("user_prompt_submit", brain), env=clean_env())
    assert quiet.code == 0 and quiet.stdout == ""
    # After a compaction every directive is restated: the summary may have lost them.
    compact = hook("SessionStart", fixture("session_start_compact", brain), env=clean_env())
    assert "Prefer small commits" in compact.context and "Stop touching the CSS" in compact.context


def test_session_start_outside_any_brain_is_silent(tmp_path):
    payload = {"session_id": SID, "cwd": str(tmp_path), "hook_event_name": "SessionStart", "source": "startup"}
    ans = hook("SessionStart", payload, env=clean_env(), cwd=tmp_path)
    assert ans.code == 0 and ans.stdout == "" and ans.stderr == ""


def test_context_is_capped_for_claude(hb):
    brain, claim_id = hb
    (brain.state_dir / "briefs").mkdir(parents=True)
    (brain.state_dir / "briefs" / f"{claim_id}.md").write_text("x" * 50_000)
    for i in range(5):
        kernels.readjust(brain, "alpha", f"directive {i} " + "y" * 3000, by="op")
    ans = hook("SessionStart", fixture("session_start_startup", brain), env=bound_env(brain, claim_id, "alpha"))
    assert len(ans.context) <= 10_000
    assert "directive 0" in ans.context  # directives come before the (cut) brief


# ---- PostToolUse, Stop, PreCompact, SessionEnd: records --------------------------------------

def test_post_tool_use_records_touched_files_on_session_and_claim(hb):
    brain, claim_id = hb
    env = bound_env(brain, claim_id, "alpha")
    for name in ("post_tool_use_edit", "post_tool_use_write", "post_tool_use_edit"):
        ans = hook("PostToolUse", fixture(name, brain), env=env)
        assert ans.code == 0 and ans.stdout == "", ans.stderr
    assert sessions.load(brain, SID).touched == ("src/auth/login.py", "tests/auth/test_login.py")
    assert claims.load_claim(brain, claim_id).touched == ("src/auth/login.py", "tests/auth/test_login.py")
    # After the close the claim is final: later edits are the session's record only.
    claims.close_claim(brain, claim_id, "ok", "done")
    before = claims.claim_path(brain, claim_id).read_text()
    late = fixture("post_tool_use_edit", brain)
    late["tool_input"]["file_path"] = str(brain.root / "src/auth/late.py")
    assert hook("PostToolUse", late, env=env).code == 0
    assert claims.claim_path(brain, claim_id).read_text() == before
    assert "src/auth/late.py" in sessions.load(brain, SID).touched


def test_stop_and_pre_compact_record_context_use_with_a_heartbeat(hb):
    brain, _ = hb
    transcript = FIXTURES / "transcript.jsonl"
    ans = hook("Stop", fixture("stop", brain, transcript=transcript), env=clean_env(), cwd=brain.root)
    assert ans.code == 0 and ans.stdout == "", ans.stderr
    rec = sessions.load(brain, SID)
    assert (rec.context_used, rec.context_window, rec.context_pct) == (46204, 200_000, 23.1)
    assert rec.heartbeat_at
    ans = hook("pre-compact", fixture("pre_compact", brain, transcript=transcript), env=clean_env())
    assert ans.code == 0
    assert sessions.raw(brain, SID)["heartbeat_event"] == "PreCompact"


def test_stop_with_missing_transcript_still_beats(hb):
    brain, _ = hb
    ans = hook("Stop", fixture("stop", brain, transcript=brain.root / "gone.jsonl"), env=clean_env())
    assert ans.code == 0
    rec = sessions.load(brain, SID)
    assert rec.heartbeat_at and rec.context_pct is None


def test_a_session_started_by_hand_for_a_claim_is_told_it_acts_as_no_claim_and_keeps_its_bookkeeping(hb):
    """`NIKA_CLAIM=<claim> claude` without `claude start`: one line says it acts as no claim and names the
    command that starts it as one; its hooks still bind the session and record what it touched."""
    brain, claim_id = hb
    ans = hook("SessionStart", fixture("session_start_startup", brain), env=bound_env(brain, claim_id))
    told = [x for x in ans.context.splitlines() if "acts as no claim" in x]
    assert len(told) == 1 and f"`nika-brain claude start {claim_id}`" in told[0], ans.context
    assert claims.load_claim(brain, claim_id).session == SID   # the hooks' bookkeeping
    post = hook("PostToolUse", {**edit(brain, "src/auth/login.py"), "hook_event_name": "PostToolUse"},
                env=bound_env(brain, claim_id))
    assert post.code == 0, post.stderr
    assert "src/auth/login.py" in claims.load_claim(brain, claim_id).touched
    # the session nika-brain starts with the claim's door is not told so
    proc, sock = _door(brain, claim_id, os.getpid())
    try:
        ans = hook("SessionStart", fixture("session_start_startup", brain),
                   env={**bound_env(brain, claim_id), "NIKA_DOOR": str(sock)})
    finally:
        proc.stdin.write("end\n")
        proc.stdin.close()
        proc.wait(timeout=60)
    assert f"Your claim: {claim_id}" in ans.context and "acts as no claim" not in ans.context, ans.context


def test_session_end_records_the_end(hb):
    brain, _ = hb
    hook("SessionStart", fixture("session_start_startup", brain), env=clean_env())
    ans = hook("SessionEnd", fixture("session_end", brain), env=clean_env())
    assert ans.code == 0 and ans.stdout == ""
    rec = sessions.load(brain, SID)
    assert rec.end_reason == "prompt_input_exit" and rec.ended_at


def test_passive_event_is_accepted_silently(hb):
    brain, _ = hb
    ans = hook("Notification", fixture("notification", brain), env=clean_env())
    assert (ans.code, ans.stdout, ans.stderr) == (0, "", "")


# ---- bad input: never a traceback, never a blocked turn ---------------------------------------

@pytest.mark.parametrize("stdin", [b"", b"   \n", b'{"session_id": "x", "tool_na', b"not json",
                                   b"[1, 2]", b"\xff\xfe\x00garbage", b"null"])
def test_bad_stdin_fails_open_with_a_message(hb, stdin):
    brain, _ = hb
    ans = hook("PreToolUse", stdin, env=bound_env(brain))
    assert ans.code == 1  # a non-blocking error: Claude's turn goes on
    assert ans.stdout == ""
    assert ans.stderr.startswith("nika-brain hook: ")


def test_unknown_event_and_name_forms(hb):
    brain, claim_id = hb
    bad = hook("PreToolUseX", fixture("pre_tool_use_edit_locked", brain), env=bound_env(brain, claim_id))
    assert bad.code == 1 and bad.stdout == "" and "unknown event" in bad.stderr
    for name in ("PreToolUse", "pre-tool-use", "pre_tool_use", "pretooluse"):
        assert hook(name, fixture("pre_tool_use_edit_locked", brain), env=bound_env(brain, claim_id)).denied


@pytest.mark.parametrize("payload", [
    {"hook_event_name": "PreToolUse"},
    {"hook_event_name": "PreToolUse", "tool_name": "Edit"},
    {"hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_input": "not an object"},
    {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": 42}},
    {"hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_input": {}},
    {"hook_event_name": "PreToolUse", "session_id": "../../etc/passwd", "tool_name": "Read",
     "tool_input": {"file_path": "/tmp/x"}},
])
def test_missing_fields_allow_without_crash(hb, payload):
    brain, _ = hb
    ans = hook("PreToolUse", payload, env=bound_env(brain))
    assert ans.code == 0 and ans.stdout == "", ans.stderr


def test_path_like_session_id_never_reaches_the_file_system(hb):
    brain, _ = hb
    payload = {"hook_event_name": "Stop", "session_id": "../../escape", "cwd": str(brain.root)}
    ans = hook("Stop", payload, env=clean_env())
    assert ans.code == 0
    assert not (brain.root / "escape.json").exists() and not (brain.state_dir / "escape.json").exists()


def test_announced_brain_that_is_broken_fails_closed_for_writes_only(tmp_path, hb):
    brain, _ = hb
    env = clean_env(NIKA_BRAIN_DIR=str(tmp_path / "nowhere"))
    ans = hook("PreToolUse", edit(brain, "src/auth/login.py"), env=env)
    assert ans.denied and "NIKA_BRAIN_DIR" in ans.reason
    bash = {**edit(brain, "x"), "tool_name": "Bash", "tool_input": {"command": "ls"}}
    assert hook("PreToolUse", bash, env=env).denied
    read = {**edit(brain, "src/auth/login.py"), "tool_name": "Read"}
    ans = hook("PreToolUse", read, env=env)
    assert not ans.denied and ans.code == 1 and "nowhere" in ans.stderr
    # Bookkeeping events report and go on.
    stop = hook("Stop", fixture("stop", brain), env=env)
    assert stop.code == 1 and stop.stdout == ""


def test_broken_config_in_the_brain_found_by_cwd_is_reported(hb):
    brain, claim_id = hb
    (brain.root / "nika-brain.yml").write_text("version: [\n")
    ans = hook("PreToolUse", edit(brain, "src/auth/login.py"), env=clean_env(), cwd=brain.root)
    assert ans.denied and "nika-brain.yml" in ans.reason


def test_a_handler_that_prints_cannot_spoil_the_json(hb):
    brain, claim_id = hb
    # A handler added through the dispatch table (as the federation layer does) chatters on stdout.
    code = ("import sys; from nika_brain.hooks import claude as h; "
            "h.register('pre-tool-use', lambda hook: print('chatter') or h.Reply(context='extra')); "
            "sys.exit(h.main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "PreToolUse"], text=True, capture_output=True,
                          input=json.dumps(fixture("pre_tool_use_edit_locked", brain)),
                          env=bound_env(brain, claim_id))
    assert proc.returncode == 0
    answer = json.loads(proc.stdout)  # the whole stdout is one JSON object
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert answer["hookSpecificOutput"]["additionalContext"] == "extra"
    assert "chatter" in proc.stderr


def test_handlers_named_by_module_path_load_only_when_their_event_fires(hb, tmp_path):
    brain, _ = hb
    ext = tmp_path / "ext"
    ext.mkdir()
    (ext / "fed_ext.py").write_text(
        "from nika_brain.hooks.claude import Reply\n"
        "def on_stop(hook):\n"
        "    return Reply(block='context at threshold: hand over first')\n")
    code = ("import sys; from nika_brain.hooks import claude as h; "
            "h.register('Stop', 'fed_ext:on_stop'); h.register('Stop', 'fed_ext:missing'); "
            "rc = h.main(sys.argv[1:]); print('loaded' if 'fed_ext' in sys.modules else 'not loaded', "
            "file=sys.stderr); sys.exit(rc)")
    env = clean_env(PYTHONPATH=str(ext))
    stop = subprocess.run([sys.executable, "-c", code, "Stop"], text=True, capture_output=True, env=env,
                          input=json.dumps(fixture("stop", brain)))
    assert stop.returncode == 0  # the broken second handler is reported, the first one still answers
    assert json.loads(stop.stdout) == {"decision": "block", "reason": "context at threshold: hand over first"}
    assert "fed_ext:missing failed" in stop.stderr and "loaded" in stop.stderr
    pre = subprocess.run([sys.executable, "-c", code, "PreToolUse"], text=True, capture_output=True,
                         env=env, input=json.dumps(fixture("pre_tool_use_read_in_brain", brain)))
    assert pre.returncode == 0 and pre.stdout == ""
    assert "not loaded" in pre.stderr
