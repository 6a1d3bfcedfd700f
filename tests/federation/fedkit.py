"""Helpers for the federation core tests: a brain whose kernels run the stand-in agent on a private
tmux server, and a way to wait for what the agent's hooks record."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nika_brain.brain import Brain
from tests.kit.brain import make_brain
from tests.kit.wait import until  # noqa: F401  (the federation tests take it from here)

STANDIN = Path(__file__).with_name("standin_agent.py")


def fed_config(tmp: Path, **extra) -> str:
    fed = {"agent_command": [sys.executable, str(STANDIN)], "tmux_socket": str(tmp / "tmux.sock"),
           "supervisor": "manual", "deliver_timeout": 120, "kill_grace": 2, **extra}
    return "version: 1\nlock_poll: 0.01\nfederation: " + json.dumps(fed) + "\n"


def fed_brain(tmp: Path, **extra) -> Brain:
    return make_brain(tmp / "brain", fed_config(tmp, **extra))


def configure(brain: Brain, tmp: Path, **extra) -> Brain:
    (brain.root / "nika-brain.yml").write_text(fed_config(tmp, **extra), encoding="utf-8")
    return Brain.at(brain.root)


@pytest.fixture
def fbrain(brain, tmp_path):
    """The conftest `brain` (so the `cli` fixture runs in it), configured for the stand-in agent."""
    (brain.root / "nika-brain.yml").write_text(fed_config(tmp_path), encoding="utf-8")
    b = Brain.at(brain.root)
    yield b
    subprocess.run(["tmux", "-S", str(tmp_path / "tmux.sock"), "kill-server"], capture_output=True)
    from nika_brain.federation.kernels import limits
    time.sleep(0.1)  # the agents die with their tmux server; then their cgroups can go
    for d in (b.kernels_dir.iterdir() if b.kernels_dir.is_dir() else ()):
        limits.remove_groups(limits.group_name(b.root, d.name))




def transcript_turn(path: Path, *, input_tokens: int, model: str, text: str) -> None:
    """A Claude Code transcript of one assistant message that used `input_tokens` of context."""
    path.write_text(json.dumps({"type": "assistant", "message": {
        "id": "m1", "role": "assistant", "model": model, "content": [{"type": "text", "text": text}],
        "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}) + "\n")
