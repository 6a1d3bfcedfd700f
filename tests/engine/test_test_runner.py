"""A validated close whose test command cannot run (a user install has no pytest) is its own named
error, and a red test command's output is kept on the open claim and shown (issue 25 §4)."""
from __future__ import annotations

import pytest

from nika_brain.support.yamlsafe import load_file
from tests.kit.orch import nb, open_claim_id, orch_brain, worktree

FLOW = """name: one
branch: theme/one
chain:
  - step: 1
    type: code
    scope: src/a/
    story_angle: create src/a/done
    test: "{test}"
"""


def _launch(tmp_path, test: str):
    brain = orch_brain(tmp_path / "b", {"one": FLOW.format(test=test)})
    nb(brain, "workflow-launch", "workflows/one.yml", check=0)
    claim = open_claim_id(brain, "one")
    (worktree(brain, "theme/one") / "src" / "a").mkdir(parents=True, exist_ok=True)
    (worktree(brain, "theme/one") / "src" / "a" / "done").write_text("x\n")
    return brain, claim


@pytest.mark.parametrize("test, missing", [
    ("python3 -m nika_absent_test_runner -q", "nika_absent_test_runner (a Python module, for python3)"),
    ("nika-absent-test-runner -q tests/", "nika-absent-test-runner is not installed"),
    ("cd src && nika-absent-test-runner", "nika-absent-test-runner is not installed"),
])
def test_a_missing_test_runner_is_named_not_counted_as_a_red_test(tmp_path, git_env, test, missing):
    brain, claim = _launch(tmp_path, test)
    out = nb(brain, "claim", "close", claim, "--status", "ok", "--summary", "done", check=1)
    assert missing in out.stderr and "cannot run" in out.stderr
    assert "tests not green" not in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert load_file(brain.root / "claims" / f"{claim}.yml")["status"] == "open"


def test_a_red_test_commands_output_is_kept_on_the_claim_and_shown(tmp_path, git_env):
    brain, claim = _launch(tmp_path, "test -f src/a/fixed || { echo checking greet; "
                                     "echo 'AssertionError: Hello, Ada' >&2; exit 1; }")
    red = nb(brain, "claim", "close", claim, "--status", "ok", "--summary", "done", check=4)
    assert "tests not green" in red.stderr and "AssertionError: Hello, Ada" in red.stderr
    kept = load_file(brain.root / "claims" / f"{claim}.yml")["failed_tests"]
    assert kept["exit"] == 1 and "checking greet" in kept["output"] and "AssertionError" in kept["output"]
    shown = nb(brain, "claim", "show", claim, check=0)
    assert "AssertionError: Hello, Ada" in shown.stdout
    assert nb(brain, "validate", check=0).returncode == 0
    # once green, the close clears it
    (worktree(brain, "theme/one") / "src" / "a" / "fixed").write_text("x\n")
    nb(brain, "claim", "close", claim, "--status", "ok", "--summary", "done", check=0)
    closed = load_file(brain.root / "claims" / f"{claim}.yml")
    assert closed["status"] == "closed" and "failed_tests" not in closed
