"""`workflow-launch` and `workflow resume` without typer (cli/launchfast.py): the same lines, the same
exit codes as the typer commands, and no CLI framework imported for a plain call."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from nika_brain.cli import fast, launchfast
from tests.kit.orch import nb, orch_brain

ONE = "name: one\nbranch: theme/one\nchain:\n  - step: 1\n    type: search\n    scope: notes/\n"
SW = ("name: sw\nbranch: theme/sw\nchain:\n  - step: 1\n    type: search\n    scope: s1/\n"
      "  - step: 2\n    type: search\n    scope: s2/\n")
GATED = "name: gated\nbranch: theme/gated\nchain:\n  - step: 1\n    type: search\n    scope: g/\n    gate: human\n"
# A swarm satellite that only reports (a real process; its braces doubled for the command's placeholders).
NOOP = [sys.executable, "-c", "print('{{\"status\": \"ok\", \"summary\": \"noop\"}}')"]
CONFIG = "satellite_command: [" + ", ".join(json.dumps(a) for a in NOOP) + "]\n"

SEQUENCE = [
    ["workflow-launch", "nope"],                              # no such workflow: one line, exit 1
    ["workflow-launch", "one", "--mode", "bogus"],
    ["workflow-launch", "one", "--context", "[1]"],           # not a JSON object
    ["workflow-launch", "one", "--context", "{bad"],
    ["workflow-launch", "one", "--poll", "soon"],             # not a number: typer's own usage error
    ["workflow-launch", "one", "--mode=assisted", "--bogus"],  # not a plain form: typer's
    ["workflow", "resume", "one"],                            # not started
    ["workflow-launch", "one", "--context", '{"k": "v"}'],   # assisted: the brief, WAITING
    ["workflow-launch", "one", "--json"],                     # its open step again, as JSON
    ["workflow", "resume", "one", "--json", "--poll", "0.5"],
    ["workflow", "resume", "one", "--retry"],                 # not halted
    ["workflow-launch", "sw", "--mode", "swarm"],             # two satellites, merged: DONE
    ["workflow-launch", "sw", "--mode", "swarm"],             # done already
    ["workflow-launch", "sw", "--step", "1"],                 # done: refused
    ["workflow-launch", "sw", "--mode", "swarm", "--restart", "--json"],
    ["workflow", "resume", "sw"],
    ["workflow-launch", "gated", "--mode", "swarm"],          # waits for a human: exit 5
]


def _normal(text: str, root: str) -> str:
    text = text.replace(root, "<root>")
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "<time>", text)
    text = re.sub(r"sess-\d{8}-\d{4,6}", "sess-<stamp>", text)
    text = re.sub(r"-\d{6}-step-", "-<hms>-step-", text)        # a gate id's time of day
    text = re.sub(r"\b[0-9a-f]{40}\b", "<commit>", text)
    return re.sub(r"\b[0-9a-f]{7,12}\b", "<short>", text)


def test_the_fast_run_commands_answer_like_the_typer_commands(tmp_path, git_env):
    def sequence(side: str, env: dict) -> list:
        brain = orch_brain(tmp_path / side, {"one": ONE, "sw": SW, "gated": GATED}, config=CONFIG)
        said = []
        for args in SEQUENCE:
            p = nb(brain, *args, env=env)
            said.append((args, p.returncode, _normal(p.stdout + "|" + p.stderr, str(brain.root))))
        return said

    with ThreadPoolExecutor(2) as pool:   # the two brains are independent: half the wall time
        fast_run = pool.submit(sequence, "fast", {})
        typer_run = pool.submit(sequence, "typer", {"NIKA_NO_FAST_CLI": "1"})
        said = {"fast": fast_run.result(), "typer": typer_run.result()}
    for quick, slow in zip(said["fast"], said["typer"]):
        assert quick == slow
    by_args = {tuple(a): (code, text) for a, code, text in said["fast"]}
    assert by_args[("workflow-launch", "nope")] == (1, "|nika-brain: no workflow file nope\n")
    assert "Usage:" in by_args[("workflow-launch", "one", "--poll", "soon")][1]   # typer's, on both sides
    assert "WAITING" in by_args[("workflow-launch", "one", "--context", '{"k": "v"}')][1]
    assert "DONE" in by_args[("workflow-launch", "sw", "--mode", "swarm")][1]
    assert json.loads(by_args[("workflow-launch", "sw", "--mode", "swarm", "--restart", "--json")][1]
                      .split("|")[0])["status"] == "done"
    assert by_args[("workflow-launch", "gated", "--mode", "swarm")][0] == 5
    assert {code for _, code, _ in said["fast"]} >= {0, 1, 2, 5, 6}


def test_a_plain_launch_imports_no_cli_framework(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"one": ONE})
    code = ("import sys; from nika_brain.__main__ import main; rc = main(['workflow-launch', 'one']); "
            "print(rc, sorted(m for m in ('typer', 'click', 'pydantic', 'rich') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], cwd=brain.root, capture_output=True, text=True,
                       timeout=120, env=dict(os.environ))
    assert p.returncode == 0, p.stderr
    last = p.stdout.strip().splitlines()[-1]
    assert last == "0 []", p.stdout
    # The same launch through typer, the next time, finds the open step (the fast one did launch).
    again = nb(brain, "workflow-launch", "one", env={"NIKA_NO_FAST_CLI": "1"}, check=0)
    assert "WAITING" in again.stdout


@pytest.mark.parametrize("argv", [
    ["workflow-launch"], ["workflow-launch", "a", "b"], ["workflow-launch", "--help"],
    ["workflow-launch", "w", "--mode=swarm"], ["workflow-launch", "w", "--mode", "a", "--mode", "b"],
    ["workflow-launch", "w", "--poll", "soon"], ["workflow-launch", "w", "--timeout"],
    ["workflow-launch", "w", "--", "x"], ["workflow", "resume"], ["workflow", "resume", "w", "--step", "1"],
    ["workflow", "status", "w"], ["workflow-launch", "w", "-h"]])
def test_what_is_not_a_plain_call_goes_to_typer(argv):
    assert fast.parse(argv, launchfast.SPECS, {}) is None
    assert launchfast.run(argv) is None


def test_a_plain_call_is_parsed_into_the_commands_arguments():
    assert fast.parse(["workflow-launch", "w", "--mode", "swarm", "--wait", "--restart", "--step", "2",
                       "--context", "{}", "--poll", "0.5", "--timeout", "3", "--json"], launchfast.SPECS, {}) == \
        (("workflow-launch",), {"workflow": "w", "mode": "swarm", "wait": True, "restart": True, "step": "2",
                                "context": "{}", "poll": 0.5, "timeout": 3.0, "as_json": True})
    assert fast.parse(["workflow", "resume", "w", "--skip", "--retry"], launchfast.SPECS, {}) == \
        (("workflow", "resume"), {"name": "w", "skip": True, "retry": True})
