"""The Claude Code hook process as Claude Code runs it, and a brain with kernels, a claim and a lock."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.state import claims, locks
from tests.kit.brain import make_brain
from tests.kit.orch import CARD

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "claude"
SID = "3f2b9c1e-7a4d-4e8b-9f21-0c5d6e7a8b90"

KERNEL_MD = """---
zones:
  - name: state
    level: tool-only
    paths: [claims/, locks/, gates/]
  - name: kernel
    level: protected
    paths: [brain/, agents/, kernels/, nika-brain.yml]
  - name: project
    level: open
    paths: ["."]
---
# Zones
"""


def hook_brain(root: Path) -> tuple[Brain, str]:
    """Zones, two cards, kernels alpha, beta (successor of alpha) and gamma, one open claim on
    src/auth/ + tests/auth/, and an exclusive lock of another claim on src/auth/locked.py."""
    brain = make_brain(root, "version: 1\nlock_poll: 0.01\nfsync: false\n")
    (root / "brain").mkdir()
    (root / "brain" / "KERNEL.md").write_text(KERNEL_MD)
    (root / "agents").mkdir()
    (root / "agents" / "satellite-boot.md").write_text(CARD.format(name="satellite-boot", zones="project"))
    (root / "agents" / "kernel-writer.md").write_text(CARD.format(name="kernel-writer", zones="project, kernel"))
    for kid, extra in (("alpha", ""), ("beta", "parent: alpha\n"), ("gamma", "card: kernel-writer\n")):
        (root / "kernels" / kid / "memory").mkdir(parents=True)
        (root / "kernels" / kid / "kernel.yml").write_text(f"id: {kid}\ngoal: goal of {kid}\ntags: [ops]\n{extra}")
    (root / "src" / "auth").mkdir(parents=True)
    (root / "src" / "auth" / "login.py").write_text("TIMEOUT = 5\n")
    c = claims.open_claim(brain, workflow="auth", step=1, satellite_type="code",
                          scope=["src/auth/", "tests/auth/"], story_angle="raise the login timeout")
    locks.acquire(brain, "src/auth/locked.py", "sess-other-claim", pid=None, ttl=3600)
    return brain, c.id


def clean_env(**extra: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NIKA_", "CLAUDE")) and k != "PYTHONDONTWRITEBYTECODE"}
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def fixture(name: str, brain: Brain, *, cwd: Path | None = None, sid: str = SID,
            transcript: Path | None = None) -> dict:
    text = (FIXTURES / f"{name}.json").read_text()
    text = (text.replace("$BRAIN", str(brain.root)).replace("$CWD", str(cwd or brain.root))
            .replace("$SID", sid).replace("$TRANSCRIPT", str(transcript or brain.root / "none.jsonl")))
    return json.loads(text)


class Answer:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.code = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        # The protocol: stdout is empty, or one JSON object with nothing before it.
        self.json = json.loads(proc.stdout) if proc.stdout.strip() else None
        assert self.json is None or proc.stdout.lstrip().startswith("{")
        assert "Traceback" not in proc.stderr, proc.stderr

    @property
    def specific(self) -> dict:
        return (self.json or {}).get("hookSpecificOutput", {})

    @property
    def allowed(self) -> bool:
        """Allowed silently: exit 0 and nothing on stdout (a crash on an allow path is not an allow)."""
        return self.code == 0 and self.stdout == ""

    @property
    def denied(self) -> bool:
        return self.specific.get("permissionDecision") == "deny"

    @property
    def reason(self) -> str:
        return self.specific.get("permissionDecisionReason", "")

    @property
    def context(self) -> str:
        return self.specific.get("additionalContext", "")


def hook(event: str, payload: dict | str | bytes, *, env: dict[str, str] | None = None,
         cwd: Path | str | None = None) -> Answer:
    data = payload if isinstance(payload, (str, bytes)) else json.dumps(payload)
    proc = subprocess.run([sys.executable, "-m", "nika_brain", "hook", event],
                          input=data.encode() if isinstance(data, str) else data,
                          env=env if env is not None else clean_env(), cwd=str(cwd or "/"),
                          capture_output=True, timeout=60)
    return Answer(subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(),
                                              proc.stderr.decode()))


def bound_env(brain: Brain, claim_id: str | None = None, kernel: str | None = None) -> dict[str, str]:
    return clean_env(NIKA_BRAIN_DIR=str(brain.root), NIKA_CLAIM=claim_id, NIKA_KERNEL_ID=kernel)


