"""A stand-in kernel for the work-stealing tests: the real Worker, with a task that sleeps.

    python steal_kernel.py <brain> <kernel> <task-ms> <start-log>

Every task start is appended to <start-log> ("task kernel pid epoch"), one write per line, so the test
can check that no task ran in two kernels except after a kill -9. The bus comes from the brain
(NIKA_BUS / NIKA_REDIS_URL).
"""

from __future__ import annotations

import os
import sys
import time

from nika_brain.brain import Brain
from nika_brain.federation.stealing.protocol import serve_kernel, worker_for


def main() -> None:
    root, kernel, ms, log = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def started(task: dict) -> None:
        os.write(fd, f"{task['id']} {task['kernel']} {task['pid']} {task['epoch']}\n".encode())

    def run(task: dict) -> dict:
        time.sleep(ms / 1000)
        return {"by": kernel}

    brain = Brain.at(root)
    serve_kernel(lambda: worker_for(brain, kernel, run, on_start=started))   # as `kernel work` serves


if __name__ == "__main__":
    main()
