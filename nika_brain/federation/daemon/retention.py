"""Bus retention: the federation channels' messages older than `federation.daemon.retention` seconds
(24 h by default, the seed's) are trimmed every hour. Keyed state the federation writes carries its
own TTL (heartbeats: health.HEARTBEAT_TTL); task queues are never trimmed here (the protocol owns them).
"""
from __future__ import annotations

from nika_brain.brain import Brain
from nika_brain.federation.daemon import service as svc_mod


class RetentionService:
    name = "retention"
    every = 3600.0

    def __init__(self, brain: Brain):
        self.brain = brain
        self.retention = svc_mod.settings(brain)["retention"]
        self.trimmed: dict[str, int] = {}

    def start(self) -> None:
        pass

    def tick(self) -> None:
        from nika_brain import bus
        b = bus.open_bus(self.brain)
        for ch in bus.FEDERATION_CHANNELS:
            self.trimmed[ch] = self.trimmed.get(ch, 0) + b.trim(ch, self.retention)

    def stop(self) -> None:
        pass


def service(brain: Brain) -> RetentionService:
    return RetentionService(brain)
