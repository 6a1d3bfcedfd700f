"""One brain on several machines: its base branch travels through a git remote.

Record files have one writer by construction (a claim, a lock, a gate decision is written by the
machine that owns it), so merging two machines' state is clean; the one file every machine rewrites,
BRAIN-INDEX.md, is generated: the merge keeps ours (the `nika-brain-index` merge driver, `true`) and
the caller regenerates it from the merged records; append-only logs (the journal) keep both sides'
lines (git's `union` driver). A push that the remote rejects (another machine
pushed first) is followed by a new fetch and merge, then pushed again.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nika_brain.errors import Blocked, BrainError
from nika_brain.gitrepo import git

INDEX_DRIVER = "nika-brain-index"
# BRAIN-INDEX.md is generated; append-only logs (journal/signals.jsonl, a kernel's queue.jsonl) are
# merged by git's own `union` driver: both machines' lines are kept.
ATTRIBUTES = (f"BRAIN-INDEX.md merge={INDEX_DRIVER}", "*.jsonl merge=union")


@dataclass(frozen=True)
class Pulled:
    commits: int          # commits the merge brought in (0: nothing new on the remote)
    merged: bool          # a merge commit was made (both sides had moved)


def configure_merge_driver(repo: Path | str) -> bool:
    """The generated index is never merged by hand: ours is kept, then regenerated. Returns True when
    something was written (the driver in .git/config, the attribute in .gitattributes)."""
    repo = Path(repo)
    changed = False
    if git.run(repo, "config", "--get", f"merge.{INDEX_DRIVER}.driver", check=False).stdout.strip() != "true":
        git.run(repo, "config", f"merge.{INDEX_DRIVER}.name", "BRAIN-INDEX.md: keep ours, regenerated after")
        git.run(repo, "config", f"merge.{INDEX_DRIVER}.driver", "true")
        changed = True
    attrs = repo / ".gitattributes"
    text = attrs.read_text(encoding="utf-8") if attrs.exists() else ""
    missing = [a for a in ATTRIBUTES if a not in text.splitlines()]
    if missing:
        attrs.write_text(text + ("" if not text or text.endswith("\n") else "\n") + "".join(f"{a}\n" for a in missing),
                         encoding="utf-8")
        changed = True
    return changed


def _remote_ref(repo: Path, remote: str, branch: str) -> str | None:
    proc = git.run(repo, "fetch", "-q", remote, branch, check=False)
    if proc.returncode != 0:
        text = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        if any("couldn't find remote ref" in line for line in text):
            return None   # a new remote: nothing to pull, the first push creates the branch
        raise BrainError(f"sync: cannot fetch {branch} from {remote}: {text[-1] if text else 'git fetch failed'}")
    return git.out(repo, "rev-parse", "FETCH_HEAD")


def pull(repo: Path | str, remote: str, branch: str) -> Pulled:
    """Fetch the remote's branch and merge it into the checked-out base branch. A real conflict (two
    machines wrote one record) is refused with the paths, and the merge is undone."""
    repo = Path(repo)
    theirs = _remote_ref(repo, remote, branch)
    if theirs is None:
        return Pulled(0, False)
    new = int(git.out(repo, "rev-list", "--count", f"HEAD..{theirs}"))
    if new == 0:
        return Pulled(0, False)
    ahead = int(git.out(repo, "rev-list", "--count", f"{theirs}..HEAD"))
    proc = git.run(repo, "merge", "--no-edit", "-q", "-m", f"sync: merge {remote}/{branch}", theirs, check=False)
    if proc.returncode != 0:
        conflicts = git.run(repo, "diff", "--name-only", "--diff-filter=U", check=False).stdout.split()
        git.run(repo, "merge", "--abort", check=False)
        if conflicts:
            raise Blocked(f"sync: {remote}/{branch} and this machine both changed {', '.join(conflicts)}: "
                          "a record has one writer — decide which machine owns it, then sync again")
        msg = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise BrainError(f"sync: merge of {remote}/{branch} failed: {msg[-1] if msg else 'git merge failed'}")
    return Pulled(new, ahead > 0)


def push(repo: Path | str, remote: str, branch: str) -> bool:
    """Push the base branch; False when the remote moved meanwhile (rejected), so the caller pulls again."""
    proc = git.run(Path(repo), "push", "-q", remote, f"HEAD:refs/heads/{branch}", check=False)
    if proc.returncode == 0:
        return True
    text = proc.stderr + proc.stdout
    if "rejected" in text or "fetch first" in text or "non-fast-forward" in text:
        return False   # git's own words for a remote that moved: there is no exit code that says it
    lines = text.strip().splitlines()
    raise BrainError(f"sync: cannot push {branch} to {remote}: {lines[-1] if lines else 'git push failed'}")


def ahead_of(repo: Path | str, remote: str, branch: str) -> int:
    """Commits of ours the remote has not seen (as far as the last fetch knows)."""
    proc = git.run(Path(repo), "rev-list", "--count", f"refs/remotes/{remote}/{branch}..HEAD", check=False)
    return int(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else -1
