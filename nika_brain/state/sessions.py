"""Which Claude Code session is which: session id -> kernel and claim, plus its live record.

One small JSON file per session under the brain's git-ignored state folder,
`.nika/sessions/<session_id>.json`. It changes on every heartbeat and touched file, so it stays out
of git (docs/ARCHITECTURE.md: runtime state lives in .nika/). Each change is a read-modify-write under
the brain's "sessions" mutex, written atomically: hooks of one session run in parallel (several
PostToolUse at once) and must not lose each other's updates.

Keys this module does not know are kept on every update, so the federation layer can store its own
(handover, spawn) in the same record without a schema change here.
"""
from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, NamedTuple

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.support import clock

# Claude session ids are UUIDs; anything path-like must never reach the file system.
_SID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class Session(NamedTuple):
    """Read-only view of a session record (a NamedTuple: every hook creates this class, and a frozen
    dataclass costs ~0.7 ms to create)."""

    id: str
    kernel: str | None = None
    claim: str | None = None
    started_at: str | None = None
    source: str | None = None           # startup / resume / clear / compact, as SessionStart said
    cwd: str | None = None
    transcript_path: str | None = None
    heartbeat_at: str | None = None
    context_used: int | None = None
    context_window: int | None = None
    context_pct: float | None = None
    touched: tuple[str, ...] = ()
    seen_directives: tuple[str, ...] = ()
    ended_at: str | None = None
    end_reason: str | None = None
    lineage: tuple[str, ...] = ()       # predecessor kernels (nearest first) this session may read
    # Where context_window came from: claude (what Claude Code reported: the status line's
    # context_window_size, or a headless result's modelUsage.contextWindow), kernel (kernel.yml
    # context_window), brain (nika-brain.yml context_window) or model (guessed from its name/usage).
    context_window_source: str | None = None
    reported_window: int | None = None   # the last window Claude Code reported for this session


def valid_id(session_id: object) -> bool:
    return isinstance(session_id, str) and bool(_SID.match(session_id)) and ".." not in session_id


def _check(session_id: str) -> str:
    if not valid_id(session_id):
        raise BrainError(f"invalid session id {session_id!r}")
    return session_id


def sessions_dir(brain: Brain) -> Path:
    return brain.state_dir / "sessions"


def session_path(brain: Brain, session_id: str) -> Path:
    return sessions_dir(brain) / f"{_check(session_id)}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise BrainError(f"unreadable session record: {exc}", file=str(path)) from exc
    if not isinstance(data, dict):
        raise BrainError("session record is not a JSON object", file=str(path))
    return data


def _view(session_id: str, data: dict[str, Any]) -> Session:
    def s(key: str) -> str | None:
        v = data.get(key)
        return v if isinstance(v, str) and v else None

    def n(key: str) -> Any:
        v = data.get(key)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def strs(key: str) -> tuple[str, ...]:
        v = data.get(key)
        return tuple(x for x in v if isinstance(x, str)) if isinstance(v, list) else ()

    pct = n("context_pct")
    return Session(session_id, s("kernel"), s("claim"), s("started_at"), s("source"), s("cwd"),
                   s("transcript_path"), s("heartbeat_at"), n("context_used"),
                   n("context_window"), float(pct) if pct is not None else None,
                   strs("touched"), strs("seen_directives"), s("ended_at"), s("end_reason"),
                   strs("lineage"), s("context_window_source"), n("reported_window"))


def load(brain: Brain, session_id: str) -> Session | None:
    """The session's record, or None when this session was never bound."""
    data = _read(session_path(brain, session_id))
    return _view(session_id, data) if data else None


def raw(brain: Brain, session_id: str) -> dict[str, Any]:
    """The record as stored, including keys other modules added (empty when none)."""
    return _read(session_path(brain, session_id))


def update(brain: Brain, session_id: str, change: Callable[[dict[str, Any]], Any]) -> Session:
    """Apply `change` to the stored record (in place) under the mutex and write it back atomically."""
    path = session_path(brain, session_id)
    with brain.mutex("sessions"):
        data = _read(path)
        change(data)
        data["id"] = session_id
        brain.write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return _view(session_id, data)


def bind(brain: Brain, session_id: str, *, kernel: str | None, claim: str | None,
         source: str | None = None, cwd: str | None = None, transcript_path: str | None = None,
         lineage: list[str] | None = None, now: datetime | None = None) -> Session:
    """Record who this session is. A resumed or compacted session keeps its earlier binding for
    what the caller does not name (the environment may be gone on resume)."""
    when = clock.iso(now or clock.now())

    def change(data: dict[str, Any]) -> None:
        for key, value in (("kernel", kernel), ("claim", claim), ("source", source), ("cwd", cwd),
                           ("transcript_path", transcript_path)):
            if value:
                data[key] = value
        if lineage is not None:
            data["lineage"] = list(lineage)
        data.setdefault("started_at", when)
        # A session that starts again (resume) is alive again.
        data.pop("ended_at", None)
        data.pop("end_reason", None)

    return update(brain, session_id, change)


def heartbeat(brain: Brain, session_id: str, *, used: int | None, window: int | None,
              pct: float | None, event: str | None = None, now: datetime | None = None,
              window_source: str | None = None) -> Session:
    when = clock.iso(now or clock.now())

    def change(data: dict[str, Any]) -> None:
        data["heartbeat_at"] = when
        if event:
            data["heartbeat_event"] = event
        if used is not None:
            data["context_used"], data["context_window"], data["context_pct"] = used, window, pct
            if window_source:
                data["context_window_source"] = window_source

    return update(brain, session_id, change)


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def report_window(brain: Brain, session_id: str, window: int) -> Session:
    """Record the context window Claude Code reported for this session; the last measured use is
    re-expressed against it at once."""
    def change(data: dict[str, Any]) -> None:
        data["reported_window"] = window
        used = _positive_int(data.get("context_used"))
        if used is not None:
            data["context_window"], data["context_window_source"] = window, "claude"
            data["context_pct"] = round(used * 100.0 / window, 1)

    return update(brain, session_id, change)


def record_result(brain: Brain, result: dict[str, Any]) -> Session | None:
    """Take what a headless run's final `result` line reports (`claude -p --output-format json` or
    stream-json): the model's context window. None when it names no session or window."""
    sid = result.get("session_id") if isinstance(result, dict) else None
    usage = result.get("modelUsage") if isinstance(result, dict) else None
    if not valid_id(sid) or not isinstance(usage, dict):
        return None
    found = (_positive_int(u.get("contextWindow")) for u in usage.values() if isinstance(u, dict))
    windows = [w for w in found if w]
    if not windows or not isinstance(sid, str):
        return None
    return report_window(brain, sid, max(windows))


def choose_window(brain: Brain, record: Session | None, kernel: str | None) -> tuple[int | None, str]:
    """The window to measure context use against, and where it came from: what Claude Code
    reported, else the kernel's setting, else the brain's, else None (guess from the model)."""
    if record is not None and record.reported_window:
        return record.reported_window, "claude"
    if kernel:
        from nika_brain.support.yamlsafe import load_file
        try:
            doc = load_file(brain.root / "kernels" / kernel / "kernel.yml")
        except (BrainError, OSError):
            doc = None
        w = _positive_int(doc.get("context_window")) if isinstance(doc, dict) else None
        if w:
            return w, "kernel"
    w = _positive_int(getattr(brain.config, "context_window", None))
    if w:
        return w, "brain"
    return None, "model"


def add_touched(brain: Brain, session_id: str, paths: list[str]) -> list[str]:
    """Add brain-relative paths to the session's touched list; return those that were new."""
    new: list[str] = []

    def change(data: dict[str, Any]) -> None:
        touched = data.get("touched")
        have: list[str] = touched if isinstance(touched, list) else []
        for p in paths:
            if p not in have and p not in new:
                new.append(p)
        data["touched"] = [*have, *new]

    update(brain, session_id, change)
    return new


def mark_seen(brain: Brain, session_id: str, directive_ids: list[str]) -> None:
    def change(data: dict[str, Any]) -> None:
        seen = data.get("seen_directives")
        have: list[str] = seen if isinstance(seen, list) else []
        data["seen_directives"] = [*have, *(d for d in directive_ids if d not in have)]

    update(brain, session_id, change)


def end(brain: Brain, session_id: str, *, reason: str | None, now: datetime | None = None) -> Session:
    when = clock.iso(now or clock.now())

    def change(data: dict[str, Any]) -> None:
        data["ended_at"] = when
        data["end_reason"] = reason or "unknown"

    return update(brain, session_id, change)


def list_sessions(brain: Brain) -> list[Session]:
    """Every recorded session (unreadable records are skipped: this is a listing, not a check)."""
    out: list[Session] = []
    folder = sessions_dir(brain)
    if not folder.is_dir():
        return out
    for p in sorted(folder.glob("*.json")):
        sid = p.stem
        if not valid_id(sid):
            continue
        try:
            data = _read(p)
        except BrainError:
            continue
        if data:
            out.append(_view(sid, data))
    return out
