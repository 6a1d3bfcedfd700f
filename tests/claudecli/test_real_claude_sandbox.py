"""The real Claude Code CLI inside the bubblewrap sandbox nika-brain starts for a kernel (issue 20), against
the Messages API STAND-IN (tests/claudecli/standin.py: scripted tool calls, not Claude).

Claude runs behind `kernels/sandbox.wrap` (the argv the kernel launcher uses): its hooks still fire, its
claim still closes through the CLI (claims/ is read-only in the sandbox: the CLI goes through the kernel's
door, and the door service closes it on the host), and its shell sees neither the other kernel nor the
operator's keys.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from nika_brain.federation.doors.service import DoorService
from nika_brain.federation.kernels import sandbox
from nika_brain.state import authority, kernels
from tests.kit.orch import nb

from .harness import claude_binary, run_claude
from .standin import MessagesStandin, text, tool_use
from .test_real_claude import two_kernels

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def test_real_claude_works_inside_its_kernel_sandbox_and_sees_nothing_else(tmp_path, git_env, monkeypatch):
    claude_binary()
    assert sandbox.unavailable() is None, sandbox.unavailable()
    brain = two_kernels(tmp_path)
    opdir = authority.operator_dir()   # the operator's own folder (this test's passwd home)
    # as spawn installs a sandboxed kernel's settings: Claude Code's own sandbox off inside ours
    nb(brain, "claude", "install", "--kernel", "k1", "--sandbox", "off", check=0)
    (opdir / "canary.txt").parent.mkdir(parents=True, exist_ok=True)
    (opdir / "canary.txt").write_text("operator canary\n")
    opened = nb(brain, "claim", "open", "--workflow", "ledger", "--step", "1", "--scope", "kernels/k1/",
                "--json")
    cid = json.loads(opened.stdout)["id"]
    k1 = kernels.load_kernel(brain, "k1")
    script = [
        # past the hook's command reading (an interpreter hides the names): only the sandbox holds
        [tool_use("Bash", command=f"{PY} -c \"print(open('../k' + '2/notes.md').read())\"",
                  description="peek")],
        [tool_use("Bash", command=f"{PY} -c \"print(open('{opdir}/can' + 'ary.txt').read())\"",
                  description="keys")],
        [tool_use("Write", file_path=str(brain.root / "kernels" / "k1" / "ledger.md"), content="tidy\n")],
        [tool_use("Bash", command=f"{PY} -m nika_brain claim close {cid} --status ok --summary tidied",
                  description="report")],
        [text("Ledger tidied; claim closed.")],
    ]
    doors = DoorService(brain)   # claims/ is read-only in the sandbox: the close goes through k1's door
    doors.start()
    with MessagesStandin(script) as standin:
        run = run_claude("tidy the ledger", cwd=brain.root / "kernels" / "k1", home=tmp_path / "h",
                         base_url=standin.url, wrap=sandbox.wrap(brain, k1),
                         args=["--include-hook-events", "--permission-mode", "acceptEdits",
                               "--allowedTools", "Bash"],
                         env={"PYTHONPATH": str(REPO), "NIKA_KERNEL_ID": "k1", "NIKA_CLAIM": cid,
                              "NIKA_BRAIN_DIR": str(brain.root)})
    doors.stop()
    assert run.returncode == 0, run.explain()
    assert "SessionStart" in run.hook_events() and "PreToolUse" in run.hook_events(), run.hook_events()
    peek, keys, write, close = list(standin.tool_results().values())[:4]
    sent = standin.sent_text()
    assert peek["is_error"] and "No such file" in peek["text"] and "k2 private notes" not in sent, peek
    assert keys["is_error"] and "No such file" in keys["text"] and "operator canary" not in sent, keys
    assert not write["is_error"], write
    assert not close["is_error"], close
    assert (brain.root / "kernels" / "k1" / "ledger.md").read_text() == "tidy\n"
    shown = nb(brain, "claim", "show", cid, "--json")
    assert json.loads(shown.stdout)["status"] == "closed", shown.stdout
    # its Claude Code config lives in its own folder, not in the operator's HOME
    assert (sandbox.home_dir(brain, "k1") / ".claude").is_dir()
    assert not (tmp_path / "h" / ".claude.json").exists()
