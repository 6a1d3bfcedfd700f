"""The supervisor's process: its pid file and its start in the background after a spawn.

`ensure_running` starts the supervisor loop (supervisor.py) in the background unless one runs already
(pid file .nika/federation/supervisor.pid) or `federation.supervisor: manual`.
"""
from __future__ import annotations

import os
import subprocess
import sys

from nika_brain.brain import Brain
from nika_brain.federation.kernels import runtimes


def pidfile(brain: Brain):
    return brain.state_dir / "federation" / "supervisor.pid"


def running_pid(brain: Brain) -> int | None:
    try:
        pid = int(pidfile(brain).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if runtimes.pid_alive(pid) else None


def command() -> list[str]:
    """The background supervisor: this module itself, so it does not carry the CLI framework (typer)
    for its whole life; `nika-brain federation supervise` runs the same loop in the foreground."""
    return [sys.executable, "-m", "nika_brain.federation.kernels.supervisor"]


def ensure_running(brain: Brain) -> int | None:
    from nika_brain.federation import resident
    daemon = resident.daemon_pid(brain.state_dir)
    if daemon:  # the federation daemon runs the supervisor
        return daemon
    if brain.config.federation.get("supervisor", "auto") == "manual" or running_pid(brain):
        return running_pid(brain)
    log = brain.state_dir / "federation" / "supervisor.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        p = subprocess.Popen(command(),
                             cwd=brain.root, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh,
                             start_new_session=True, env={**os.environ, "NIKA_BRAIN_DIR": str(brain.root)})
    return p.pid
