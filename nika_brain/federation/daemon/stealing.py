"""Work stealing on behalf of each kernel, run by the daemon (no hand-started `kernel work`).

One worker thread per live kernel whose session has started. It runs the kernel's own tasks
(delivered with kernel_invoke, waiting for the answer), offers what waits to idle kernels and
claims others' tasks when its kernel is idle: no prompt queued and no turn in progress (a
UserPromptSubmit without its Stop yet, health.turn_in_progress) -- not merely an idle loop. A failed
task is recorded failed and the worker goes on. A kernel that stops being live loses its worker;
its tasks stay in its queue (the protocol's sweep returns what it held).
"""
from __future__ import annotations

import threading
from typing import Any

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation.daemon import service as svc_mod
from nika_brain.federation.kernels import health, verbs
from nika_brain.state import kernels
from nika_brain.state import prompts as queue


class _Runner:
    def __init__(self, brain: Brain, kernel_id: str, poll: float):
        from nika_brain.federation.stealing import protocol
        self.stop_event = threading.Event()
        self.error: str | None = None

        def run(task: dict) -> dict:
            got = verbs.kernel_invoke(brain, kernel_id, task["prompt"], wait=True, by="work-stealing")
            return {"answer": got.get("answer"), "session": got.get("session")}

        def busy() -> bool:
            return bool(queue.pending(brain, kernel_id)) or health.turn_in_progress(brain, kernel_id)

        import dataclasses
        cfg = protocol.settings(brain)
        # idle workers look at the broadcast every `poll` seconds: an owner waits long enough for
        # their claims (it decides at once when every idle kernel has answered)
        cfg = dataclasses.replace(cfg, window=max(cfg.window, 2 * poll + 0.2))
        self.worker = protocol.worker_for(brain, kernel_id, run, busy=busy, config=cfg)
        self.poll = poll
        self.thread = threading.Thread(target=self._serve, daemon=True, name=f"steal-{kernel_id}")

    def _serve(self) -> None:
        w = self.worker
        try:
            w.recover()
            w.beat(force=True)
            while not self.stop_event.is_set():
                if not w.step():
                    self.stop_event.wait(self.poll)
        except BrainError as exc:
            self.error = str(exc)


class StealingService:
    name = "stealing"
    every = 5.0

    def __init__(self, brain: Brain):
        self.brain = brain
        self.poll = svc_mod.settings(brain)["stealing_poll"]
        self.runners: dict[str, _Runner] = {}

    def start(self) -> None:
        pass

    def tick(self) -> None:
        live = {k.id for k in kernels.list_kernels(self.brain) if k.live and verbs.ready(self.brain, k)}
        for kid in list(self.runners):
            r = self.runners[kid]
            if kid not in live or not r.thread.is_alive():
                r.stop_event.set()
                del self.runners[kid]
        for kid in sorted(live - set(self.runners)):
            r = _Runner(self.brain, kid, self.poll)
            r.thread.start()
            self.runners[kid] = r

    def stop(self) -> None:
        for r in self.runners.values():
            r.stop_event.set()
        for r in self.runners.values():
            r.thread.join(timeout=5)

    def workers(self) -> dict[str, Any]:
        return {kid: r.worker.stats for kid, r in self.runners.items()}


def service(brain: Brain) -> StealingService:
    return StealingService(brain)
