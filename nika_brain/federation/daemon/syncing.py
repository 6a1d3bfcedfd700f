"""The daemon's sync (issue 22, item 1): a brain with a `sync:` block is synced with its remote
every `sync.interval` seconds (engine/sync.py: commit this machine's state, merge the remote's,
push, retried on a race). After a sync that brought commits in, a run this machine drives that
waits on a gate decided elsewhere takes its transition here, at once: a gate approved on machine 1
resumes the run driven on machine 2. A brain without `sync:` has nothing to sync: the service idles.
"""
from __future__ import annotations

from nika_brain.brain import Brain
from nika_brain.engine import service as engine
from nika_brain.engine import sync as brain_sync
from nika_brain.errors import BrainError
from nika_brain.state import gates, runs


def resume_decided(brain: Brain) -> list[str]:
    """Step every run driven here whose pending gate has been decided (on any machine)."""
    done = []
    for run in runs.list_runs(brain):
        if run.status != "gated" or not run.gate or runs.driven_elsewhere(brain, run):
            continue
        try:
            if gates.load_gate(brain, run.gate).pending:
                continue
        except BrainError:
            continue
        engine.drive(brain, run.workflow)  # as `workflow resume` does: up to the next step's claim
        done.append(run.workflow)
    return done


class SyncService:
    name = "sync"

    def __init__(self, brain: Brain):
        self.brain = brain
        s = brain_sync.settings(brain)
        self.enabled = s.configured
        self.every = s.interval
        self.last: str | None = None
        self.resumed: list[str] = []

    def start(self) -> None:
        pass

    def tick(self) -> None:
        if not self.enabled:
            return
        res = brain_sync.sync(self.brain)
        self.last = res.line()
        if res.pulled:
            self.resumed += resume_decided(self.brain)
            if self.resumed:
                brain_sync.sync(self.brain)  # the run's new state goes out at once

    def stop(self) -> None:
        pass


def service(brain: Brain) -> SyncService:
    return SyncService(brain)
