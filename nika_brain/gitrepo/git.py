"""Thin wrapper over the git command line.

We shell out to git rather than use a library: it is what the user runs, it is light to import on the
hook path, and every failure becomes a BrainError with git's own message.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from nika_brain.errors import BrainError

# The nika-brain command that is committing: the git hooks name it as the command to run again (or to
# override) when they refuse a commit. Set by the commands that commit (this very command line, options
# included, never one inherited from the process that started this one), moved on by a command whose
# later commits another command redoes (a close whose claim is closed: `workflow resume`). Only a
# message: no hook takes any decision from it. Satellites are started without it.
RERUN = "NIKA_COMMAND"


def rerun_is_this_command() -> None:
    """The hooks name this process's own command line as the one to run again."""
    import shlex
    import sys
    os.environ[RERUN] = shlex.join(["nika-brain", *sys.argv[1:]])


@contextlib.contextmanager
def rerun_as(command: str):
    """Commits made inside are redone by `command`: that is what a refusing hook names."""
    before = os.environ.get(RERUN)
    os.environ[RERUN] = command
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(RERUN, None)
        else:
            os.environ[RERUN] = before

FALLBACK_IDENTITY = {"GIT_AUTHOR_NAME": "nika-brain", "GIT_AUTHOR_EMAIL": "nika-brain@localhost",
                     "GIT_COMMITTER_NAME": "nika-brain", "GIT_COMMITTER_EMAIL": "nika-brain@localhost"}
_has_identity: dict[str, bool] = {}


def _identity_env(repo: Path | str) -> dict[str, str]:
    """On a machine where git knows no user (a fresh CI box, a container), the commits nika-brain
    makes itself (init, step work, state, merges) are signed `nika-brain <nika-brain@localhost>`
    instead of failing; a configured identity is always used as is."""
    if os.environ.get("EMAIL") or (os.environ.get("GIT_AUTHOR_EMAIL") and os.environ.get("GIT_COMMITTER_EMAIL")):
        return {}
    key = str(repo)
    if key not in _has_identity:
        # Configured, not guessed: git's user@hostname guess fails on many hosts, or is refused.
        proc = subprocess.run(["git", "-C", key, "config", "--get", "user.email"], capture_output=True)
        _has_identity[key] = proc.returncode == 0
    if _has_identity[key]:
        return {}
    return {k: v for k, v in FALLBACK_IDENTITY.items() if not os.environ.get(k)}


def run(repo: Path | str, *args: str, check: bool = True, input: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `git -C repo args...`; raise BrainError with git's stderr when check and it fails."""
    if args and args[0] in ("commit", "commit-tree", "merge") and "--abort" not in args:
        env = {**_identity_env(repo), **(env or {})}
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              input=input, env=full_env)
    except FileNotFoundError as exc:
        raise BrainError("git is not installed or not on PATH") from exc
    if check and proc.returncode != 0:
        msg = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        if args[0] in ("commit", "merge") and len(msg) > 1:
            # A hook's refusal: each line names a path or a problem, the last one the way out.
            said = "; ".join(line.strip() for line in msg[-12:] if line.strip())
            raise BrainError(f"git {args[0]} failed: {said}")
        raise BrainError(f"git {args[0]} failed: {msg[-1] if msg else 'exit ' + str(proc.returncode)}")
    return proc


def out(repo: Path | str, *args: str, env: dict[str, str] | None = None) -> str:
    """stdout of a git command that must succeed, stripped."""
    return run(repo, *args, env=env).stdout.strip()


def _own_git_dir(repo: Path | str) -> Path | None:
    """The git dir of a checkout's top folder, read from its `.git` (a folder, or a linked worktree's
    `gitdir:` file) without starting git; None when that is not plainly there (git decides then)."""
    dot = Path(repo) / ".git"
    try:
        if dot.is_dir():
            return dot.resolve() if (dot / "HEAD").is_file() else None
        text = dot.read_text()
    except OSError:
        return None
    if not text.startswith("gitdir: "):
        return None
    p = Path(text[len("gitdir: "):].strip())
    p = p if p.is_absolute() else (Path(repo) / p).resolve()
    return p if (p / "HEAD").is_file() else None


def is_repo(path: Path | str) -> bool:
    if _own_git_dir(path) is not None:
        return True
    return run(path, "rev-parse", "--git-dir", check=False).returncode == 0


def current_branch(repo: Path | str) -> str | None:
    gd = _own_git_dir(repo)
    if gd is not None:
        try:
            head = (gd / "HEAD").read_text().strip()
        except OSError:
            head = ""
        if head.startswith("ref: refs/heads/"):
            return head[len("ref: refs/heads/"):]
        if head and not head.startswith("ref:"):
            return None  # a detached HEAD
    proc = run(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return proc.stdout.strip() or None


def git_dir(repo: Path | str) -> Path:
    """The git dir of this worktree (for a linked worktree, its private one)."""
    own = _own_git_dir(repo)
    if own is not None:
        return own
    p = Path(out(repo, "rev-parse", "--git-dir"))
    return p if p.is_absolute() else (Path(repo) / p).resolve()


def common_dir(repo: Path | str) -> Path:
    """The git dir shared by all worktrees of the repository."""
    p = Path(out(repo, "rev-parse", "--git-common-dir"))
    return p if p.is_absolute() else (Path(repo) / p).resolve()
