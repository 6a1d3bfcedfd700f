"""What the daemon hosts: a Service (start / tick / stop, ticked every `every` seconds) built by a
factory named "module:factory" (called with the brain). SERVICES lists the built-in ones; a brain
adds its own under `federation.daemon.services` and turns any off under `federation.daemon.disable`.
A service that fails to start is reported in the daemon's status and left out; one whose tick
raises is reported and ticked again next time: one service never takes the daemon down.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from nika_brain.brain import Brain
from nika_brain.errors import BrainError

# The built-in services, in start order. Another room's service is one more line here.
SERVICES: tuple[str, ...] = (
    "nika_brain.federation.kernels.leases_mirror:service",  # first: the hooks wait on it
    "nika_brain.federation.daemon.machines:service",  # this machine on the bus, verbs from the others
    "nika_brain.federation.daemon.syncing:service",  # state through the git remote (`sync:`)
    "nika_brain.federation.daemon.embedder:service",
    "nika_brain.federation.daemon.doors:service",      # the kernels' sockets (federation/doors)
    "nika_brain.federation.daemon.supervise:service",
    "nika_brain.federation.daemon.stealing:service",
    "nika_brain.federation.daemon.schedule:triggers",
    "nika_brain.federation.daemon.schedule:daily",
    "nika_brain.federation.daemon.retention:service",
)


@runtime_checkable
class Service(Protocol):
    name: str
    every: float  # seconds between two ticks

    def start(self) -> None: ...
    def tick(self) -> None: ...
    def stop(self) -> None: ...


def settings(brain: Brain) -> dict[str, Any]:
    raw = brain.config.federation.get("daemon") or {}
    if not isinstance(raw, Mapping):
        raise BrainError("nika-brain.yml: federation.daemon must be a mapping")
    known = {"services", "disable", "triggers_every", "retention", "stealing_poll"}
    for key in raw:
        if key not in known:
            raise BrainError(f"nika-brain.yml: federation.daemon.{key} is not a setting "
                             f"(known: {', '.join(sorted(known))})")
    out = {"services": [], "disable": [], "triggers_every": 900.0, "retention": 86400.0,
           "stealing_poll": 1.0, **raw}
    for key in ("services", "disable"):
        if not isinstance(out[key], list) or not all(isinstance(x, str) for x in out[key]):
            raise BrainError(f"nika-brain.yml: federation.daemon.{key} must be a list of strings")
    for key in ("triggers_every", "retention", "stealing_poll"):
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise BrainError(f"nika-brain.yml: federation.daemon.{key} must be a positive number of seconds")
        out[key] = float(v)
    return out


def load(spec: str, brain: Brain) -> Service:
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise BrainError(f"a daemon service is \"module:factory\", got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise BrainError(f"daemon service {spec}: {exc}") from exc
    svc = factory(brain)
    if not isinstance(svc, Service):
        raise BrainError(f"daemon service {spec} is not a Service (name, every, start, tick, stop)")
    return svc


def specs(brain: Brain) -> list[str]:
    cfg = settings(brain)
    off = set(cfg["disable"])
    return [s for s in (*SERVICES, *cfg["services"]) if s not in off and s.rpartition(":")[0] not in off]
