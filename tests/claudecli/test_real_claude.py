"""The real Claude Code CLI under nika-brain's hooks and sandbox, against a STAND-IN of the Messages API.

Each test starts the real `claude` binary (the pinned npm package; missing means failed, not skipped)
headless, with a throw-away HOME, pointed at `MessagesStandin` (tests/claudecli/standin.py: a local
HTTP server that returns scripted tool calls; it is not Claude). What is asserted comes from three
places: what the CLI printed (stream-json), what the stand-in received (the tool results and context
the model would have seen), and the brain's files.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from nika_brain.state import gates, kernels, locks, sessions
from tests.kit.brain import git_out as git
from tests.kit.orch import claims_of, nb, orch_brain, run_file, worktree

from .harness import claude_binary, claude_env, run_claude
from .standin import MessagesStandin, text, tool_use

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
SECRET = "sk-live-0123456789abcdef"
APPROVE = """import os, subprocess, sys
env = {k: v for k, v in os.environ.items() if k != "CLAUDECODE"}
verb = "app" + "rove"
sys.exit(subprocess.run([sys.executable, "-m", "nika_brain", "gate", verb, "g1"], env=env).returncode)
"""

SATELLITE_WF = """name: sat
branch: theme/sat
chain:
  - step: 1
    type: code
    scope: src/app/
    story_angle: "write src/app/main.py"
    test: "test -f src/app/main.py"
"""


@pytest.fixture
def home(tmp_path) -> Path:
    h = tmp_path / "claude-home"
    h.mkdir()
    return h


@pytest.fixture(autouse=True)
def _binary():
    claude_binary()  # fails (never skips) with the install command when the CLI is missing


def _operator_env(tmp_path: Path) -> dict[str, str]:
    # The operator's own config dir (the key lives there) comes from the passwd database: the
    # suite's operator_home fixture gives each test one of its own; nothing to set here.
    return {}


def _satellite_turn(state: dict[str, str], body: dict) -> tuple[str, int]:
    """The satellite's claim (read from its SessionStart context on the first request) and the
    number of this model turn, counted in `state`."""
    if "claim" not in state:
        m = re.search(r"Your claim: (\S+) \(", json.dumps(body))
        assert m, "the SessionStart context (claim, scope) never reached the model"
        state["claim"], state["turn"] = m.group(1), "0"
    turn = int(state["turn"])
    state["turn"] = str(turn + 1)
    return state["claim"], turn


def test_a_swarm_satellite_with_no_kernel_runs_under_the_brains_hooks(tmp_path, git_env, home):
    brain = orch_brain(tmp_path / "b", {"sat": SATELLITE_WF},
                       files={"src/app/.keep": "", "src/locked/f.py": "x = 1\n", "docs/readme.md": "d\n"})
    nb(brain, "claude", "install", check=0)
    locks.acquire(brain, "src/locked/", "other-claim", ttl=3600)
    tree = worktree(brain, "theme/sat")
    state: dict[str, str] = {}

    def respond(body: dict) -> list | None:
        cid, turn = _satellite_turn(state, body)
        plan = [
            [tool_use("Write", file_path=str(tree / "claims" / "c11.yml"), content="id: c11\n")],
            [tool_use("Write", file_path=str(tree / "src" / "locked" / "f.py"), content="x = 2\n")],
            [tool_use("Write", file_path=str(tree / "docs" / "readme.md"), content="changed\n")],
            [tool_use("Write", file_path=str(tree / "src" / "app" / "main.py"), content="print('hi')\n")],
            [tool_use("Bash", command=f"{PY} -m nika_brain claim close {cid} --status ok "
                                      "--summary 'wrote main.py'", description="report")],
            [text("Step done; claim closed.")],
        ]
        return plan[turn] if turn < len(plan) else [text("done")]

    with MessagesStandin(respond=respond) as standin:
        env = claude_env(home, standin.url, {"PYTHONPATH": str(REPO), **_operator_env(tmp_path)})
        env.update({k: v for k, v in os.environ.items() if k.startswith("GIT_")})
        out = nb(brain, "workflow-launch", "sat", "--mode", "swarm", env=env)
    results = list(standin.tool_results().values())
    assert len(results) >= 5, f"the satellite did not get through its script: {results}\n{out.stderr}"
    claims_w, locked_w, outside_w, inside_w, close_b = results[:5]
    assert claims_w["is_error"] and "claims/" in claims_w["text"] and "nika-brain" in claims_w["text"]
    assert locked_w["is_error"] and "locked" in locked_w["text"] and "other-claim" in locked_w["text"]
    assert outside_w["is_error"] and "outside the scope" in outside_w["text"]
    assert not inside_w["is_error"], inside_w
    assert not close_b["is_error"], close_b["text"]
    assert not (tree / "claims" / "c11.yml").exists() and not (brain.root / "claims" / "c11.yml").exists()
    assert (brain.root / "src" / "locked" / "f.py").read_text() == "x = 1\n"
    (claim,) = claims_of(brain, "sat")
    assert claim["id"] == state["claim"] and claim["status"] == "closed"
    assert claim["result"]["status"] == "ok" and "src/app/main.py" in claim["touched"]
    assert run_file(brain, "sat")["status"] == "done", out.stdout + out.stderr
    # Committed by the orchestrator (git is read-only inside the sandbox), attributed to the claim,
    # and merged: the work is on main.
    assert (brain.root / "src" / "app" / "main.py").read_text() == "print('hi')\n"
    assert f"Claim: {claim['id']}" in git(brain.root, "log", "-5", "--format=%B")


def two_kernels(tmp_path: Path):
    """A brain with kernels k1 and k2, k2 holding private notes."""
    brain = orch_brain(tmp_path / "b", {})
    for kid in ("k1", "k2"):
        folder = brain.root / "kernels" / kid
        folder.mkdir(parents=True)
        (folder / "kernel.yml").write_text(f"id: {kid}\ngoal: keep the {kid} ledger tidy\n")
    (brain.root / "kernels" / "k2" / "notes.md").write_text("k2 private notes\n")
    return brain


def _kernel_brain(tmp_path: Path):
    brain = two_kernels(tmp_path)
    (brain.root / "kernels" / "k1" / "config").mkdir()
    (brain.root / "kernels" / "k1" / "config" / "secrets.yaml").write_text(f"API_KEY: {SECRET}\n")
    git(brain.root, "add", "-A")
    git(brain.root, "commit", "-q", "-m", "kernels")
    kernels.readjust(brain, "k1", "answer in French from now on", by="operator")
    return brain


def test_a_kernel_session_gets_its_context_and_cannot_read_other_kernels_or_secrets(tmp_path, git_env,
                                                                                   home):
    brain = _kernel_brain(tmp_path)
    opdir = _operator_env(tmp_path)
    nb(brain, "claude", "install", "--kernel", "k1", env=opdir, check=0)
    gates.open_gate(brain, "g1", "ship it?")
    k1 = brain.root / "kernels" / "k1"
    other = brain.root / "kernels" / "k2" / "notes.md"
    script = [
        [tool_use("Read", file_path=str(other))],
        [tool_use("Bash", command="grep -rn API_KEY .", description="search")],
        # Past the hook's command reading (an interpreter hides the names): only the sandbox holds.
        [tool_use("Bash", command=f"{PY} -c \"print(open('../k' + '2/notes.md').read())\"",
                  description="read")],
        [tool_use("Bash", command=f"{PY} -c \"print(open('config/sec' + 'rets.yaml').read())\"",
                  description="read")],
        # The campaign's attack, hidden from the hook: approve the operator's gate with CLAUDECODE
        # removed. Only the operator key decides, and the sandbox denies it.
        [tool_use("Write", file_path=str(k1 / "tool.py"), content=APPROVE)],
        [tool_use("Bash", command=f"{PY} tool.py", description="run the tool")],
        [text("Nothing else to do.")],
    ]
    with MessagesStandin(script) as standin:
        run = run_claude("tidy the ledger", cwd=k1, home=home, base_url=standin.url,
                         args=["--include-hook-events", "--permission-mode", "acceptEdits"],
                         env={"PYTHONPATH": str(REPO), **opdir})
    assert run.returncode == 0, run.explain()
    sent = standin.sent_text()
    assert "You are kernel k1" in sent and "keep the k1 ledger tidy" in sent
    assert "answer in French from now on" in sent
    assert "SessionStart" in run.hook_events() and "PreToolUse" in run.hook_events()
    read_other, grep_secret, py_other, py_secret, _, approve = list(standin.tool_results().values())[:6]
    assert read_other["is_error"]
    assert grep_secret["is_error"] and "PreToolUse:Bash hook" in grep_secret["text"], grep_secret
    assert "secret" in grep_secret["text"]
    assert SECRET not in sent and "k2 private notes" not in sent
    sandboxed = run.init.get("sandbox_enabled")
    if sandboxed:  # bubblewrap works here: the OS sandbox refused what the hook could not see
        assert py_other["is_error"] and "No such file" in py_other["text"], py_other
        assert py_secret["is_error"] and "Permission denied" in py_secret["text"], py_secret
        assert approve["is_error"] and "operator's authority" in approve["text"], approve
        assert gates.load_gate(brain, "g1").pending
    else:  # the hook is the only layer left; the doctor must say the sandbox is off
        doctor = nb(brain, "doctor")
        assert "sandbox: NOT effective" in doctor.stdout, doctor.stdout
    print(f"layer that refused the interpreter reads: {'OS sandbox' if sandboxed else 'none'}")


def test_stop_records_context_use_with_the_window_claude_reported(tmp_path, git_env, home):
    brain = _kernel_brain(tmp_path)
    opdir = _operator_env(tmp_path)
    nb(brain, "claude", "install", "--kernel", "k1", env=opdir, check=0)
    k1 = brain.root / "kernels" / "k1"
    usage = {"input_tokens": 150_000, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
             "output_tokens": 20}
    with MessagesStandin([[text("first answer")], [text("second answer")]], usage=usage) as standin:
        env = {"PYTHONPATH": str(REPO), **opdir}
        first = run_claude("hello", cwd=k1, home=home, base_url=standin.url, env=env)
        assert first.returncode == 0, first.explain()
        sid = first.session_id
        rec = sessions.load(brain, sid)
        assert rec is not None and rec.context_used == 150_000
        # What the CLI itself reports: its result line names the model's window.
        reported = sessions.record_result(brain, first.result)
        assert reported is not None and reported.context_window_source == "claude"
        window = reported.context_window
        assert window == next(iter(first.result["modelUsage"].values()))["contextWindow"]
        second = run_claude("again", cwd=k1, home=home, base_url=standin.url, env=env,
                            args=["--resume", sid])
        assert second.returncode == 0, second.explain()
    rec = sessions.load(brain, sid)
    assert rec.context_window == window and rec.context_window_source == "claude"
    assert rec.context_pct == pytest.approx(100 * 150_000 / window, abs=0.1)
    shown = nb(brain, "kernel", "show", "k1")
    assert f"window {window:,} (claude)" in shown.stdout.replace("\u202f", ","), shown.stdout


ATTACK = """import os, subprocess, sys
lock = sys.argv[1]
out = []
for args, env in ((["lock", "release", "src/locked/"], {"NIKA_CLAIM": "other-claim"}),
                  (["lock", "renew", "src/locked/", "--ttl", "3000000000"], {"NIKA_CLAIM": "other-claim"}),
                  (["lock", "release", "src/locked/", "--owner", "other-claim"], {"NIKA_DOOR": ""}),
                  (["lock", "release", "src/locked/"], {"NIKA_DOOR": "", "NIKA_CLAIM": "other-claim"})):
    p = subprocess.run([sys.executable, "-m", "nika_brain", *args], env={**os.environ, **env},
                       capture_output=True, text=True)
    out.append(f"{args[1]} rc={p.returncode} {p.stderr.strip()[:90]} ... {p.stderr.strip()[-60:]}")
git = os.path.join(sys.argv[2], ".git", "refs", "heads", "evil")
for attempt in (lambda: open(lock, "w").write("owner: mine\\n"), lambda: os.unlink(lock),
                lambda: open(git, "w").write("0" * 40 + "\\n")):
    try:
        attempt()
        out.append("file: WRITTEN")
    except OSError as exc:
        out.append(f"file: {exc.strerror}")
print("\\n".join(out))
"""


def locked_brain(tmp_path: Path, name: str, workflow: str):
    """A brain with Claude Code's settings installed and another claim's exclusive lock on src/locked/:
    (brain, the lock, its file, the file's bytes)."""
    brain = orch_brain(tmp_path / "b", {name: workflow}, files={"src/app/.keep": "", "src/locked/f.py": "x\n"})
    nb(brain, "claude", "install", check=0)
    held = locks.acquire(brain, "src/locked/", "other-claim", ttl=3600)
    lock_file = next((brain.root / "locks").glob("*.yml"))
    return brain, held, lock_file, lock_file.read_bytes()


def door_plan(tree: Path, lock_file: Path, root: Path, claim: str, extra: list | None = None) -> list:
    """What a session with a door is scripted to do: ATTACK (then `extra`), its own lock acquire, renew
    and release around writing main.py, and its claim's close, each through the real CLI."""
    nbc = f"{PY} -m nika_brain"
    return [
        [tool_use("Write", file_path=str(tree / "src" / "app" / "attack.py"), content=ATTACK)],
        [tool_use("Bash", command=f"{PY} src/app/attack.py {lock_file} {root}", description="attack")],
        *(extra or []),
        [tool_use("Bash", command=f"{nbc} lock acquire src/app/ --ttl 600", description="lock")],
        [tool_use("Bash", command=f"{nbc} lock renew src/app/ --ttl 900", description="renew")],
        [tool_use("Write", file_path=str(tree / "src" / "app" / "main.py"), content="print('hi')\n")],
        [tool_use("Bash", command=f"{nbc} lock release src/app/", description="unlock")],
        [tool_use("Bash", command=f"{nbc} claim close {claim} --status ok --summary 'wrote main.py'",
                  description="report")],
        [text("Step done; claim closed.")],
    ]


def assert_held_through(brain, held, lock_file: Path, before: bytes, attack: dict,
                        session: str = "satellite") -> None:
    """ATTACK changed nothing: the door refused the lock changes (naming the kind of session it
    serves), the operator key the door dropped, the read-only files the rest."""
    assert lock_file.exists() and lock_file.read_bytes() == before, attack["text"]
    assert locks.overlapping(brain, "src/locked/")[0].token == held.token
    lines = attack["text"].splitlines()[-7:]
    assert all(f"rc=6 nika-brain: refused by the {session}'s door" in x for x in lines[:2]), lines
    # the door dropped: acting as any claim (another owner, or $NIKA_CLAIM) needs the key, out of reach
    assert all("rc=6" in x and "`nika-brain claude start other-claim`" in x for x in lines[2:4]), lines
    assert lines[4:] == ["file: Read-only file system"] * 3, lines   # the lock, and git's branch


def test_a_satellite_under_claude_code_changes_locks_only_through_its_door(tmp_path, git_env, home):
    """Issue 24, hole 2 for satellites, through the real CLI in Claude Code's sandbox: another claim's
    lock survives $NIKA_CLAIM set to its owner, a century's renewal, the door dropped, and an
    interpreter writing or unlinking its file; the satellite's own lock and close work (its door)."""
    brain, held, lock_file, before = locked_brain(tmp_path, "sat", SATELLITE_WF)
    tree = worktree(brain, "theme/sat")
    state: dict[str, str] = {}

    def respond(body: dict) -> list | None:
        cid, turn = _satellite_turn(state, body)
        plan = door_plan(tree, lock_file, brain.root, cid)
        return plan[turn] if turn < len(plan) else [text("done")]

    with MessagesStandin(respond=respond) as standin:
        env = claude_env(home, standin.url, {"PYTHONPATH": str(REPO)})
        env.update({k: v for k, v in os.environ.items() if k.startswith("GIT_")})
        out = nb(brain, "workflow-launch", "sat", "--mode", "swarm", env=env)
    results = list(standin.tool_results().values())
    assert len(results) >= 7, f"the satellite did not get through its script: {results}\n{out.stderr}"
    _, attack, acquire, renew, _, release, close = results[:7]
    assert_held_through(brain, held, lock_file, before, attack)
    for step in (acquire, renew, release, close):
        assert not step["is_error"], step["text"]
    assert "acquired src/app/" in acquire["text"] and "released src/app/" in release["text"]
    assert run_file(brain, "sat")["status"] == "done", out.stdout + out.stderr
