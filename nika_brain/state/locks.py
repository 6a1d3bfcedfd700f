"""Path locks: one YAML per held scope (and owner) in locks/, with holder, TTL and a fencing token.

Mutual exclusion comes from an flock-guarded critical section around "read all locks, check, write";
the lock files are the visible, reviewable record. Fencing tokens come from one monotonic counter in
the state folder, so they strictly increase per scope (and globally).

Takeover rule: a lock may be taken over only when its TTL has passed AND its holder is not known to
be alive. A holder on another host is never judged by a local pid check: there, only the TTL counts.
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.errors import EXIT_REFUSED, BrainError, Busy, Invalid, Refused
from nika_brain.state.scopes import check_scope, normalize_scope, scope_slug, scopes_overlap
from nika_brain.support import clock
from nika_brain.support.schema import MAX_PID, MAX_TTL, MAX_WAIT, F, fields, in_range, short_text
from nika_brain.support.yamlsafe import dumps_fast, load_doc, plain_scalar

MODES = ("exclusive", "shared")
MAX_RENEW = 7 * 86400.0
_WILD_CHARS = re.compile(r"[*?\[]")


def _hostname() -> str:
    import socket  # lazily: the Claude Code hook path pays every import on every tool call
    return socket.gethostname()


def _sha1(data: bytes):
    import hashlib
    return hashlib.sha1(data)


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int | None = None
    started: int | None = None  # process start time in clock ticks since boot (/proc/<pid>/stat)


@dataclass(frozen=True)
class Lock:
    scope: str
    owner: str
    mode: str
    token: int
    acquired: datetime
    expires: datetime
    holder: Holder
    path: Path | None = None

    def expired(self, now: datetime) -> bool:
        return now >= self.expires


# ---- holders ----------------------------------------------------------------------------------

def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of a local process, None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        rest = stat.rsplit(")", 1)[1].split()
        return rest[0], int(rest[19])
    except (OSError, ValueError, IndexError):
        return None


def _start_ticks(pid: int) -> int | None:
    st = _proc_stat(pid)
    return st[1] if st else None


def holder_for(pid: int | None) -> Holder:
    if pid is None:
        return Holder(_hostname())
    return Holder(_hostname(), pid, _start_ticks(pid))


def holder_alive(h: Holder) -> bool | None:
    """True/False for a holder on this host; None when we cannot know (another host, no pid)."""
    if h.host != _hostname() or h.pid is None:
        return None
    try:
        os.kill(h.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    st = _proc_stat(h.pid)
    if st is not None and st[0] in ("Z", "X"):
        return False  # a zombie has exited (only its parent has not reaped it yet): it holds nothing
    if h.started is not None:
        return st is not None and st[1] == h.started  # a reused pid is another process
    return True


def may_take_over(lock: Lock, now: datetime) -> bool:
    return lock.expired(now) and holder_alive(lock.holder) is not True


# ---- files ------------------------------------------------------------------------------------

_SPEC = {
    "scope": F(str, required=True, check=check_scope),
    "mode": F(str, default="exclusive", choices=MODES),
    "owner": F(str, required=True),
    "token": F(int, required=True),
    "acquired": F(str, required=True),
    "expires": F(str, required=True),
    "holder": F(dict, required=True),
}
_HOLDER_SPEC = {"host": F(str, required=True), "pid": F(int), "started": F(int)}


def load_lock(path: Path) -> Lock:
    doc = load_doc(path)
    v = fields(doc, doc.data, (), _SPEC)
    h = fields(doc, v["holder"], ("holder",), _HOLDER_SPEC)
    try:
        acquired, expires = clock.parse(v["acquired"]), clock.parse(v["expires"])
    except BrainError as exc:
        raise doc.error(exc.message, "expires") from exc
    return Lock(scope=normalize_scope(v["scope"]), owner=v["owner"], mode=v["mode"], token=v["token"],
                acquired=acquired, expires=expires, holder=Holder(**h), path=path)


def lock_path(brain: Brain, scope: str, owner: str) -> Path:
    """One file per (scope, owner): several owners may hold one scope in shared mode."""
    scope = normalize_scope(scope)
    digest = _sha1(f"{scope}\0{owner}".encode()).hexdigest()[:12]
    mark = _GLOB_MARK if _WILD_CHARS.search(scope) else ""   # a glob's name must say so (lookups by name)
    return brain.locks_dir / f"{mark}{scope_slug(scope)}-{digest}.yml"


def _dump(lock: Lock) -> str:
    holder: dict[str, str | int] = {"host": lock.holder.host}
    if lock.holder.pid is not None:
        holder["pid"] = lock.holder.pid
    if lock.holder.started is not None:
        holder["started"] = lock.holder.started
    data = {"scope": lock.scope, "mode": lock.mode, "owner": lock.owner, "token": lock.token,
            "acquired": clock.iso(lock.acquired), "expires": clock.iso(lock.expires),
            "holder": holder}
    return dumps_fast(data)


def list_locks(brain: Brain) -> list[Lock]:
    """Every lock file, parsed; an unreadable one raises (callers that guard writes fail closed)."""
    return brain.load_all(brain.locks_dir, load_lock)


# ---- candidate lookups: from the file names, never from a cache ---------------------------------------
# A lock file's name says what it covers: `<slug of its scope>-<12 hex>.yml` (lock_path), and a glob
# scope's file name starts with `+`. So the locks that may overlap a path are found from one listing
# of locks/ (string searches over the names, at C speed), and only those are parsed. Nothing is read
# from .nika/: the index that used to live there (`locks.index`, trusted on the folder's mtime) was a
# file an agent could rewrite to hide a held lock from the hook, from `lock acquire` and from
# `lock status` (issue 24, hole 5); the names cannot lie without moving or removing the lock file
# itself, which only nika-brain's writers do (and which the kernel sandbox forbids). A name of any
# other shape (written by hand, by an older version) is always a candidate: it is parsed.
_GLOB_MARK = "+"
# a name of any other shape than `<plain slug>-<12 hex>.yml` (a glob's `+`, by hand, an older version),
# found over the listing's text in one C-speed pass (each line starts after a newline)
_ODD_NAME = re.compile(r"\n(?![A-Za-z0-9._-]{1,60}-[0-9a-f]{12}\.yml\n)([^.\n][^\n]*\.yml)(?=\n)")
_LEGACY_INDEX = "locks.index"   # an older version's index: its glob lines are read until migrated


def _legacy_globs(brain: Brain) -> list[str]:
    """Lock files an older version's index knew as glob scopes (their names do not say so)."""
    try:
        with open(brain.state_dir / _LEGACY_INDEX, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return []
    wild = text.partition("\n")[2].partition("\t--\n")[0]
    return [line.rpartition("\t")[2] for line in wild.splitlines() if "\t" in line]


class _Names:
    """The listing of locks/ as one text, `\\n<name>` per entry: lookups are str.find over it, and
    only the lock files it lists (`*.yml`, not hidden) are ever named."""

    def __init__(self, names: list[str], extra: Iterable[str] = ()):
        self.names = names
        self.text = "\n" + "\n".join(names) + "\n"
        self.always = set(_ODD_NAME.findall(self.text))  # glob marks and names of any other shape
        self.always.update(n for n in extra if f"\n{n}\n" in self.text)

    def _starting(self, prefix: str, out: set[str]) -> None:
        text, needle = self.text, "\n" + prefix
        at = text.find(needle)
        while at >= 0:
            end = text.find("\n", at + 1)
            out.add(text[at + 1:end])
            at = text.find(needle, end)

    def candidates(self, target: str) -> set[str]:
        """File names of the locks whose scope may overlap `target` (a superset)."""
        target = normalize_scope(target)
        whole = scope_slug(target)
        if target == "." or _WILD_CHARS.search(target) or whole == "root" and target != "root":
            # the whole brain, a glob, or a name all stripped away: every lock
            return {n for n in self.names if n.endswith(".yml") and not n.startswith(".")}
        out = set(self.always)
        self._starting("root-", out)           # the whole brain (and scopes whose slug is all stripped)
        parts = target.rstrip("/").split("/")
        for i in range(1, len(parts)):         # the ancestors: their slug, then the digest
            self._starting(scope_slug("/".join(parts[:i])) + "-", out)
        self._starting(whole, out)             # itself and everything below it (a slug's prefix)
        return {n for n in out if n.endswith(".yml")}   # a slug never starts with '.': no hidden file


def _listing(brain: Brain) -> _Names:
    try:
        names = os.listdir(brain.locks_dir)
    except (FileNotFoundError, NotADirectoryError):
        names = []
    return _Names(names, _legacy_globs(brain))


def _load_named(brain: Brain, names: Iterable[str], target: str | None = None) -> list[Lock]:
    """Parse these lock files (those of `target`'s overlap when given); one released meanwhile is
    skipped, an unreadable one raises."""
    out = []
    for name in sorted(names):
        path = brain.locks_dir / name
        try:
            lk = load_lock(path)
        except BrainError:
            if path.exists():
                raise
            continue  # released since the listing
        if target is None or scopes_overlap(lk.scope, target):
            out.append(lk)
    return out


def overlapping(brain: Brain, target: str, listing: _Names | None = None) -> list[Lock]:
    """The locks whose scope overlaps `target`, parsing only those whose name may (an unreadable one raises)."""
    target = normalize_scope(target)
    listing = _listing(brain) if listing is None else listing
    return _load_named(brain, listing.candidates(target), target)


class LockView:
    """The locks for a Claude Code hook: one listing of locks/ up front, the files whose name says
    nothing (glob scopes, names of another shape) parsed there (an unreadable one raises: the hook
    fails closed), then per-path lookups that parse only the candidates."""

    def __init__(self, brain: Brain):
        self.brain = brain
        self.listing = _listing(brain)
        _load_named(brain, self.listing.always)

    def covering(self, rel: str) -> list[Lock]:
        try:
            return overlapping(self.brain, rel, self.listing)
        except BrainError as exc:  # fail closed: an unreadable record that may cover rel holds it
            far = clock.now() + timedelta(days=3650)
            return [Lock(normalize_scope(rel), f"<unreadable lock file: {exc}>", "exclusive", 0, far, far,
                         Holder("?"))]

    def __iter__(self):
        return iter(list_locks(self.brain))


def _migrate_legacy(brain: Brain) -> None:
    """Under the locks mutex: give the glob locks an older version wrote their marked name, then drop
    its index (read until then for exactly those files)."""
    legacy = brain.state_dir / _LEGACY_INDEX
    if not legacy.exists():
        return
    for lk in list_locks(brain):
        if lk.path is None or not _WILD_CHARS.search(lk.scope):
            continue
        canonical = lock_path(brain, lk.scope, lk.owner)
        if lk.path != canonical and not canonical.exists():
            os.replace(lk.path, canonical)
    legacy.unlink(missing_ok=True)


_MAX_TOKEN_DIGITS = 18   # a token fits a signed 64-bit integer, everywhere it is stored (YAML, Redis)


def _read_counter(raw: bytes, where: Path) -> int:
    """A counter's number; anything but a non-negative decimal of at most 18 digits is corrupt (a
    negative or huge number would send tokens back or past what any reader can store)."""
    text = raw.strip()
    if not text:
        return 0
    if not text.isdigit() or len(text.lstrip(b"0")) > _MAX_TOKEN_DIGITS:
        raise BrainError(f"fencing counter {where} is corrupt ({raw[:20]!r}); delete it: the next token is "
                         "then computed from the lock files, git history and the counter's copy in .git")
    return int(text)


def _git_dir_counter(brain: Brain) -> Path | None:
    """Where the counter's copy lives outside the state folder: `<git common dir>/nika-fencing`, so a
    wiped `.nika/` does not take the high-water mark with it (None when the brain has no .git)."""
    dot_git = brain.root / ".git"
    if dot_git.is_dir():
        return dot_git / "nika-fencing"
    try:
        first = dot_git.read_text(encoding="utf-8").split("\n", 1)[0]
    except (OSError, UnicodeError):
        return None
    if not first.startswith("gitdir:"):
        return None
    git_dir = (brain.root / first[len("gitdir:"):].strip()).resolve()
    try:  # a worktree: its common dir holds the shared copy
        common = (git_dir / "commondir").read_text(encoding="utf-8").strip()
        git_dir = (git_dir / common).resolve()
    except (OSError, UnicodeError):
        pass
    return git_dir / "nika-fencing"


def _bump_copy(path: Path | None, token: int) -> int:
    """Raise the copy in .git to `token` (never lower it); returns the copy's value before."""
    if path is None:
        return 0
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return 0   # a read-only .git: the state folder's counter and git history still bound tokens
    try:
        raw = os.pread(fd, 64, 0).strip()
        before = int(raw) if raw.isdigit() and len(raw) <= _MAX_TOKEN_DIGITS else 0
        if token > before:
            text = str(token).encode()
            os.pwrite(fd, text, 0)   # never shorter than before: no stale tail to truncate
            if len(raw) > len(text):
                os.ftruncate(fd, len(text))
        return before
    finally:
        os.close(fd)


def _next_token(brain: Brain, seen: int) -> int:
    """Next fencing token, above the counter and above `seen` (the highest token on disk).

    Called under the locks mutex. The counter must never go back, even if the state folder was
    wiped: hence `seen`, and a copy of the counter in the git directory (`.git/nika-fencing`, out of
    reach of an `rm -rf .nika`), raised with every token; when the counter is missing, the next token
    is above that copy, every lock file and every token in git history. The counter is rewritten in
    place: the new number is never shorter than the old one, so one small pwrite covers it, and a
    write within one page is all-or-nothing for a killed process (a fresh or non-canonical counter
    gets an atomic rename instead).
    """
    counter = brain.state_dir / "fencing"
    counter.parent.mkdir(parents=True, exist_ok=True)
    copy = _git_dir_counter(brain)
    try:   # never created empty: a missing counter is written whole by an atomic rename below
        fd = os.open(counter, os.O_RDWR)
    except FileNotFoundError:
        fd = -1
    try:
        raw = os.pread(fd, 64, 0) if fd >= 0 else b""
        current = _read_counter(raw, counter)
        if raw.strip():
            token = max(current, seen) + 1
            _bump_copy(copy, token)
        else:
            # No counter: a new clone or a wiped state folder. The copy in .git, every token on disk
            # and in git bound it.
            floor = max(seen, _git_floor(brain), max((lk.token for lk in list_locks(brain)), default=0))
            token = max(floor, _bump_copy(copy, 0)) + 1
            _bump_copy(copy, token)
        if raw and raw == str(current).encode():
            # No fsync: the counter only has to survive a killed process (the page cache does);
            # after a power loss every holder is dead anyway, and `seen` keeps tokens above disk.
            os.pwrite(fd, str(token).encode(), 0)
            return token
    finally:
        if fd >= 0:
            os.close(fd)
    brain.write(counter, str(token))
    return token


def _git_floor(brain: Brain) -> int:
    """The highest fencing token git has ever seen in locks/ (0 when none, or no git).

    Read only when the local counter is missing (a new clone, a wiped state folder): lock files are
    committed with the state, so their history bounds every token handed out before the wipe.
    """
    import re
    import subprocess
    try:
        out = subprocess.run(["git", "-C", str(brain.root), "log", "--all", "-p", "--format=",
                              "--no-color", "--no-ext-diff", "--", "locks/"],
                             check=False, capture_output=True, timeout=60).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        return 0
    return max((int(m) for m in re.findall(r"^[-+]token: (\d{1,18})\s*$", out, re.MULTILINE)), default=0)


# ---- operations -------------------------------------------------------------------------------

def conflicts(brain: Brain, scope: str, owner: str, mode: str = "exclusive",
              now: datetime | None = None) -> list[Lock]:
    """Live locks of other owners that stand in the way of `scope` in `mode`."""
    now = now or clock.now()
    out = []
    for lk in list_locks(brain):
        if lk.owner == owner or not scopes_overlap(lk.scope, scope):
            continue
        if mode == "shared" and lk.mode == "shared":
            continue
        if not may_take_over(lk, now):
            out.append(lk)
    return out


def _try_acquire(brain: Brain, scope: str, owner: str, mode: str, ttl: float, pid: int | None,
                 now: datetime) -> Lock | list[Lock]:
    with brain.mutex("locks"):
        blocking: list[Lock] = []
        stale: list[Lock] = []
        mine, seen = None, 0
        _migrate_legacy(brain)
        for lk in overlapping(brain, scope):   # not every lock: those whose name may overlap
            seen = max(seen, lk.token)
            if lk.owner == owner:
                if lk.scope == scope:
                    mine = lk
                continue
            if mode == "shared" and lk.mode == "shared":
                continue
            (stale if may_take_over(lk, now) else blocking).append(lk)
        if blocking:
            return blocking
        for lk in stale:
            if lk.path is not None:
                os.unlink(lk.path)
        token = mine.token if mine else _next_token(brain, seen)
        acquired = mine.acquired if mine else now
        path = mine.path if mine and mine.path else lock_path(brain, scope, owner)
        # Re-acquiring without a pid keeps the holder's process: a lock a live process protects must
        # not silently become TTL-only.
        holder = mine.holder if mine is not None and pid is None else holder_for(pid)
        lock = Lock(scope, owner, mode, token, acquired, now + timedelta(seconds=ttl), holder, path)
        brain.write(path, _dump(lock))
        return lock


def describe(lk: Lock) -> str:
    who = f"{lk.holder.host}:{lk.holder.pid}" if lk.holder.pid else lk.holder.host
    if lk.expired(clock.now()) and holder_alive(lk.holder):
        return (f"{lk.scope} held by {lk.owner} ({who}, token {lk.token}, expired {clock.iso(lk.expires)} "
                f"but still held: its holder process {lk.holder.pid} is alive)")
    return f"{lk.scope} held by {lk.owner} ({who}, token {lk.token}, expires {clock.iso(lk.expires)})"


def acquire(brain: Brain, scope: str, owner: str, *, mode: str = "exclusive", ttl: float | None = None,
            wait: float = 0.0, poll: float | None = None, pid: int | None = -1,
            now: datetime | None = None) -> Lock:
    """Take `scope` for `owner`, waiting up to `wait` seconds; raise BrainError(EXIT_BUSY) if held.

    `pid` names the holder process (default: this one; None: no process, only the TTL protects it).
    Re-acquiring a scope one already holds renews it and keeps its token.
    """
    if mode not in MODES:
        raise Invalid(f"lock mode must be one of {', '.join(MODES)}")
    if not owner or not owner.strip():
        raise Invalid("a lock needs an owner (a claim id)")
    short_text(owner, "lock owner")
    scope = normalize_scope(scope)
    ttl = in_range(brain.config.lock_ttl if ttl is None else ttl, "ttl", 0, MAX_TTL, lo_open=True)
    poll = in_range(brain.config.lock_poll if poll is None else poll, "poll", 0, 3600, lo_open=True)
    wait = in_range(wait, "wait", 0, MAX_WAIT)
    pid = os.getpid() if pid == -1 else pid
    if pid is not None:
        in_range(pid, "pid", 1, MAX_PID)
    deadline = time.monotonic() + wait
    while True:
        result = _try_acquire(brain, scope, owner, mode, ttl, pid, now or clock.now())
        if isinstance(result, Lock):
            return result
        if time.monotonic() >= deadline:
            raise Busy("scope busy: " + "; ".join(describe(lk) for lk in result))
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())) or poll)


def _owned(brain: Brain, scope: str, owner: str) -> Lock:
    """The lock of `owner` on exactly `scope` (under the locks mutex); refuse anyone else."""
    path = lock_path(brain, scope, owner)
    if path.exists():
        lk = load_lock(path)
        if lk.owner == owner and lk.scope == scope:
            return lk
    # Not under its usual name (written by hand, or by an older version): look at every lock.
    held = [lk for lk in overlapping(brain, scope) if lk.scope == scope]
    for lk in held:
        if lk.owner == owner:
            return lk
    if held:
        owners = ", ".join(lk.owner for lk in held)
        raise Refused(f"refused: {scope} is held by {owners}, not {owner}")
    raise BrainError(f"no lock held on {scope}")


def _plainly_owned(path: Path, scope: str, owner: str) -> bool:
    """Cheap check that the file at `owner`'s own lock path says this scope and owner, in the exact
    text `_dump` writes; anything less plain goes through the full parse in `_owned`."""
    s, o = plain_scalar(scope), plain_scalar(owner)
    if s is None or o is None:
        return False
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(4096)
    except (OSError, UnicodeDecodeError):
        return False
    return text.startswith(f"scope: {s}\n") and f"\nowner: {o}\n" in text


def release(brain: Brain, scope: str, owner: str, *, missing_ok: bool = False) -> bool:
    scope = normalize_scope(scope)
    short_text(owner, "lock owner")
    with brain.mutex("locks"):
        _migrate_legacy(brain)
        path = lock_path(brain, scope, owner)
        if _plainly_owned(path, scope, owner):
            os.unlink(path)
        else:
            try:
                lk = _owned(brain, scope, owner)
            except BrainError as exc:
                if missing_ok and exc.exit_code != EXIT_REFUSED:
                    return False
                raise
            path = lk.path or path
            os.unlink(path)
        return True


def renew(brain: Brain, scope: str, owner: str, *, ttl: float | None = None,
          now: datetime | None = None) -> Lock:
    scope = normalize_scope(scope)
    now = now or clock.now()
    # A renewal keeps a lock for at most a week more (a century-long renewal is a lock taken for ever).
    ttl = in_range(brain.config.lock_ttl if ttl is None else ttl, "ttl", 0,
                   max(MAX_RENEW, brain.config.lock_ttl), lo_open=True)
    short_text(owner, "lock owner")
    with brain.mutex("locks"):
        _migrate_legacy(brain)
        lk = _owned(brain, scope, owner)
        target = lk.path or lock_path(brain, lk.scope, lk.owner)
        new = Lock(lk.scope, lk.owner, lk.mode, lk.token, lk.acquired, now + timedelta(seconds=ttl),
                   lk.holder, target)
        brain.write(target, _dump(new))
        return new


def release_all(brain: Brain, owner: str) -> list[str]:
    """Release every lock of `owner` (used when a step ends or on crash recovery)."""
    released = []
    with brain.mutex("locks"):
        _migrate_legacy(brain)
        for lk in list_locks(brain):
            if lk.owner == owner and lk.path is not None:
                os.unlink(lk.path)
                released.append(lk.scope)
    return released
