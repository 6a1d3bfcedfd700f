"""Shared fixtures: a real brain (a git repository in tmp_path) and the real `nika-brain` process.

Every test that touches git gets a fixed identity and no user or system git config, so it behaves the
same on every machine; variables that would leak a caller's brain, claim, clock or agent session
into a test (NIKA_*, CLAUDECODE) are removed.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from nika_brain.brain import CONFIG_NAME, Brain

IDENTITY = {"GIT_AUTHOR_NAME": "Nika Test", "GIT_AUTHOR_EMAIL": "nika@example.invalid",
            "GIT_COMMITTER_NAME": "Nika Test", "GIT_COMMITTER_EMAIL": "nika@example.invalid"}
LEAKY = ("NIKA_BRAIN_DIR", "NIKA_CLAIM", "NIKA_NOW", "NIKA_AGENT", "CLAUDECODE", "GIT_DIR",
         "GIT_WORK_TREE", "GIT_INDEX_FILE")
MINIMAL_CONFIG = "version: 1\nlock_poll: 0.01\n"

# Every `python -m nika_brain` a test starts (the CLI, git hooks, satellites) must import the checkout
# under test, not whatever nika-brain is installed: the checkout goes first on PYTHONPATH.
CHECKOUT = str(Path(__file__).resolve().parent.parent)
if os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] != CHECKOUT:
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (CHECKOUT, os.environ.get("PYTHONPATH")) if p)


def git(repo: Path | str, *args: str) -> str:
    """Run git in `repo`; stdout stripped; a failure raises CalledProcessError with git's stderr."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def make_brain(root: Path, config: str = MINIMAL_CONFIG) -> Brain:
    """A fresh brain at `root`: git repo on `main`, nika-brain.yml, state folder ignored, one commit."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    (root / CONFIG_NAME).write_text(config, encoding="utf-8")
    (root / ".gitignore").write_text(".nika/\n.*.tmp\n", encoding="utf-8")
    git(root, "add", CONFIG_NAME, ".gitignore")
    git(root, "commit", "-q", "-m", "init brain")
    return Brain.at(root)


@pytest.fixture
def git_env(tmp_path_factory, monkeypatch) -> dict[str, str]:
    """Fixed git identity, empty HOME, no system git config, no leaked NIKA_* variables."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name, value in IDENTITY.items():
        monkeypatch.setenv(name, value)
    for name in LEAKY:
        monkeypatch.delenv(name, raising=False)
    return dict(os.environ)


@pytest.fixture
def brain(tmp_path, git_env) -> Brain:
    return make_brain(tmp_path / "brain")


@pytest.fixture
def cli(brain, git_env) -> Callable[..., subprocess.CompletedProcess]:
    """Run the real `nika-brain` (`python -m nika_brain ARGS`) in the brain; never raises on exit codes.

    `env` adds variables (a value of None removes one); `cwd` defaults to the brain root.
    """
    def run(*args: object, env: dict[str, str | None] | None = None, cwd: Path | str | None = None,
            input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        full = dict(os.environ)
        for name, value in (env or {}).items():
            if value is None:
                full.pop(name, None)
            else:
                full[name] = str(value)
        return subprocess.run([sys.executable, "-m", "nika_brain", *map(str, args)],
                              cwd=str(cwd or brain.root), env=full, input=input,
                              capture_output=True, text=True, timeout=timeout)
    return run
