"""What a checkout has changed and not committed: list it, commit a chosen part of it, or set it aside
on a ref the operator can inspect (`git show <ref>`), leaving the checkout clean."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from nika_brain.gitrepo import git

STATE_DIR = ".nika"


def changed(checkout: Path) -> list[str]:
    """Every uncommitted path (modified, deleted, new), renames as two paths, the brain's own .nika/ aside."""
    out = git.run(checkout, "status", "--porcelain", "-z", "--untracked-files=all", "--no-renames",
                  check=False).stdout
    paths = [entry[3:] for entry in out.split("\0") if len(entry) > 3]
    return sorted(p for p in paths if p != STATE_DIR and not p.startswith(STATE_DIR + "/"))


def commit_paths(checkout: Path, paths: list[str], message: str, env: dict | None = None) -> bool:
    """Commit exactly `paths` (whatever else is staged stays out of the commit)."""
    if not paths:
        return False
    git.run(checkout, "add", "-A", "--", *paths)
    git.run(checkout, "commit", "-q", "-m", message, "--", *paths, env=env)
    return True


def set_aside(checkout: Path, ref: str, message: str, paths: list[str] | None = None) -> list[str]:
    """Record `paths` (default: every change) as a commit on `ref`, child of HEAD, then undo them in
    the checkout. Returns what was set aside; nothing is lost: `git show <ref>` has it."""
    todo = changed(checkout) if paths is None else sorted(paths)
    if not todo:
        return []
    fd, index = tempfile.mkstemp(prefix="nika-aside-", suffix=".index")
    os.close(fd)
    try:
        env = {"GIT_INDEX_FILE": index}
        git.run(checkout, "read-tree", "HEAD", env=env)
        git.run(checkout, "add", "-A", "--", *todo, env=env)
        tree = git.out(checkout, "write-tree", env=env)
        commit = git.out(checkout, "commit-tree", tree, "-p", "HEAD", "-m", message)
        git.run(checkout, "update-ref", ref, commit)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(index)
    git.run(checkout, "reset", "-q", "--", *todo, check=False)
    in_head = set(git.out(checkout, "ls-tree", "-r", "--name-only", "-z", "HEAD", "--", *todo).split("\0")) - {""}
    if in_head:
        git.run(checkout, "checkout", "-q", "HEAD", "--", *sorted(in_head))
    for rel in todo:
        if rel in in_head:
            continue
        p = Path(checkout) / rel
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
        parent = p.parent
        while parent != Path(checkout) and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    return todo
