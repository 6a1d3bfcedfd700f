"""Work stealing on behalf of each kernel, run by the daemon (no hand-started `kernel work`).

One protocol Worker per live kernel whose session has started. It runs the kernel's own tasks
(delivered with kernel_invoke, waiting for the answer), offers what waits to idle kernels and
claims others' tasks when its kernel is idle: no prompt queued and no turn in progress (a
UserPromptSubmit without its Stop yet, health.turn_in_progress) -- not merely an idle loop. A failed
task is recorded failed and the worker goes on. A kernel that stops being live loses its worker;
its tasks stay in its queue (the protocol's sweep returns what it held).

Threads (idle CPU with 20 kernels): ONE poller steps every idle worker in turn, every `stealing_poll`
seconds, and at once again while a step did something (an offer, a claim, a grant: the claimants
and the owner answer each other within a few sweeps, not a poll period apart). On Redis it waits on
the broadcast stream (XREAD BLOCK), so an offer, claim or grant published by another process wakes
it at once; on the embedded bus it sleeps (a blocking read there is a polling loop). A worker with
a task to run gets a thread of its own while it runs (kernel_invoke blocks until the answer); the
poller leaves that worker alone meanwhile and takes it back when its steps are idle again.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation.daemon import service as svc_mod
from nika_brain.federation.kernels import health, verbs
from nika_brain.state import kernels
from nika_brain.state import prompts as queue

BUSY_AGAIN = 0.005   # seconds before the next sweep while steps do something (doubling to 0.05)


def busy_probe(brain: Brain, kernel_id: str):
    """Whether the kernel has work outside its stealing queue (prompts queued, a turn in progress),
    read again only when its queue or its events file changed (two stats, not two reads and parses
    each second per kernel)."""
    paths = (queue.path(brain, kernel_id), health.events_path(brain, kernel_id))
    seen: list[Any] = [None, False]

    def busy() -> bool:
        stamp = []
        for p in paths:
            try:
                st = os.stat(p)
                stamp.append((st.st_ino, st.st_size, st.st_mtime_ns))
            except OSError:
                stamp.append(None)
        if stamp != seen[0]:
            seen[1] = bool(queue.pending(brain, kernel_id)) or health.turn_in_progress(brain, kernel_id)
            seen[0] = stamp
        return seen[1]

    return busy


class _Runner:
    """One kernel's Worker; `thread` is set while it runs a task (None when the poller steps it)."""

    def __init__(self, brain: Brain, kernel_id: str, poll: float):
        from nika_brain.federation.stealing import protocol
        self.kernel_id = kernel_id
        self.stop_event = threading.Event()
        self.error: str | None = None
        self.started = False
        self.thread: threading.Thread | None = None

        def run(task: dict) -> dict:
            got = verbs.kernel_invoke(brain, kernel_id, task["prompt"], wait=True, by="work-stealing")
            return {"answer": got.get("answer"), "session": got.get("session")}

        cfg = protocol.settings(brain)
        # a claimant in another process may see an offer only at its next poll: the owner waits long
        # enough for its claim (it decides at once when every idle kernel has answered)
        cfg = dataclasses.replace(cfg, window=max(cfg.window, 2 * poll + 0.2))
        self.worker = protocol.worker_for(brain, kernel_id, run, busy=busy_probe(brain, kernel_id), config=cfg)

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    @property
    def failed(self) -> bool:
        return self.error is not None

    def step(self) -> bool:
        """One idle step from the poller (never runs a task); True when something happened. Starts
        the run thread when a task is ready to run."""
        w = self.worker
        if not self.started:
            w.recover()
            w.beat(force=True)
            self.started = True
        did = w.step(run=False)
        if w.runnable():
            self.thread = threading.Thread(target=self._run, daemon=True, name=f"steal-run-{self.kernel_id}")
            self.thread.start()
            return True
        return did

    def _run(self) -> None:
        try:
            while not self.stop_event.is_set() and self.worker.step():
                pass
        except BrainError as exc:
            self.error = str(exc)
        except Exception as exc:  # noqa: BLE001 (this worker is replaced; the others go on)
            self.error = f"{type(exc).__name__}: {exc}"


class StealingService:
    name = "stealing"
    every = 5.0

    def __init__(self, brain: Brain):
        self.brain = brain
        self.poll = svc_mod.settings(brain)["stealing_poll"]
        self.runners: dict[str, _Runner] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.wake = threading.Event()
        self.poller: threading.Thread | None = None
        from nika_brain import bus
        self.blocking = bus.backend_name(brain) == "redis"   # XREAD BLOCK wakes at once on a message

    def start(self) -> None:
        self.poller = threading.Thread(target=self._poll_loop, daemon=True, name="steal-poller")
        self.poller.start()

    def tick(self) -> None:
        live = {k.id for k in kernels.list_kernels(self.brain) if k.live and verbs.ready(self.brain, k)}
        with self.lock:
            current = dict(self.runners)
        for kid, r in current.items():
            if kid not in live or r.failed:
                r.stop_event.set()
                with self.lock:
                    del self.runners[kid]
        new = sorted(live - set(current)) + sorted(k for k, r in current.items() if k in live and r.failed)
        for kid in new:
            r = _Runner(self.brain, kid, self.poll)
            with self.lock:
                self.runners[kid] = r
        if new:
            self.wake.set()

    # ---- the one poller ---------------------------------------------------------------------
    def sweep(self) -> bool:
        """Step every worker not running a task; True when one did something."""
        with self.lock:
            runners = list(self.runners.values())
        did = False
        for r in runners:
            if self.stopping.is_set():
                break
            if r.running or r.failed or r.stop_event.is_set():
                continue
            try:
                did |= r.step()
            except BrainError as exc:
                r.error = str(exc)   # replaced at the next tick
            except Exception as exc:  # noqa: BLE001 (one worker's bug never stops the others)
                r.error = f"{type(exc).__name__}: {exc}"
        return did

    def _poll_loop(self) -> None:
        pause = BUSY_AGAIN
        while not self.stopping.is_set():
            if self.sweep():
                pause = BUSY_AGAIN
                self.stopping.wait(pause)
                pause = min(pause * 2, 0.05)
                continue
            self._wait_idle()

    def _wait_idle(self) -> None:
        """Until the next sweep: a poll period, or less when something arrives."""
        self.wake.clear()
        if self.blocking:
            with self.lock:
                workers = [r.worker for r in self.runners.values() if r.started and r.worker.cursor]
            if workers:
                w = max(workers, key=lambda w: _stream_id(str(w.cursor)))
                try:   # returns at the first message after what every worker has read
                    w.bus.read(w.ws, after=w.cursor, count=1, block=self.poll)
                    return
                except BrainError:
                    pass
        self.wake.wait(self.poll)

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        with self.lock:
            runners = list(self.runners.values())
        for r in runners:
            r.stop_event.set()
        if self.poller is not None:
            self.poller.join(timeout=5)
        for r in runners:
            if r.thread is not None:
                r.thread.join(timeout=5)

    def workers(self) -> dict[str, Any]:
        with self.lock:
            return {kid: r.worker.stats for kid, r in self.runners.items()}


def _stream_id(mid: str) -> tuple[int, ...]:
    """A Redis stream id ("ms-seq") in its order."""
    try:
        return tuple(int(x) for x in mid.split("-"))
    except ValueError:
        return (0,)


def service(brain: Brain) -> StealingService:
    return StealingService(brain)
