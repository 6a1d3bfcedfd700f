"""The kernels' doors as a daemon service: under `federation up` the daemon itself listens on each
kernel's socket (`.nika/doors/<id>/door.sock`, federation/doors) and answers as the kernel the socket
belongs to, so a sandboxed kernel reaches the vault, the summaries and the bus only through the daemon.

`.nika/doors/server.pid` names the process that hosts the doors. A spawn outside the daemon starts a
standalone door server (kernels/sandbox.ensure_doors); when one is already there the daemon leaves
it the doors and takes them over at the first tick after it has gone.
"""
from __future__ import annotations

import os

from nika_brain.brain import Brain
from nika_brain.federation.doors.service import DoorService, doors_dir
from nika_brain.federation.kernels import runtimes


class DoorsService:
    name = "doors"
    every = 2.0

    def __init__(self, brain: Brain):
        self.brain = brain
        self.doors: DoorService | None = None

    def _pidfile(self):
        return doors_dir(self.brain) / "server.pid"

    def _other_host(self) -> int:
        try:
            pid = int(self._pidfile().read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0
        return pid if pid != os.getpid() and runtimes.pid_alive(pid) else 0

    def start(self) -> None:
        self.tick()

    def tick(self) -> None:
        if self.doors is not None or self._other_host():
            return
        doors = DoorService(self.brain)
        doors.start()   # its own thread opens the doors of kernels spawned later
        self._pidfile().write_text(f"{os.getpid()}\n")
        self.doors = doors

    def stop(self) -> None:
        if self.doors is None:
            return
        self.doors.stop()
        self.doors = None
        try:
            if self._pidfile().read_text().split()[:1] == [str(os.getpid())]:
                self._pidfile().unlink()
        except OSError:
            pass


def service(brain: Brain) -> DoorsService:
    return DoorsService(brain)
