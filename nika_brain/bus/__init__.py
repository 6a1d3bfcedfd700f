"""The bus between kernels and the orchestrator: durable channels, work queues, small keyed state.

Two interchangeable backends behind the `Bus` protocol, chosen by `brain.config.bus` (`NIKA_BUS`
overrides it, `NIKA_REDIS_URL` overrides `brain.config.redis_url`):

- embedded: one SQLite file in WAL mode under the git-ignored state folder (`.nika/bus.sqlite3`);
- redis: a Stream per channel (XADD with an approximate MAXLEN) plus a PUBLISH of the same JSON for
  live subscribers; consumer groups are XREADGROUP / XACK / XAUTOCLAIM; keys live under `nika:kv:`
  so that they never collide with the channels' streams.

Message ids are opaque strings, ordered per channel: hand them back (`after=`, `ack`), do not compare
them. A work queue's group starts at the beginning of its channel, so work published before the first
worker arrived is not lost. Every failure of a store (dead server, locked or corrupt file, bad JSON)
leaves this module as one BrainError line. `redis` and `sqlite3` are imported only when their backend
is opened: the hook path must not pay for them.
"""
from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from nika_brain.bus.embedded import EmbeddedBus
from nika_brain.bus.protocol import (
    DB_NAME,
    DIRECTIVES,
    FEDERATION_CHANNELS,
    GOALS,
    HEALTH,
    KV_PREFIX,
    MAXLEN,
    WORK_STEALING,
    Bus,
    Message,
)
from nika_brain.bus.redis_streams import RedisBus, operator_url, operator_url_path, redis_url
from nika_brain.errors import BrainError

if TYPE_CHECKING:
    from nika_brain.brain import Brain

__all__ = ["BACKENDS", "DB_NAME", "DIRECTIVES", "FEDERATION_CHANNELS", "GOALS", "HEALTH", "KV_PREFIX",
           "MAXLEN", "WORK_STEALING", "Bus", "EmbeddedBus", "Message", "RedisBus", "backend_name",
           "open_bus", "operator_url", "operator_url_path", "redis_url"]


# --- registry ----------------------------------------------------------------------------------------

BACKENDS: dict[str, type] = {"embedded": EmbeddedBus, "redis": RedisBus}

_open: dict[tuple, Bus] = {}
_open_lock = threading.Lock()
_OPEN_MAX = 16  # a test run opens many brains; evicted buses close when their last holder drops them


def backend_name(brain: "Brain") -> str:
    env = os.environ.get("NIKA_BUS")
    name = env or brain.config.bus
    if name not in BACKENDS:
        source = "NIKA_BUS" if env else "nika-brain.yml"
        raise BrainError(f"bus: unknown backend {name!r} (from {source}); "
                         f"choose one of {', '.join(sorted(BACKENDS))}")
    return name


def open_bus(brain: "Brain") -> Bus:
    """The brain's bus, opened once per process (a forked child opens its own). Inside a kernel's
    sandbox, its door (bus/door.py): the stores are not there, and the door says who is asking."""
    from nika_brain.bus import door
    if door.present():
        return door.DoorBus()  # type: ignore[return-value]
    name = backend_name(brain)
    where = redis_url(brain) if name == "redis" else str(brain.state_dir / DB_NAME)
    key = (os.getpid(), name, where)
    with _open_lock:
        bus = _open.pop(key, None)
        if bus is None or getattr(bus, "closed", False):
            bus = BACKENDS[name].from_brain(brain)
        _open[key] = bus  # most recently used last
        while len(_open) > _OPEN_MAX:
            del _open[next(iter(_open))]
        return bus
