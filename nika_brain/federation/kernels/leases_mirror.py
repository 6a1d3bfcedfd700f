"""The daemon's lease mirror: every machine's live Redis leases, copied into this machine's
`.nika/leases/leases.json` for the hooks (state/leasemirror.py reads it, with no network).

A thread of its own (the daemon's loop may be busy supervising kernels): subscribed to the leases'
events channel (every acquire, renew and release PUBLISHes there, from any machine), it rewrites
the mirror at once on an event and at least every `federation.lease_mirror_every` seconds (1 by
default), so its write time proves it is current. When Redis cannot be reached the mirror is
rewritten with the error: the hooks then refuse writes with that reason, and allow them again as
soon as Redis answers. The daemon stopping removes the mirror (the hooks then say the daemon is
not running); a daemon killed leaves a mirror whose pid is dead and that goes stale: refused too.
"""
from __future__ import annotations

import json
import os
import threading
import time

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation.kernels import leases
from nika_brain.state import leasemirror
from nika_brain.support import fsio


def every(brain: Brain) -> float:
    v = brain.config.federation.get("lease_mirror_every", leasemirror.EVERY)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 60:
        raise BrainError("nika-brain.yml: federation.lease_mirror_every must be seconds, 0 < s <= 60")
    if v * 2 > leasemirror.stale_after(brain):
        raise BrainError("nika-brain.yml: federation.lease_mirror_every must be at most half of "
                         "federation.lease_mirror_stale (a mirror refreshed on time is never stale)")
    return float(v)


def write(brain: Brain, written: float, redis_ms: int | None, held: list[dict], error: str | None) -> None:
    doc = {"v": 1, "pid": os.getpid(), "written": written, "redis_ms": redis_ms, "error": error,
           "leases": [{k: v[k] for k in ("scope", "mode", "owner", "token", "exp", "host", "machine") if k in v}
                      for v in held]}
    p = leasemirror.path(brain)
    p.parent.mkdir(parents=True, exist_ok=True)
    fsio.atomic_write(p, json.dumps(doc, separators=(",", ":")), fsync=False)


def refresh(brain: Brain) -> int:
    """One snapshot of Redis into the mirror; returns the number of live leases. Raises BrainError
    (after writing the error into the mirror) when Redis does not answer."""
    t0 = time.time()  # before the read: the snapshot is at least this fresh
    try:
        now, held = leases.open_leases(brain).snapshot()
    except BrainError as exc:
        write(brain, t0, None, [], str(exc))
        raise
    write(brain, t0, now, held, None)
    return len(held)


class MirrorService:
    name = "lease-mirror"
    every = 5.0  # the daemon's tick only reports the thread's state; the thread does the work

    def __init__(self, brain: Brain):
        self.brain = brain
        self.enabled = leases.enabled(brain)
        self.interval = every(brain) if self.enabled else leasemirror.EVERY
        self.stopping = threading.Event()
        self.error: str | None = None
        self.refreshes = 0
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if not self.enabled:
            return
        try:
            refresh(self.brain)
            self.refreshes += 1
        except BrainError as exc:
            self.error = str(exc)
        self.thread = threading.Thread(target=self._run, name="lease-mirror", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import redis
        while not self.stopping.is_set():
            ps = None
            try:
                le = leases.open_leases(self.brain)
                ps = le._r.pubsub(ignore_subscribe_messages=True)
                ps.subscribe(le.events_key)
                while not self.stopping.is_set():
                    refresh(self.brain)
                    self.refreshes += 1
                    self.error = None
                    ps.get_message(timeout=self.interval)
                    while ps.get_message(timeout=0) is not None:
                        pass  # a burst of events: one snapshot covers them all
            except (BrainError, redis.RedisError, OSError) as exc:
                self.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                try:
                    write(self.brain, time.time(), None, [], self.error)
                except OSError:
                    pass
                self.stopping.wait(min(self.interval, 1.0))
            finally:
                if ps is not None:
                    try:
                        ps.close()
                    except Exception:  # noqa: BLE001 (a dead connection's close may fail too)
                        pass

    def tick(self) -> None:
        if self.error:
            raise BrainError(f"lease mirror: {self.error} (writes refused on this machine meanwhile)")

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
        if self.enabled:
            try:
                leasemirror.path(self.brain).unlink()
            except OSError:
                pass


def service(brain: Brain) -> MirrorService:
    return MirrorService(brain)
