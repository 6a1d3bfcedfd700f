"""The Bus protocol every backend implements, the message type and the channel names (the seed's
nika:federation:* channels). How the backends behave: the package docstring (nika_brain.bus).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

# The seed's federation channels (nika:federation:*).
DIRECTIVES = "nika:federation:directives"        # kernel A -> kernel B: an event that concerns you
WORK_STEALING = "nika:federation:work_stealing"  # task_available / task_claim
HEALTH = "nika:federation:health"                # heartbeats and aggregated metrics
GOALS = "nika:federation:goals"                  # updates of the registry of active /goals
FEDERATION_CHANNELS = (DIRECTIVES, WORK_STEALING, HEALTH, GOALS)

MAXLEN = 100_000          # messages kept per channel, approximately (oldest trimmed first)
KEY_TTL = 30 * 86400       # Redis: a key written without a ttl expires after this (nothing is forever)
STREAM_TTL = 30 * 86400    # Redis: a channel's stream expires this long after its last message
KV_PREFIX = "nika:kv:"    # Redis namespace of the keyed state
DB_NAME = "bus.sqlite3"

Message = tuple[str, dict]


@runtime_checkable
class Bus(Protocol):
    backend: str      # its name in BACKENDS
    where: str        # where the store is, for messages: a file, or host:port

    def publish(self, channel: str, message: dict) -> str: ...
    def read(self, channel: str, after: str | None = None, count: int = 100,
             block: float = 0) -> list[Message]: ...
    def group_read(self, channel: str, group: str, consumer: str, count: int = 1,
                   block: float = 0) -> list[Message]: ...
    def ack(self, channel: str, group: str, id: str) -> bool: ...
    def reclaim(self, channel: str, group: str, consumer: str, min_idle: float,
                count: int = 100) -> list[Message]: ...
    def set(self, key: str, value: dict, ttl: float | None = None) -> None: ...
    def get(self, key: str) -> dict | None: ...
    def set_if_absent(self, key: str, value: dict, ttl: float | None = None) -> bool: ...
    def delete(self, key: str) -> bool: ...
    def keys(self, prefix: str = "") -> list[str]: ...
    def trim(self, channel: str, older_than: float) -> int:
        """Drop the channel's messages older than `older_than` seconds (retention); how many."""
        ...
    def ping(self) -> None: ...
    def close(self) -> None: ...


