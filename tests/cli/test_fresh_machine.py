"""A fresh machine: git knows no user. The README's first command must still work, and the commits
nika-brain makes itself are signed with its fallback identity; a configured one is used as is."""
from __future__ import annotations

import subprocess
import sys

from nika_brain.gitrepo.git import FALLBACK_IDENTITY
from tests.kit.brain import IDENTITY


def _nb(cwd, *args):
    return subprocess.run([sys.executable, "-m", "nika_brain", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_init_and_a_workflow_run_without_any_git_identity(tmp_path, git_env, monkeypatch):
    for name in IDENTITY:
        monkeypatch.delenv(name)
    monkeypatch.delenv("EMAIL", raising=False)  # git would read a user's EMAIL; a fresh box has none
    # Some hosts let git guess user@hostname; make "no identity" certain on every machine.
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "user.useConfigOnly")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "true")
    assert subprocess.run(["git", "config", "--get", "user.email"], cwd=tmp_path, capture_output=True).returncode != 0
    brain = tmp_path / "fresh"
    init = _nb(tmp_path, "init", str(brain))
    assert init.returncode == 0, init.stderr
    first = _nb(brain, "workflow-launch", "workflows/example.yml")
    assert first.returncode == 0, first.stderr
    assert "# Brief — example / step 1 (code)" in first.stdout
    author = subprocess.run(["git", "-C", str(brain), "log", "-1", "--format=%an <%ae>"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert author == f"{FALLBACK_IDENTITY['GIT_AUTHOR_NAME']} <{FALLBACK_IDENTITY['GIT_AUTHOR_EMAIL']}>"


def test_a_configured_identity_is_kept(tmp_path, git_env):
    brain = tmp_path / "mine"
    assert _nb(tmp_path, "init", str(brain)).returncode == 0
    author = subprocess.run(["git", "-C", str(brain), "log", "-1", "--format=%an <%ae>"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert author == f"{IDENTITY['GIT_AUTHOR_NAME']} <{IDENTITY['GIT_AUTHOR_EMAIL']}>"
