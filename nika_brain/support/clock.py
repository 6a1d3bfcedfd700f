"""Time, injected. Every function that needs 'now' takes it as a parameter defaulting to `now()`.

`NIKA_NOW` (an ISO time) pins the clock of a whole CLI process, so that TTLs, breakers and
heartbeats can be tested end to end without sleeping.
"""
from __future__ import annotations

import os
from datetime import datetime, timezone

from nika_brain.errors import BrainError


def now() -> datetime:
    pinned = os.environ.get("NIKA_NOW")
    if pinned:
        return parse(pinned, what="NIKA_NOW")
    return datetime.now(timezone.utc)


def iso(dt: datetime) -> str:
    """Stable text form used in every state file: UTC, microseconds kept only when present."""
    dt = dt.astimezone(timezone.utc)
    if dt.microsecond:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(text: str, *, what: str = "time") -> datetime:
    try:
        dt = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError as exc:
        raise BrainError(f"{what}: not an ISO time: {text!r}") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt


def age(since: datetime, ref: datetime) -> str:
    """Short human age ('3d4h', '12m') of `since` at `ref`."""
    secs = max(0, int((ref - since).total_seconds()))
    d, rem = divmod(secs, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    if d:
        return f"{d}d{h}h"
    if h:
        return f"{h}h{m}m"
    if m:
        return f"{m}m"
    return f"{s}s"
