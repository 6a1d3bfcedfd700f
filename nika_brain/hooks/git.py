"""What each git hook does when git runs it (`<python> -m nika_brain githook <name>`).

  pre-commit     validate the staged content of brain files; refuse a commit touching a path that
                 another owner holds under a live exclusive lock; regenerate + stage BRAIN-INDEX.md
                 when state files are staged
  post-merge     regenerate BRAIN-INDEX.md (main worktree only: a theme worktree is not the state)
  post-checkout  idem
  post-rewrite   idem

`__main__` dispatches here without importing the CLI framework: a commit pays only for what the hook
needs (PyYAML and the loaders; Jinja2 only when the index must be regenerated). Installing the hooks
is nika_brain.gitrepo.githooks.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nika_brain.brain import CONFIG_NAME, INDEX_FILE, INDEX_INPUTS, Brain, _main_worktree, is_state_path
from nika_brain.errors import BrainError
from nika_brain.gitrepo.githooks import HOOKS

INDEX_PREFIXES = tuple(f"{d}/" for d in INDEX_INPUTS)
INDEX_FILES = (CONFIG_NAME, INDEX_FILE)


def _err(message: str) -> None:
    print(f"nika-brain: {message}", file=sys.stderr)


def _git(*args: str, input: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", *args], input=input, capture_output=True)
    if proc.returncode != 0:
        msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise BrainError(f"git {args[0]} failed: {msg[-1] if msg else 'exit ' + str(proc.returncode)}")
    return proc.stdout


def staged_changes() -> list[tuple[str, str]]:
    """(status letter, path) of every change staged for this commit (the index git is committing)."""
    raw = _git("diff", "--cached", "--name-status", "-z", "--no-renames")
    fields = raw.split(b"\0")
    out = []
    for i in range(0, len(fields) - 1, 2):
        out.append((fields[i].decode("ascii", "replace")[:1], os.fsdecode(fields[i + 1])))
    return out


def staged_blobs(paths: list[str]) -> list[tuple[str, bytes]]:
    """The staged content of `paths`, read from the index in one `git cat-file --batch`."""
    usable = [p for p in paths if "\n" not in p]
    if not usable:
        return []
    raw = _git("cat-file", "--batch", input=b"".join(b":" + os.fsencode(p) + b"\n" for p in usable))
    out, pos = [], 0
    for p in usable:
        nl = raw.index(b"\n", pos)
        header = raw[pos:nl].split()
        pos = nl + 1
        if len(header) != 3:  # "<name> missing": not in the index after all
            continue
        size = int(header[2])
        out.append((p, raw[pos:pos + size]))
        pos += size + 1
    return out


def _is_state(path: str) -> bool:
    # A lock on a scope never applies to the state folders: the tools that update state while a
    # scope is locked must still be able to commit it.
    return is_state_path(path)


def _feeds_index(path: str, brain: Brain) -> bool:
    if path.startswith(INDEX_PREFIXES) or path in INDEX_FILES:
        return True
    return bool(brain.config.index_template) and path == brain.config.index_template


def lock_conflicts(state_brain: Brain, paths: list[str], owner: str | None) -> list[tuple[str, object]]:
    """(path, lock) for each path covered by a live exclusive lock of someone other than `owner`.

    Any lock file that cannot be read raises: the caller refuses the commit (fail closed).
    """
    from nika_brain.state import scopes
    from nika_brain.state.validate import load
    from nika_brain.support import clock
    folder = state_brain.locks_dir
    # Every *.yml, hidden ones included: a lock the listing would miss must still guard (fail closed).
    files = sorted(p for p in folder.iterdir() if p.suffix == ".yml") if folder.is_dir() else []
    held = [lk for lk in (load("lock", p) for p in files) if lk.mode == "exclusive" and lk.owner != owner]
    from nika_brain.state import leasemirror
    if leasemirror.enabled(state_brain):  # other machines' locks; a mirror that cannot say refuses
        held += [lk for lk in leasemirror.read(state_brain) if lk.mode == "exclusive" and lk.owner != owner]
    if not held:
        return []
    now = clock.now()
    live = [lk for lk in held if not lk.expired(now)]
    out = []
    for path in paths:
        for lk in live:
            if scopes.covers(lk.scope, path):
                out.append((path, lk))
                break
    return out


def committer(brain: Brain, hint: str | None) -> str | None:
    """The claim this commit is made as, from the session, never from the environment alone: the claim
    of the door this process's session reaches (`$NIKA_DOOR`: the door answers only its session's
    process tree, with its own claim), else `$NIKA_CLAIM` when this process holds the operator's key
    (the operator's shell, or nika-brain committing a claim's work), else none. Asked only when a
    lock covers what is committed: an ordinary commit pays for no key."""
    from nika_brain.bus import door
    if door.claim_door() is not None:
        return door.session_claim()   # a session with a door is its claim, or none
    if hint is None:
        return None
    from nika_brain.state import authority
    return hint if authority.available(brain) else None


def pre_commit(top: Path) -> int:
    if not (top / CONFIG_NAME).is_file():
        return 0  # not a brain (or the brain sits elsewhere): nothing for us to check
    from nika_brain.state.validate import kind_of, validate_blobs
    changes = staged_changes()
    if not changes:
        return 0

    # 1. The staged content of brain files must load.
    present = [p for st, p in changes if st != "D" and kind_of(p)]
    if present:
        report = validate_blobs(top, staged_blobs(present))
        if report.problems:
            for problem in report.problems:
                print(str(problem), file=sys.stderr)
            again = os.environ.get("NIKA_COMMAND")  # the nika-brain command that is committing
            _err(f"commit refused: {len(report.problems)} problem(s) in staged brain files "
                 + (f"({', '.join(sorted({str(p.file) for p in report.problems if p.file}))}; fix them, then "
                    f"run `{again}` again)" if again else
                    "(fix them, or `git commit --no-verify` to skip the hooks)"))
            return 1

    # 2. Nobody commits into a scope another claim holds exclusively.
    touched = sorted({p for _, p in changes if not _is_state(p)})
    if touched:
        if os.environ.get("NIKA_LOCK_OVERRIDE") == "1":
            # Committing over another claim's lock is the operator's decision: the variable alone
            # is not enough (an agent can set it), this process must hold the operator key.
            from nika_brain.state import authority
            try:
                authority.require(Brain.find(top), "committing over a lock (NIKA_LOCK_OVERRIDE=1)")
            except BrainError as exc:
                _err(f"commit refused: {exc}")
                return 1
        else:
            hint = os.environ.get("NIKA_CLAIM") or None
            try:
                state_brain = Brain.find(top)
                conflicts = lock_conflicts(state_brain, touched, None)
                owner = committer(state_brain, hint) if conflicts else None
            except BrainError as exc:
                _err(f"commit refused: cannot check locks: {exc}")
                _err("fix the lock file, or commit anyway with `NIKA_LOCK_OVERRIDE=1 git commit ...` "
                     "(`git commit --no-verify` skips every hook)")
                return 1
            conflicts = [(path, lk) for path, lk in conflicts if owner is None or lk.owner != owner]
            if conflicts:
                who = (f"claim {owner}" if owner else
                       f"not claim {hint}: $NIKA_CLAIM is not proof without the claim's door (`nika-brain claude "
                       f"start {hint}`) or the operator's key" if hint else
                       "a human without a claim (NIKA_CLAIM unset)")
                for path, lk in conflicts:
                    _err(f"{path}: locked exclusively by {lk.owner} (scope {lk.scope}, token {lk.token}, "
                         f"expires {_iso(lk.expires)})")
                again = os.environ.get("NIKA_COMMAND")
                _err(f"commit refused: you are {who}. To commit anyway: "
                     + (f"`NIKA_LOCK_OVERRIDE=1 {again}` (an operator's override)" if again else
                        "`NIKA_LOCK_OVERRIDE=1 git commit ...` (or `git commit --no-verify` to skip every hook)"))
                return 1

    # 3. State staged: the index follows in the same commit.
    tree_brain = Brain.at(top)
    if any(_feeds_index(p, tree_brain) for _, p in changes):
        from nika_brain.engine import index
        index.regenerate(tree_brain, strict=True)  # a commit's index tells the whole state
        _git("add", "--", tree_brain.index_path.name)
        _also_stage_in_real_index(tree_brain.index_path.name)
    return 0


def _also_stage_in_real_index(name: str) -> None:
    """`git commit -- <paths>` commits a temporary index (next-index-*.lock) while the real one waits,
    locked, in index.lock to replace .git/index afterwards. Staging the index in the temporary one only
    would leave the real index holding the old BRAIN-INDEX.md (a spurious staged revert in `git
    status`), so stage it there too. Best effort: when git's layout is not the one expected, skip.
    """
    current = os.environ.get("GIT_INDEX_FILE", "")
    if not os.path.basename(current).startswith("next-index-"):
        return
    pending = Path(current).parent / "index.lock"
    if not pending.is_file():
        return
    proc = subprocess.run(["git", "add", "--", name], capture_output=True,
                          env=dict(os.environ, GIT_INDEX_FILE=str(pending)))
    if proc.returncode != 0:
        _err("note: BRAIN-INDEX.md is committed but stays unstaged in the index: "
             f"run `git add {name}`")


def _iso(dt) -> str:
    from nika_brain.support import clock
    return clock.iso(dt)


def post_update(top: Path) -> int:
    """After git moved the tree: regenerate the index in the main worktree of a brain."""
    if not (top / CONFIG_NAME).is_file():
        return 0
    here = top.resolve()
    if _main_worktree(here) != here:
        return 0  # a linked (theme) worktree: the live state is the main worktree's (its config not read)
    try:
        from nika_brain.engine import index
        index.regenerate(Brain.at(top), strict=True)
    except BrainError as exc:
        _err(f"BRAIN-INDEX.md not regenerated: {exc}")
    return 0  # git ignores these hooks' status; never make a merge look failed


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in HOOKS:
        _err(f"githook: expected one of {', '.join(HOOKS)}")
        return 2
    top = Path(os.getcwd())  # git runs hooks at the top of the worktree
    try:
        if argv[0] == "pre-commit":
            return pre_commit(top)
        return post_update(top)
    except BrainError as exc:
        _err(str(exc))
        return 1
    except KeyboardInterrupt:
        return 130
