"""`nika-brain sync`: this machine's brain state to and from the git remote (one brain, several machines).

One sync, under the base checkout's mutex (merges and state commits never interleave):
1. commit the state files that changed here (claims, locks, gates, runs, ... : only those);
2. fetch the remote's base branch and merge it (record files have one writer, so the merge is clean;
   BRAIN-INDEX.md keeps ours and is regenerated from the merged records, then committed);
3. push; a push the remote rejects (another machine pushed first) goes back to 2, a few times.

Settings (`sync:` in nika-brain.yml): `remote` (default `origin`), `interval` (seconds between the
daemon's syncs, default 30), `fresh` (default true: pull before a decision that must be fresh — a
gate's decision read by `workflow resume`, a claim opened by hand — when a remote is configured).
"""
from __future__ import annotations

from dataclasses import dataclass

from nika_brain.brain import Brain
from nika_brain.engine.merging import base_checkout, commit_state_held
from nika_brain.errors import Busy, Invalid
from nika_brain.gitrepo import git
from nika_brain.gitrepo import sync as gsync

ATTEMPTS = 5


@dataclass(frozen=True)
class Settings:
    remote: str = "origin"
    interval: float = 30.0
    fresh: bool = True
    configured: bool = False      # a `sync:` block exists: this brain lives on several machines


@dataclass(frozen=True)
class Result:
    remote: str
    branch: str
    committed: bool      # this machine's state changes were committed first
    pulled: int          # commits brought in from the remote
    pushed: bool
    attempts: int

    def line(self) -> str:
        got = f"{self.pulled} commit(s) in" if self.pulled else "nothing new"
        return (f"synced {self.branch} with {self.remote}: {got}, "
                f"{'pushed' if self.pushed else 'nothing to push'} (attempt {self.attempts})")


def settings(brain: Brain) -> Settings:
    raw = brain.config.sync
    if not raw:
        return Settings()
    unknown = sorted(set(raw) - {"remote", "interval", "fresh"})
    if unknown:
        raise Invalid(f"sync: unknown key(s) {', '.join(unknown)} (known: remote, interval, fresh)",
                      file="nika-brain.yml", key="sync")
    remote, interval, fresh = raw.get("remote", "origin"), raw.get("interval", 30.0), raw.get("fresh", True)
    if not isinstance(remote, str) or not remote or remote.startswith("-"):
        raise Invalid("sync.remote must be a git remote name", file="nika-brain.yml", key="sync.remote")
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 < interval <= 86400:
        raise Invalid("sync.interval must be seconds, 0 < interval <= 86400", file="nika-brain.yml",
                      key="sync.interval")
    if not isinstance(fresh, bool):
        raise Invalid("sync.fresh must be true or false", file="nika-brain.yml", key="sync.fresh")
    return Settings(remote, float(interval), fresh, True)


def _check_remote(brain: Brain, remote: str) -> None:
    if git.run(brain.root, "remote", "get-url", remote, check=False).returncode != 0:
        raise Invalid(f"sync: no git remote {remote!r} in {brain.root} (git remote add {remote} <url>)")
    head = git.current_branch(brain.root)
    if head != brain.config.base_branch:
        raise Invalid(f"sync: the brain's checkout is on {head or 'a detached HEAD'}, not on "
                      f"{brain.config.base_branch}: state lives on the base branch")


def _merge_drivers(brain: Brain) -> None:
    """.git/config is per clone: every machine needs the drivers; a brain made before them gets its
    .gitattributes lines committed once, so that every machine merges the same way."""
    if gsync.configure_merge_driver(brain.root) and git.run(
            brain.root, "status", "--porcelain", "--", ".gitattributes", check=False).stdout.strip():
        git.run(brain.root, "add", "--", ".gitattributes")
        git.run(brain.root, "commit", "-q", "-m", "sync: merge drivers for the generated index and the logs",
                "--", ".gitattributes")


KERNEL_RECORDS = ":(glob)kernels/*/kernel.yml"


def _commit_kernel_records(brain: Brain) -> bool:
    """A kernel's record travels too (each names the machine that drives it: its one writer), so
    every machine sees every kernel and where it runs; nothing else of a kernel's folder does (its
    credentials, memory, settings and queue stay on its machine)."""
    git.run(brain.root, "add", "-A", "--", KERNEL_RECORDS, check=False)
    staged = [p for p in git.run(brain.root, "diff", "--cached", "--name-only", "-z", "--", KERNEL_RECORDS,
                                 check=False).stdout.split("\0") if p]
    if not staged:
        return False
    git.run(brain.root, "commit", "-q", "-m", "state: kernel records (sync)", "--", *staged)
    return True


def sync(brain: Brain, *, remote: str | None = None, attempts: int = ATTEMPTS) -> Result:
    from nika_brain.engine import index
    remote = remote or settings(brain).remote
    branch = brain.config.base_branch
    _check_remote(brain, remote)
    with base_checkout(brain):
        _merge_drivers(brain)
        committed = commit_state_held(brain, "state: sync")
        committed = _commit_kernel_records(brain) or committed
        pulled = 0
        for attempt in range(1, attempts + 1):
            got = gsync.pull(brain.root, remote, branch)
            pulled += got.commits
            if got.commits:
                index.regenerate(brain)
                commit_state_held(brain, f"state: BRAIN-INDEX.md after sync with {remote}")
            if gsync.push(brain.root, remote, branch):
                return Result(remote, branch, committed, pulled, True, attempt)
    raise Busy(f"sync: {remote}/{branch} moved under every one of {attempts} pushes: sync again")


def pull_if_shared(brain: Brain) -> int:
    """Before a decision that must be fresh: bring in the other machines' state (no push). Nothing
    happens in a brain without a `sync:` block or with `fresh: false`. Returns commits pulled."""
    s = settings(brain)
    if not (s.configured and s.fresh):
        return 0
    from nika_brain.engine import index
    _check_remote(brain, s.remote)
    with base_checkout(brain):
        _merge_drivers(brain)
        commit_state_held(brain, "state: before pulling")
        got = gsync.pull(brain.root, s.remote, brain.config.base_branch)
        if got.commits:
            index.regenerate(brain)
            commit_state_held(brain, f"state: BRAIN-INDEX.md after pulling {s.remote}")
        return got.commits
