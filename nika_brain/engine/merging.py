"""Merging a theme branch into its base: the 0-failures check, the one refusal message, the state
commit before the merge, and `branch merge` (theme-branch-merge.sh) going through the same check as
the orchestrator's own close."""
from __future__ import annotations

import time
from dataclasses import dataclass

from nika_brain.brain import INDEX_FILE, TRACKED_STATE_FOLDERS, Brain
from nika_brain.engine import index, satellites, signals
from nika_brain.errors import Blocked, BrainError, DirtyCheckout, Invalid, Refused
from nika_brain.gitrepo import branches, git
from nika_brain.state import gates, runs
from nika_brain.state.runs import END, Run
from nika_brain.support import faults, fsio

STATE_PATHS = (*TRACKED_STATE_FOLDERS, INDEX_FILE)
NO_TEMP = ":(exclude,glob)**/.*.tmp"
MERGE_ATTEMPTS = 20


def base_checkout(brain: Brain):
    """Git in the brain's own checkout (state commits, merges into base) runs one run at a time:
    two workflows finishing together would otherwise collide on its index.lock."""
    return brain.mutex("base-checkout")


# ---- what a run still owes before its branch may merge --------------------------------------------

def step_results(run: Run) -> dict[str, str]:
    """The latest result of each step the run went through (ok | partial | failed | skipped)."""
    out: dict[str, str] = {}
    for h in run.history:
        out[str(h.get("step"))] = str(h.get("result"))
    return out


@dataclass(frozen=True)
class Owed:
    failed: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.failed or self.unresolved)


def owed(wf, run: Run | None) -> Owed:
    """Failed steps (latest result failed) and unresolved ones (from the cursor on, no result yet)."""
    if run is None:
        return Owed()
    results = step_results(run)
    red = tuple(sorted(s for s, r in results.items() if r == "failed"))
    open_: list[str] = []
    if run.cursor not in (None, END) and run.status != "done" and wf is not None:
        ids = [s.id for s in wf.chain]
        start = ids.index(run.cursor) if run.cursor in ids else 0
        skipped = {str(a.get("step")) for a in run.adaptations if a.get("op") == "skip"}
        open_ = [s for s in ids[start:] if results.get(s) not in ("ok", "partial", "skipped")
                 and s not in skipped and s not in red]
    return Owed(red, tuple(open_))


def run_branch_tests(brain: Brain, branch: str, command: str) -> tuple[satellites.TestRun, tuple[str, ...]]:
    """The 0-failures test on exactly the tree that would be merged: the branch tip. A clean theme
    worktree is that tree; a dirty one is not, so the tip is checked out apart (detached) and the
    worktree's uncommitted paths are returned: they are neither tested nor merged."""
    from nika_brain.gitrepo import changes
    worktree = branches.theme_worktree_path(branch, brain.worktrees_dir)
    dirty = tuple(changes.changed(worktree)) if worktree.is_dir() else ()
    if worktree.is_dir() and not dirty:
        return satellites.run_tests(command, worktree), ()
    apart = brain.state_dir / "tip-checkouts" / branch.replace("/", "__")
    with base_checkout(brain):
        if apart.exists():
            git.run(brain.root, "worktree", "remove", "--force", str(apart), check=False)
        git.run(brain.root, "worktree", "add", "-q", "--detach", str(apart), branch)
    try:
        return satellites.run_tests(command, apart), dirty
    finally:
        with base_checkout(brain):
            git.run(brain.root, "worktree", "remove", "--force", str(apart), check=False)


def refusal(*, owed_: Owed = Owed(), tests: satellites.TestRun | None = None,
            conflicts: tuple[str, ...] = (), reason: str = "", untested: tuple[str, ...] = ()) -> str:
    """The one message for a merge that did not happen, whoever asked for it."""
    if conflicts:
        return f"merge conflict on {', '.join(conflicts)}"
    why = []
    if owed_.failed:
        why.append(f"failed steps: {', '.join(owed_.failed)}")
    if owed_.unresolved:
        why.append(f"unresolved steps: {', '.join(owed_.unresolved)}")
    if tests is not None and not tests.green:
        why.append(f"{tests.failed} failed in `{tests.command}`"
                   + (f" on the committed branch tip (uncommitted in the theme worktree, so neither "
                      f"tested nor merged: {', '.join(untested[:5])}; commit what belongs to the branch)"
                      if untested else ""))
    if why:
        return "0-failures gate is not green: " + "; ".join(why)
    return reason or "not merged"


# ---- the merge ----------------------------------------------------------------------------------

def merge_into_base(brain: Brain, branch: str, base: str, *, green: bool, message: str | None = None,
                    state_message: str) -> branches.MergeResult:
    """Commit the state files, then merge the theme branch, under the base-checkout mutex.

    Other runs keep writing their (tracked) state files into this checkout, so the merge may find it
    dirty again right after the state commit: commit those too and try again, a few times.
    """
    with base_checkout(brain):
        for attempt in range(MERGE_ATTEMPTS):
            _commit_state(brain, state_message)
            faults.point("before-merge")
            try:
                return branches.merge_theme_branch(brain.root, branch, base, green=green, message=message,
                                                   worktrees_dir=brain.worktrees_dir)
            except DirtyCheckout:
                if attempt == MERGE_ATTEMPTS - 1:
                    raise
            time.sleep(0.05)
    raise AssertionError("unreachable")


def merge_branch(brain: Brain, branch: str, *, base: str | None = None, test: str | None = None,
                 no_tests: bool = False, force_human: bool = False, note: str = "") -> branches.MergeResult:
    """theme-branch-merge.sh: the branch's run must owe nothing (no failed or unresolved step) and its
    test command must be green; `force_human` overrides the run check, recorded in the journal."""
    from nika_brain.state.workflows import list_workflows
    base = base or brain.config.base_branch
    wfs = [w for w in list_workflows(brain) if w.branch == branch]
    if test is None:
        test = next((w.test for w in wfs if w.test), None)
    if test is None and not no_tests:
        raise Invalid(f"no test command known for {branch}: give --test CMD (or --no-tests)")
    if force_human and gates.in_agent_session():
        raise Refused("refused: --force-human is a human's override, not an agent session's")
    debt = Owed()
    for w in wfs:
        run = runs.load_run(brain, w.name)
        d = owed(w, run)
        debt = Owed(debt.failed + d.failed, debt.unresolved + d.unresolved)
    if debt and not force_human:
        reason = refusal(owed_=debt) + " (a human may override with --force-human)"
        signals.emit(brain, "BLOCKED_ON", reason=f"merge of {branch} refused: {reason}",
                     payload={"branch": branch, "failed": list(debt.failed),
                              "unresolved": list(debt.unresolved)})
        raise Blocked(reason)
    tr, untested = None, ()
    if test is not None:
        tr, untested = run_branch_tests(brain, branch, test)
    green = tr is None or tr.green
    res = merge_into_base(brain, branch, base, green=green,
                          state_message=f"brain: state before merging {branch}")
    if not res.merged:
        reason = refusal(tests=tr, conflicts=res.conflicts, reason=res.reason, untested=untested)
        signals.emit(brain, "BLOCKED_ON", reason=f"merge of {branch} refused: {reason}",
                     payload={"branch": branch})
        raise Blocked(reason)
    payload = {"branch": branch, "base": base, "commit": res.commit}
    if debt:
        payload.update(forced_by=_whoami(), failed=list(debt.failed),
                       unresolved=list(debt.unresolved), note=note)
    signals.emit(brain, "MERGE", reason=f"{branch} merged into {base}"
                 + (" (human override of the 0-failures check)" if debt else ""), payload=payload)
    return res


def _whoami() -> str:
    import getpass
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


# ---- state commits ------------------------------------------------------------------------------

def commit_state(brain: Brain, message: str) -> bool:
    with base_checkout(brain):
        return _commit_state(brain, message)


def _commit_state(brain: Brain, message: str, attempts: int = 5) -> bool:
    """Commit the brain's state files (only those) so that the base checkout is clean for a merge.

    Other runs write and remove their state files while we stage them (a lock file gone between
    git's listing and its stat fails the add): such a failure is retried on the new state.
    """
    for attempt in range(attempts):
        try:
            return _commit_state_once(brain, message)
        except BrainError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.05)
    return False


def _commit_state_once(brain: Brain, message: str) -> bool:
    index.flush(brain)   # a drive's owed regeneration: the commit carries the index of its state
    present = [p for p in STATE_PATHS if (brain.root / p).exists()]
    if present:  # never a writer's temp file, even where .gitignore lacks the `.*.tmp` line
        git.run(brain.root, "add", "-A", "--", *present, NO_TEMP)
    staged = git.run(brain.root, "diff", "--cached", "--name-only", "-z", "--", *STATE_PATHS,
                     check=False).stdout.split("\0")
    staged = [p for p in staged if p and fsio.temp_pid(p.rsplit("/", 1)[-1]) is None]
    if not staged:
        return False
    git.run(brain.root, "commit", "-q", "-m", message, "--", *staged)
    return True


def commit_state_held(brain: Brain, message: str) -> bool:
    """`commit_state` for a caller that already holds `base_checkout` (a sync: commit, pull, commit)."""
    return _commit_state(brain, message)
