"""Scheduled work: the diversity and doctrine triggers every `federation.daemon.triggers_every`
seconds (saturation stays on the Stop hook), and once a day, for yesterday, each kernel's daily
summary and super-chunk merge (the vault's). What ran last is kept in .nika/federation/daily.json so
a restarted daemon does not run a day twice.
"""
from __future__ import annotations

import json
from datetime import timedelta

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation.daemon import service as svc_mod
from nika_brain.state import kernels
from nika_brain.support import clock


class TriggersService:
    name = "triggers"

    def __init__(self, brain: Brain):
        self.brain = brain
        self.every = svc_mod.settings(brain)["triggers_every"]
        self.first = True

    def start(self) -> None:
        pass

    def tick(self) -> None:
        if self.first:  # not at start-up: the first run comes one period later
            self.first = False
            return
        from nika_brain.federation.spawning import triggers
        ids = [k.id for k in kernels.list_kernels(self.brain) if k.live]
        if ids:
            triggers.run_all(self.brain, ids)

    def stop(self) -> None:
        pass


class DailyService:
    name = "daily"
    every = 600.0

    def __init__(self, brain: Brain):
        self.brain = brain
        self.path = brain.state_dir / "federation" / "daily.json"

    def start(self) -> None:
        pass

    def tick(self) -> None:
        day = (clock.now() - timedelta(days=1)).strftime("%Y-%m-%d")
        try:
            done = json.loads(self.path.read_text())
        except (OSError, ValueError):
            done = {}
        if done.get("day") == day:
            return
        from nika_brain.federation.vault import summaries, superchunks
        errors = []
        for k in kernels.list_kernels(self.brain):
            try:
                summaries.summarize(self.brain, k.id, day)
                superchunks.merge(self.brain, k.id)
            except BrainError as exc:
                errors.append(f"{k.id}: {exc}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"day": day, "at": clock.iso(clock.now()), "errors": errors}))
        if errors:
            raise BrainError("daily summaries: " + "; ".join(errors[:3]))

    def stop(self) -> None:
        pass


def triggers(brain: Brain) -> TriggersService:
    return TriggersService(brain)


def daily(brain: Brain) -> DailyService:
    return DailyService(brain)
