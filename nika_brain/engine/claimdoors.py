"""The claim doors (federation/doors/claim.py, with `ask`: federation/asking/door.py) as the engine
opens them: the door process and its stdin protocol (`open CLAIM PID` / `close CLAIM`).

A claim's door is a unix socket, `.nika/guarded/doors/<claim>/door.sock` (bus/door.claim_socket),
served by a process that acts as that claim only and answers only the process tree it was told to
serve. Two kinds of session get one:

- a swarm satellite (engine/satellites.launch): one door process for all the satellites of a launch,
  told on its stdin `open CLAIM PID` / `close CLAIM` (a process a satellite cost every swarm step
  ~100 ms CPU);
- an assisted step's session (`nika-brain claude start CLAIM`, engine/assisted.py): one door process
  for the session, opened for the command's own process tree (the claude it runs).

While a claim's door is open, its lock and claim changes made anywhere else (`NIKA_CLAIM=<claim>`
from another shell) are the operator's (bus/door.bound, checked by cli/fast.py), so an agent in
another session cannot act as that claim. Doors are started by module name: the engine does not import the
federation.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

from nika_brain.brain import Brain
from nika_brain.bus import door as door_client

_DOORS: dict[str, subprocess.Popen] = {}
_DOORS_LOCK = threading.Lock()


def process(brain: Brain) -> subprocess.Popen:
    """This process's door process for the brain, started on first use. It ends when this process
    has gone (its stdin closes, an exec too: the pipe is close-on-exec) and the last claim it serves
    has closed (its session's process exited, or `close CLAIM`)."""
    proc = _DOORS.get(str(brain.root))
    if proc is not None and proc.poll() is None:
        return proc
    err = brain.state_dir / "satellites" / "door.log"
    err.parent.mkdir(parents=True, exist_ok=True)
    with open(err, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "nika_brain.federation.asking.door", str(brain.root)],
                                cwd=brain.root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                text=True, env={k: v for k, v in os.environ.items() if k != door_client.CLAIM_DOOR})
    _DOORS[str(brain.root)] = proc
    return proc


def tell(brain: Brain, line: str) -> str:
    """Send the door one line and return its answer: `open CLAIM PID` waits for `open CLAIM` (or
    `failed CLAIM why`; "" when no door could be reached), `close CLAIM` returns "-". A door that died
    is started again once. A door that cannot be reached leaves the session's lock and claim
    commands failing with the reason (closed, never open)."""
    with _DOORS_LOCK:
        said = ""
        for _attempt in range(2):
            proc = process(brain)
            assert proc.stdin is not None and proc.stdout is not None
            opening = line.startswith("open ")
            try:
                proc.stdin.write(line + "\n")
                proc.stdin.flush()
                said = proc.stdout.readline() if opening else "-"   # `open CLAIM`, or `failed CLAIM why`
            except OSError:
                said = "" if opening else "-"   # a door gone has nothing left to close
            if said:
                return said.strip()
            proc.kill()   # it died meanwhile: a new one
            proc.wait()
        return said
