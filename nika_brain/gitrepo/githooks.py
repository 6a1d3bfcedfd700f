"""Git hooks: install / uninstall / status of the managed hook scripts (what they do: nika_brain.hooks.git).

The installed scripts call `<python> -m nika_brain githook <name> "$@"`, which `__main__` dispatches
to nika_brain.hooks.git (what each hook does) without importing the CLI framework.

A hook already in place is moved to `<hook>.nika-chained` and run first (its failure stops ours);
the marker line makes installing idempotent and tells uninstall which hooks are ours.
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from nika_brain.errors import BrainError
from nika_brain.gitrepo import git

HOOKS = ("pre-commit", "post-merge", "post-checkout", "post-rewrite")
MARKER = "# nika-brain-managed-hook"
CHAINED = ".nika-chained"


# ---- install / uninstall -----------------------------------------------------------------------

def hooks_dir(repo: Path | str) -> Path:
    """The folder git runs hooks from (honours core.hooksPath; shared by all worktrees)."""
    repo = Path(repo)
    p = Path(git.out(repo, "rev-parse", "--git-path", "hooks"))
    return p if p.is_absolute() else (repo / p).resolve()


def script(name: str, python: str | None = None) -> str:
    py = shlex.quote(python or sys.executable)
    return (f"#!/bin/sh\n"
            f"{MARKER} ({name}): installed by `nika-brain hooks install`; "
            f"`nika-brain hooks uninstall` restores the previous hook.\n"
            f"chained=\"$0{CHAINED}\"\n"
            f"if [ -x \"$chained\" ]; then\n"
            f"    \"$chained\" \"$@\" || exit $?\n"
            f"fi\n"
            f"exec {py} -m nika_brain githook {name} \"$@\"\n")


def _ours(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return MARKER.encode() in fh.read(4096)
    except (FileNotFoundError, IsADirectoryError):
        return False
    except OSError as exc:
        raise BrainError(f"cannot read hook: {exc.strerror}", file=str(path)) from exc


def _write_hook(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.nika-tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)


def install(repo: Path | str, names: tuple[str, ...] = HOOKS, *, python: str | None = None) -> list[str]:
    """Install our hooks, chaining existing ones; returns the hooks that changed (none when re-run)."""
    folder = hooks_dir(repo)
    folder.mkdir(parents=True, exist_ok=True)
    changed = []
    for name in names:
        if name not in HOOKS:
            raise BrainError(f"unknown hook {name!r} (known: {', '.join(HOOKS)})")
        path, chained = folder / name, folder / (name + CHAINED)
        text = script(name, python)
        if _ours(path):
            if path.read_text(encoding="utf-8") == text and os.access(path, os.X_OK):
                continue
        elif path.exists() or path.is_symlink():
            if chained.exists() or chained.is_symlink():
                raise BrainError(f"both {path} and {chained} exist: move one aside, then install again")
            os.rename(path, chained)  # keeps content, mode and symlinks exactly
        _write_hook(path, text)
        changed.append(name)
    return changed


def uninstall(repo: Path | str, names: tuple[str, ...] = HOOKS) -> list[str]:
    """Remove our hooks and put back the ones they chained; returns the hooks that changed."""
    folder = hooks_dir(repo)
    changed = []
    for name in names:
        path, chained = folder / name, folder / (name + CHAINED)
        if not _ours(path):
            continue
        if chained.exists() or chained.is_symlink():
            os.replace(chained, path)
        else:
            os.unlink(path)
        changed.append(name)
    return changed


def status(repo: Path | str) -> dict[str, str]:
    """name -> 'installed' | 'installed+chained' | 'foreign' | 'absent'."""
    folder = hooks_dir(repo)
    out = {}
    for name in HOOKS:
        path = folder / name
        if _ours(path):
            out[name] = "installed+chained" if (folder / (name + CHAINED)).exists() else "installed"
        else:
            out[name] = "foreign" if path.exists() else "absent"
    return out


# ---- what the hooks do -------------------------------------------------------------------------
