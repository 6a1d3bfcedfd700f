"""Is a process alive: one answer for the runtimes, the daemon's pid files and the lease mirror."""
from __future__ import annotations

import os
from typing import Any


def alive(pid: Any) -> bool:
    """True when `pid` names a running process (a zombie is dead; someone else's process is alive)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command's name (state first, parent pid second, start
    time in clock ticks at index 19), None when there is no such process or the file is unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return None
    return fields or None
