"""Theme branches: one branch per workflow, each worked on in its own linked git worktree.

Why worktrees: parallel workflows sharing the main checkout would share one index and one HEAD, so
one workflow's `git add` could land in another's commit. A linked worktree per theme branch gives each
its own index and HEAD while objects and refs stay shared.

Merging back (`theme-branch-merge.sh`) only happens behind the 0-failures gate, always `--no-ff` so
the theme stays visible in history, never forced, and never in a checkout the user is working in.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from nika_brain.errors import BrainError, DirtyCheckout
from nika_brain.gitrepo import git

# Files in a worktree's git dir that mean an operation is half done there.
_IN_PROGRESS = {
    "MERGE_HEAD": "a merge",
    "CHERRY_PICK_HEAD": "a cherry-pick",
    "REVERT_HEAD": "a revert",
    "rebase-merge": "a rebase",
    "rebase-apply": "a rebase or am",
}


@dataclass(frozen=True)
class MergeResult:
    merged: bool
    commit: str | None
    conflicts: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class _Worktree:
    path: Path
    branch: str | None  # short branch name; None when detached or bare
    missing: bool       # registered, but its folder is gone
    locked: bool


def _worktrees(repo: Path) -> list[_Worktree]:
    # -z so that paths with newlines cannot split a record; records end with an empty field.
    text = git.run(repo, "worktree", "list", "--porcelain", "-z").stdout
    trees = []
    for record in text.split("\0\0"):
        path, branch, missing, locked = None, None, False, False
        for field in filter(None, record.split("\0")):
            key, _, value = field.partition(" ")
            if key == "worktree":
                path = Path(value)
            elif key == "branch" and value.startswith("refs/heads/"):
                branch = value[len("refs/heads/"):]
            elif key == "prunable":
                missing = True
            elif key == "locked":
                locked = True
        if path is not None:
            trees.append(_Worktree(path, branch, missing or not path.exists(), locked))
    return trees


def _same(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


# Names git accepted as they are: its rules for a literal name do not depend on the repository, and a
# launch checks its theme and base branch names again at each opening, merge and close.
_VALID_NAMES: set[str] = set()


def _check_name(repo: Path, name: str, what: str) -> None:
    # A leading dash would be read as an option by the git commands we pass the name to.
    if not name or name.startswith("-"):
        raise BrainError(f"invalid {what} name {name!r}", key=what)
    if name in _VALID_NAMES:
        return
    proc = git.run(repo, "check-ref-format", "--branch", name, check=False)
    # --branch expands @{-1} and friends; we want the literal name the user wrote.
    if proc.returncode != 0 or proc.stdout.strip() != name:
        raise BrainError(f"invalid {what} name {name!r}", key=what)
    _VALID_NAMES.add(name)


def _branch_sha(repo: Path, name: str) -> str | None:
    proc = git.run(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{name}^{{commit}}",
                   check=False)
    return proc.stdout.strip() or None


def _require_branch(repo: Path, name: str, what: str) -> str:
    sha = _branch_sha(repo, name)
    if sha is None:
        raise BrainError(f"{what} branch {name!r} does not exist", key=what)
    return sha


def theme_worktree_path(branch: str, worktrees_dir: Path) -> Path:
    """Where the worktree of `branch` lives: one flat folder per branch, `/` spelled `__`."""
    # Absolute, because git -C resolves relative paths against the repository, not our cwd.
    return Path(os.path.abspath(Path(worktrees_dir) / branch.replace("/", "__")))


def _prune_if_missing(repo: Path, trees: list[_Worktree], wanted) -> list[_Worktree]:
    """Drop registrations whose folder vanished, when one of them is in our way."""
    if any(t.missing and not t.locked and wanted(t) for t in trees):
        git.run(repo, "worktree", "prune")
        return _worktrees(repo)
    return trees


def _find_open(repo: Path, branch: str, path: Path) -> Path | None:
    """The worktree path if `branch` is already checked out at `path`; BrainError if elsewhere."""
    trees = _prune_if_missing(repo, _worktrees(repo),
                              lambda t: t.branch == branch or _same(t.path, path))
    for t in trees:
        if t.branch == branch:
            if not _same(t.path, path):
                raise BrainError(f"branch {branch!r} is already checked out at {t.path}; "
                                 f"switch that checkout to another branch first")
            if t.missing:
                raise BrainError(f"worktree {t.path} of {branch!r} is missing but locked; "
                                 f"run `git worktree unlock {t.path}` or restore the folder")
            return path
        if _same(t.path, path):
            raise BrainError(f"{path} is already the worktree of "
                             f"{t.branch or 'a detached HEAD'!r}, not of {branch!r}")
    return None


def open_theme_branch(repo: Path, branch: str, base: str, worktrees_dir: Path) -> Path:
    """Ensure `branch` exists (from `base` if new) and has its own worktree; return that path."""
    repo = Path(repo)
    _check_name(repo, branch, "branch")
    _check_name(repo, base, "base")
    if _branch_sha(repo, branch) is None:
        base_sha = _require_branch(repo, base, "base")
        # Branch from the commit we just read, so a concurrent move of base cannot surprise us.
        proc = git.run(repo, "branch", "--no-track", branch, base_sha, check=False)
        if proc.returncode != 0 and _branch_sha(repo, branch) is None:
            raise BrainError(f"cannot create branch {branch!r}: {proc.stderr.strip()}")
    path = theme_worktree_path(branch, worktrees_dir)
    if _find_open(repo, branch, path):
        return path
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BrainError(f"{path} exists and is not a worktree of {branch!r}; move it away")
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = git.run(repo, "worktree", "add", str(path), branch, check=False)
    if proc.returncode != 0:
        # Another process may have opened the same theme between our check and our add.
        if _find_open(repo, branch, path):
            return path
        msg = (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise BrainError(f"cannot add worktree for {branch!r} at {path}: {msg}")
    return path


def remove_theme_worktree(repo: Path, branch: str, worktrees_dir: Path, *,
                          force: bool = False) -> bool:
    """Remove the worktree of `branch` (the branch itself stays); False if there was none.

    Without `force`, git refuses when the worktree has uncommitted changes: that work would be lost.
    """
    repo = Path(repo)
    _check_name(repo, branch, "branch")
    path = theme_worktree_path(branch, worktrees_dir)
    tree = next((t for t in _worktrees(repo) if _same(t.path, path)), None)
    if tree is None:
        return False
    if tree.branch != branch:
        raise BrainError(f"{path} is the worktree of {tree.branch or 'a detached HEAD'!r}, "
                         f"not of {branch!r}; leaving it")
    if tree.missing:
        git.run(repo, "worktree", "prune")
        return True
    git.run(repo, "worktree", "remove", *(["--force"] if force else []), str(path))
    return True


def _check_mergeable_here(path: Path, base: str) -> None:
    """Refuse to merge in a checkout where it would mix with the user's work or a running git."""
    gdir = git.git_dir(path)
    for marker, what in _IN_PROGRESS.items():
        if (gdir / marker).exists():
            raise BrainError(f"{what} is in progress in {path}; finish or abort it before merging "
                             f"into {base!r}")
    if (gdir / "index.lock").exists():
        raise BrainError(f"{gdir / 'index.lock'} exists: another git command is running in {path}, "
                         f"or one crashed and left it stale (delete it if no git is running)")
    if git.out(path, "status", "--porcelain", "--untracked-files=no"):
        # git cannot check base out a second time, and merging here would mix in the user's edits.
        raise DirtyCheckout(f"{base!r} is checked out at {path} with uncommitted changes; commit or "
                         f"stash them (or switch that checkout away from {base!r}) before merging")


def _merge_in(worktree: Path, branch: str, base: str, message: str) -> MergeResult:
    proc = git.run(worktree, "merge", "--no-ff", "--no-edit", "-m", message,
                   f"refs/heads/{branch}", check=False)
    if proc.returncode == 0:
        return MergeResult(True, git.out(worktree, "rev-parse", "HEAD"), (),
                           f"merged {branch!r} into {base!r}")
    raw = git.run(worktree, "diff", "--name-only", "-z", "--diff-filter=U").stdout
    conflicts = tuple(dict.fromkeys(p for p in raw.split("\0") if p))
    if (git.git_dir(worktree) / "MERGE_HEAD").exists():
        git.run(worktree, "merge", "--abort")
    if conflicts:
        return MergeResult(False, None, conflicts,
                           f"merge of {branch!r} into {base!r} conflicts in {', '.join(conflicts)}")
    msg = ((proc.stderr.strip() or proc.stdout.strip()).splitlines() or ["unknown error"])[-1]
    raise BrainError(f"merge of {branch!r} into {base!r} failed: {msg}")


def merge_theme_branch(repo: Path, branch: str, base: str, *, green: bool,
                       message: str | None = None,
                       worktrees_dir: Path | None = None) -> MergeResult:
    """Merge `branch` into `base` with --no-ff, only when the 0-failures gate is green.

    The merge runs in the checkout that has `base` (if clean), else in a temporary worktree under
    `worktrees_dir` (a temp folder when None), so a user on another branch is never disturbed.
    On conflict the merge is aborted and the conflicting paths are returned.
    """
    repo = Path(repo)
    _check_name(repo, branch, "branch")
    _check_name(repo, base, "base")
    _require_branch(repo, branch, "theme")
    base_sha = _require_branch(repo, base, "base")
    if not green:
        return MergeResult(False, None, (), "0-failures gate is not green")
    if git.run(repo, "merge-base", "--is-ancestor", f"refs/heads/{branch}", base_sha,
               check=False).returncode == 0:
        return MergeResult(True, base_sha, (), "already merged")
    message = message or f"Merge theme branch '{branch}' into {base}"

    trees = _prune_if_missing(repo, _worktrees(repo), lambda t: t.branch == base)
    holder = next((t for t in trees if t.branch == base), None)
    if holder is not None:
        # git will not check base out twice, so the checkout that has it is the only place to merge.
        if holder.missing:
            raise BrainError(f"{base!r} is checked out in a missing but locked worktree "
                             f"{holder.path}; unlock or restore it")
        _check_mergeable_here(holder.path, base)
        return _merge_in(holder.path, branch, base, message)

    own_parent = worktrees_dir is None
    parent = Path(tempfile.mkdtemp(prefix="nika-merge-")) if own_parent else Path(worktrees_dir)
    tmp = Path(os.path.abspath(parent / f".merge-{base.replace('/', '__')}-{uuid.uuid4().hex[:8]}"))
    try:
        parent.mkdir(parents=True, exist_ok=True)
        git.run(repo, "worktree", "add", str(tmp), base)
        return _merge_in(tmp, branch, base, message)
    finally:
        git.run(repo, "worktree", "remove", "--force", str(tmp), check=False)
        shutil.rmtree(tmp, ignore_errors=True)
        git.run(repo, "worktree", "prune", check=False)
        if own_parent:
            shutil.rmtree(parent, ignore_errors=True)
