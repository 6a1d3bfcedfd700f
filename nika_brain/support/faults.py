"""Named crash points for crash-consistency tests.

`NIKA_FAULT=<point>` makes the process kill itself with SIGKILL when it reaches that point: a real
kill -9 at an exact step boundary, so tests can prove that a relaunch resumes from the files.
Unset (always, outside tests) it costs one dict lookup.
"""
from __future__ import annotations

import os
import signal

POINTS = ("after-preflight", "after-lock", "after-claim-open", "after-claim-close", "after-route",
          "after-gate-open", "before-merge", "after-merge")
# the federation daemon's: a machine's daemon ran another machine's request and has not acked it yet
DAEMON_POINTS = ("after-remote-request",)


def point(name: str) -> None:
    if os.environ.get("NIKA_FAULT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
