"""`nika-brain kernel list|show|readjust`, and the directive reaching the kernel's Claude session."""
from __future__ import annotations

import json


def _kernel(brain, kid="alpha", goal="Operate the IT of BCUB3"):
    d = brain.root / "kernels" / kid
    d.mkdir(parents=True)
    (d / "kernel.yml").write_text(f"id: {kid}\ngoal: {goal}\ntags: [it]\n")


def test_readjust_directive_is_injected_once_into_the_kernel_session(brain, cli):
    _kernel(brain)
    listed = cli("kernel", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["goal"] == "Operate the IT of BCUB3"
    sent = cli("kernel", "readjust", "alpha", "prioritise the backup audit")
    assert sent.returncode == 0 and "queued for alpha" in sent.stdout
    assert "prioritise the backup audit" in cli("kernel", "show", "alpha").stdout

    event = json.dumps({"session_id": "11111111-2222-3333-4444-555555555555", "hook_event_name": "SessionStart",
                        "source": "startup", "cwd": str(brain.root)})
    first = cli("hook", "SessionStart", input=event, env={"NIKA_KERNEL_ID": "alpha"})
    assert first.returncode == 0, first.stderr
    ctx = json.loads(first.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Operate the IT of BCUB3" in ctx and "prioritise the backup audit" in ctx
    resume = json.dumps({**json.loads(event), "source": "resume"})
    again = cli("hook", "SessionStart", input=resume, env={"NIKA_KERNEL_ID": "alpha"})
    assert "prioritise the backup audit" not in again.stdout, "a seen directive is not repeated"


def test_unknown_kernel_is_one_clear_line(brain, cli):
    out = cli("kernel", "readjust", "ghost", "x")
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "ghost" in out.stderr
