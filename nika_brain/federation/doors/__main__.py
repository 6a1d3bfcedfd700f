"""`python -m nika_brain.federation.doors [BRAIN]`: the door service in the foreground, in the background
after a spawn (kernels/sandbox.ensure_doors); it exits once no kernel of the brain is live."""
from __future__ import annotations

import os
import sys
import time

from nika_brain.brain import Brain
from nika_brain.federation.doors.service import DoorService, doors_dir


def main(argv: list[str]) -> int:
    brain = Brain.at(argv[0]) if argv else Brain.find()
    service = DoorService(brain)
    service.start()
    pid = doors_dir(brain) / "server.pid"
    pid.write_text(f"{os.getpid()}\n")
    idle = 0
    try:
        while idle < 6:
            time.sleep(0.5)
            idle = 0 if service.live_kernels() else idle + 1
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
        if pid.read_text().split()[:1] == [str(os.getpid())]:
            pid.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
