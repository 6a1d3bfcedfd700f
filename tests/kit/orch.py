"""A brain ready for orchestrator tests: zones, the satellite card, workflows, and a driver for the
real `nika-brain` process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nika_brain.brain import Brain
from tests.kit.brain import git_out as git
from tests.kit.brain import make_brain

KERNEL = """---
zones:
  - name: state
    level: tool-only
    paths: [claims/, locks/, gates/, breakers/, runs/, journal/, BRAIN-INDEX.md]
  - name: kernel
    level: protected
    paths: [brain/, agents/, workflows/, nika-brain.yml, kernel-area/]
  - name: project
    level: open
    paths: [.]
---
# Zones
"""

CARD = """---
name: {name}
type: protocol
context_tier: warm
status: active
brain:
  scope: project
  owner: human
  writer: human
  lifecycle: permanent
  ipc:
    zone_access: [{zones}]
---
# {name}
Work inside the claim's scope, then report with `nika-brain claim close`.
"""

# One step on src/ that re-triggers itself on failure: three failures in a row trip the breaker.
BREAKER = """name: brk
branch: theme/brk
chain:
  - step: 1
    type: search
    scope: src/
    on_fail: trigger:1
"""


def orch_brain(root: Path, workflows: dict[str, str], *, config: str = "",
               files: dict[str, str] | None = None) -> Brain:
    make_brain(root, "version: 1\nlock_poll: 0.01\nfsync: false\n" + config)
    (root / "brain").mkdir()
    (root / "brain" / "KERNEL.md").write_text(KERNEL)
    (root / "agents").mkdir()
    (root / "agents" / "satellite-boot.md").write_text(CARD.format(name="satellite-boot", zones="project"))
    (root / "agents" / "kernel-writer.md").write_text(CARD.format(name="kernel-writer", zones="project, kernel"))
    (root / "workflows").mkdir()
    for name, text in workflows.items():
        (root / "workflows" / f"{name}.yml").write_text(text)
    for rel, text in (files or {}).items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "brain for tests")
    return Brain.at(root)


def nb(brain: Brain, *args, env: dict | None = None, check: int | None = None) -> subprocess.CompletedProcess:
    """The real CLI, in the brain; `check` asserts the exit code and shows output when it differs."""
    full = dict(os.environ)
    full.update({k: str(v) for k, v in (env or {}).items()})
    proc = subprocess.run([sys.executable, "-m", "nika_brain", *map(str, args)], cwd=brain.root, env=full,
                          capture_output=True, text=True, timeout=300)
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def run_file(brain: Brain, name: str) -> dict:
    from nika_brain.support.yamlsafe import load_file
    return load_file(brain.root / "runs" / f"{name}.yml")


def open_claim_id(brain: Brain, workflow: str) -> str:
    return run_file(brain, workflow)["claim"]


def journal(brain: Brain, workflow: str | None = None) -> list[dict]:
    path = brain.root / "journal" / "signals.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in recs if workflow is None or r.get("workflow") == workflow]


def worktree(brain: Brain, branch: str) -> Path:
    return brain.root / ".nika" / "worktrees" / branch.replace("/", "__")


SATELLITE = Path(__file__).resolve().parent / "satellite_program.py"


def satellite_config(program: Path = SATELLITE) -> str:
    """nika-brain.yml lines that make the real small satellite program the swarm satellite command."""
    return f'satellite_command: ["{sys.executable}", "{program}", "{{claim}}", "{{brief_file}}"]\n'


def claims_of(brain: Brain, workflow: str) -> list[dict]:
    """Every claim file of a workflow, oldest first (by their opened time)."""
    from nika_brain.support.clock import parse
    from nika_brain.support.yamlsafe import load_file
    found = [load_file(p) for p in sorted((brain.root / "claims").glob("*.yml"))]
    return sorted((c for c in found if c["workflow"] == workflow), key=lambda c: parse(c["opened"]))


# A one-step workflow with no test (a search step on notes/); `angle` is its story angle.
PLAIN = """name: plain
branch: theme/plain
chain:
  - step: 1
    type: search
    scope: notes/
    story_angle: "{angle}"
"""


# Two workflows: w1's one step triggers w2's step 1 (cross-workflow triggers).
W1 = """name: w1
branch: theme/w1
chain:
  - step: 1
    type: search
    scope: notes/
    story_angle: "result=ok"
    on_done: trigger:w2/1
"""
W2 = """name: w2
branch: theme/w2
chain:
  - step: 1
    type: search
    scope: docs/
    story_angle: "result=ok"
"""
