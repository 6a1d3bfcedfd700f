"""Named crash points for crash-consistency tests.

`NIKA_FAULT=<point>` makes the process kill itself with SIGKILL when it reaches that point: a real
kill -9 at an exact step boundary, so tests can prove that a relaunch resumes from the files.
`NIKA_FAULT=<point>@N` kills at the Nth time this process reaches it (`mid-write@7`: in the middle of
its seventh state file write). Unset (always, outside tests) it costs one dict lookup.
"""
from __future__ import annotations

import os
import signal

POINTS = ("after-preflight", "after-lock", "after-claim-open", "after-claim-close", "after-route",
          "after-gate-open", "before-merge", "after-merge")
# the federation daemon's: a machine's daemon ran another machine's request and has not acked it yet
DAEMON_POINTS = ("after-remote-request",)
# support/fsio.atomic_write: half of a file's text written (to its temporary file), the rest not yet
WRITE_POINTS = ("mid-write",)
_reached: dict[str, int] = {}


def point(name: str) -> None:
    want = os.environ.get("NIKA_FAULT")
    if want is None:
        return
    if want == name:
        os.kill(os.getpid(), signal.SIGKILL)
    elif want.startswith(name + "@"):
        reached = _reached[name] = _reached.get(name, 0) + 1
        if want[len(name) + 1:] == str(reached):
            os.kill(os.getpid(), signal.SIGKILL)
