"""Path locks: one YAML per held scope in locks/, with owner, holder, TTL and a fencing token.

Mutual exclusion comes from an flock-guarded critical section around "read all locks, check, write";
the lock files are the visible, reviewable record. Fencing tokens come from one monotonic counter in
the state folder, so they strictly increase per scope (and globally).

Takeover rule: a lock may be taken over only when its TTL has passed AND its holder is not known to
be alive. A holder on another host is never judged by a local pid check: there, only the TTL counts.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from . import clock
from .brain import Brain
from .errors import EXIT_BUSY, EXIT_REFUSED, BrainError
from .schema import F, fields
from .yamlsafe import dumps, load_doc

MODES = ("exclusive", "shared")
_WILD = re.compile(r"[*?\[]")


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


# ---- scopes -----------------------------------------------------------------------------------

def normalize_scope(scope: str) -> str:
    """Brain-relative posix form; a folder keeps its trailing '/'; '.' or '' is the whole brain."""
    s = str(scope).strip().replace("\\", "/")
    if not s or s in (".", "./", "/"):
        return "."
    if s.startswith("/") or s.startswith("../") or "/../" in s or s == "..":
        raise BrainError(f"scope must be a path inside the brain, got {scope!r}")
    folder = s.endswith("/")
    parts = [p for p in s.split("/") if p not in ("", ".")]
    if not parts:
        return "."
    return "/".join(parts) + ("/" if folder else "")


def _segments(scope: str) -> list[str]:
    return [] if scope == "." else [p for p in scope.split("/") if p]


def scopes_overlap(a: str, b: str) -> bool:
    """True when some path could fall under both scopes.

    A scope covers itself and everything below it (`src` and `src/` cover `src/a.py`). Globs are
    compared segment by segment; where two wildcards meet we assume an overlap (safe side).
    """
    sa, sb = _segments(normalize_scope(a)), _segments(normalize_scope(b))
    for x, y in zip(sa, sb):
        if x == "**" or y == "**":
            return True
        wx, wy = bool(_WILD.search(x)), bool(_WILD.search(y))
        if not wx and not wy:
            if x != y:
                return False
        elif wx and not wy:
            if not fnmatch.fnmatchcase(y, x):
                return False
        elif wy and not wx:
            if not fnmatch.fnmatchcase(x, y):
                return False
    return True  # one ran out: it is an ancestor (or equal) of the other


def covers(scope: str, path: str) -> bool:
    """True when a concrete brain-relative `path` lies inside `scope`."""
    return (len(_segments(normalize_scope(scope))) <= len(_segments(normalize_scope(path)))
            and scopes_overlap(scope, path))


# ---- holders ----------------------------------------------------------------------------------

def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def holder_for(pid: int | None) -> Holder:
    if pid is None:
        return Holder(socket.gethostname())
    return Holder(socket.gethostname(), pid, _start_ticks(pid))


def holder_alive(h: Holder) -> bool | None:
    """True/False for a holder on this host; None when we cannot know (another host, no pid)."""
    if h.host != socket.gethostname() or h.pid is None:
        return None
    try:
        os.kill(h.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if h.started is not None:
        return _start_ticks(h.pid) == h.started  # a reused pid is another process
    return True


def may_take_over(lock: Lock, now: datetime) -> bool:
    return lock.expired(now) and holder_alive(lock.holder) is not True


# ---- files ------------------------------------------------------------------------------------

_SPEC = {
    "scope": F(str, required=True),
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
    return Lock(normalize_scope(v["scope"]), v["owner"], v["mode"], v["token"], acquired, expires,
                Holder(**h), path)


def lock_path(brain: Brain, scope: str) -> Path:
    scope = normalize_scope(scope)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", scope).strip("_")[:60] or "root"
    digest = hashlib.sha1(scope.encode()).hexdigest()[:8]
    return brain.locks_dir / f"{slug}-{digest}.yml"


def _dump(lock: Lock) -> str:
    holder = {"host": lock.holder.host}
    if lock.holder.pid is not None:
        holder["pid"] = lock.holder.pid
    if lock.holder.started is not None:
        holder["started"] = lock.holder.started
    return dumps({"scope": lock.scope, "mode": lock.mode, "owner": lock.owner, "token": lock.token,
                  "acquired": clock.iso(lock.acquired), "expires": clock.iso(lock.expires),
                  "holder": holder})


def list_locks(brain: Brain) -> list[Lock]:
    """Every lock file, parsed; an unreadable one raises (callers that guard writes fail closed)."""
    return [load_lock(p) for p in brain.iter_yaml(brain.locks_dir)]


def _next_token(brain: Brain) -> int:
    counter = brain.state_dir / "fencing"
    try:
        current = int(counter.read_text() or 0)
    except FileNotFoundError:
        current = 0
    except ValueError as exc:
        raise BrainError(f"fencing counter {counter} is corrupt") from exc
    # The counter must never go back, even if the state folder was wiped: take the max seen on disk.
    for lk in list_locks(brain):
        current = max(current, lk.token)
    token = current + 1
    brain.write(counter, str(token))
    return token


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
        blocking, stale, mine = [], [], None
        for lk in list_locks(brain):
            if not scopes_overlap(lk.scope, scope):
                continue
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
        token = mine.token if mine else _next_token(brain)
        acquired = mine.acquired if mine else now
        lock = Lock(scope, owner, mode, token, acquired, now + timedelta(seconds=ttl), holder_for(pid),
                    lock_path(brain, scope))
        brain.write(lock.path, _dump(lock))
        return lock


def describe(lk: Lock) -> str:
    who = f"{lk.holder.host}:{lk.holder.pid}" if lk.holder.pid else lk.holder.host
    return f"{lk.scope} held by {lk.owner} ({who}, token {lk.token}, expires {clock.iso(lk.expires)})"


def acquire(brain: Brain, scope: str, owner: str, *, mode: str = "exclusive", ttl: float | None = None,
            wait: float = 0.0, poll: float | None = None, pid: int | None = -1,
            now: datetime | None = None) -> Lock:
    """Take `scope` for `owner`, waiting up to `wait` seconds; raise BrainError(EXIT_BUSY) if held.

    `pid` names the holder process (default: this one; None: no process, only the TTL protects it).
    Re-acquiring a scope one already holds renews it and keeps its token.
    """
    if mode not in MODES:
        raise BrainError(f"lock mode must be one of {', '.join(MODES)}")
    if not owner or not owner.strip():
        raise BrainError("a lock needs an owner (a claim id)")
    scope = normalize_scope(scope)
    ttl = brain.config.lock_ttl if ttl is None else ttl
    poll = brain.config.lock_poll if poll is None else poll
    pid = os.getpid() if pid == -1 else pid
    deadline = time.monotonic() + wait
    while True:
        result = _try_acquire(brain, scope, owner, mode, ttl, pid, now or clock.now())
        if isinstance(result, Lock):
            return result
        if time.monotonic() >= deadline:
            raise BrainError("scope busy: " + "; ".join(describe(lk) for lk in result), EXIT_BUSY)
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())) or poll)


def release(brain: Brain, scope: str, owner: str, *, missing_ok: bool = False) -> bool:
    scope = normalize_scope(scope)
    path = lock_path(brain, scope)
    with brain.mutex("locks"):
        if not path.exists():
            if missing_ok:
                return False
            raise BrainError(f"no lock held on {scope}")
        lk = load_lock(path)
        if lk.owner != owner:
            raise BrainError(f"refused: {scope} is held by {lk.owner}, not {owner}", EXIT_REFUSED)
        os.unlink(path)
        return True


def renew(brain: Brain, scope: str, owner: str, *, ttl: float | None = None,
          now: datetime | None = None) -> Lock:
    scope = normalize_scope(scope)
    path = lock_path(brain, scope)
    now = now or clock.now()
    ttl = brain.config.lock_ttl if ttl is None else ttl
    with brain.mutex("locks"):
        if not path.exists():
            raise BrainError(f"no lock held on {scope}")
        lk = load_lock(path)
        if lk.owner != owner:
            raise BrainError(f"refused: {scope} is held by {lk.owner}, not {owner}", EXIT_REFUSED)
        new = Lock(lk.scope, lk.owner, lk.mode, lk.token, lk.acquired, now + timedelta(seconds=ttl),
                   lk.holder, path)
        brain.write(path, _dump(new))
        return new


def release_all(brain: Brain, owner: str) -> list[str]:
    """Release every lock of `owner` (used when a step ends or on crash recovery)."""
    released = []
    with brain.mutex("locks"):
        for lk in list_locks(brain):
            if lk.owner == owner and lk.path is not None:
                os.unlink(lk.path)
                released.append(lk.scope)
    return released
