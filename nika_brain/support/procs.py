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
