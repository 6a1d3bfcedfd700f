"""Kernels anywhere: a verb on a kernel placed on another machine travels over the bus to that
machine's daemon, which runs it there and answers (issue 22, item 3).

- Every daemon registers its machine on the bus: a heartbeat key `machine:<id>` with a TTL
  (`federation.machine_ttl`, default the heartbeat TTL), and its id in the `machines` registry.
  A machine registered once whose heartbeat key has expired is **lost**: its kernels show `lost`
  (`kernel list`, `federation status`), and the other machines' daemons free its Redis leases (its
  locks), so its scopes can be taken again.
- `kernel invoke|readjust|observe|kill`, `ask` and the wait for an answer, called on machine 1 for
  a kernel whose record names machine 3, publish one request on machine 3's stream
  (`nika:federation:machine:<id>`, a consumer group) and wait for its answer under a reply key.
  Machine 3's daemon (daemon/machines.py) runs the verb locally and sets the reply. Each request
  runs at most once: its id is claimed with SET NX before it runs; a request found claimed but
  unanswered (the daemon died while running it) is answered "interrupted" and never run again.
- A request to a lost machine is **held**: it stays on that machine's stream and runs, once, when the
  machine's daemon comes back; the caller is told so at once (exit 8), and a prompt it carried is
  neither lost nor delivered twice (the owning machine's queue delivers what it took).
- The bus must be the Redis one (`bus: redis`): an embedded bus is one machine's file.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, is_dataclass
from typing import Any

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation import options
from nika_brain.federation.kernels import runtimes
from nika_brain.state import machine
from nika_brain.state.kernels import Kernel
from nika_brain.support import clock

CHANNEL = "nika:federation:machine:"
GROUP = "daemon"
REGISTRY = "machines"
REPLY_TTL = 3600.0
VERBS = ("kernel_invoke", "await_answer", "kernel_readjust", "kernel_observe", "kernel_kill", "kernel_spawn")


HELD = "machine:held:"            # machine:held:<machine>:<request>: a request held for a lost machine
HELD_TTL = REPLY_TTL * 24


class Held(runtimes.NotTaken):
    """The kernel's machine is lost: the request is held on its stream (not re-routed) and runs once
    when the machine's daemon comes back."""

    def __init__(self, message: str, *, machine: str, request: str):
        super().__init__(message, queued=None)
        self.machine = machine
        self.request = request


def held(brain: Brain, kernel_id: str | None = None) -> list[dict]:
    """The requests held for lost machines (optionally for one kernel), oldest first. [] when the bus
    is not Redis or does not answer (nothing can be held then)."""
    try:
        from nika_brain import bus
        if bus.backend_name(brain) != "redis":
            return []
        b = bus.open_bus(brain)
        out = [v for key in b.keys(HELD) if (v := b.get(key)) is not None]
    except BrainError:
        return []
    return sorted((v for v in out if kernel_id is None or v.get("kernel") == kernel_id),
                  key=lambda v: str(v.get("at")))


def request_outcome(brain: Brain, machine_id: str, rid: str) -> dict | None:
    """A held request's reply once its machine ran it, None while it is held (or the bus cannot tell)."""
    try:
        b = _bus(brain)
        if b.get(HELD + f"{machine_id}:{rid}") is not None:
            return None
        return b.get(f"machine:reply:{rid}")
    except BrainError:
        return None


def machine_ttl(brain: Brain) -> float:
    v = brain.config.federation.get("machine_ttl", options.get(brain, "heartbeat_ttl"))
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 86400:
        raise BrainError("nika-brain.yml: federation.machine_ttl must be seconds, 0 < s <= 86400")
    return float(v)


def here(brain: Brain) -> str:
    return machine.load(brain).id


def _nonce() -> str:
    """A random 128-bit hex id (uuid4's, imported here only: uuid imports platform, which a cold
    `nika-brain ask` would pay for nothing)."""
    import uuid
    return uuid.uuid4().hex


def elsewhere(brain: Brain, k: Kernel) -> str | None:
    """The machine k runs on when it is not this one (None: here, or placed by a cluster)."""
    if os.environ.get("NIKA_REMOTE_RUNNING") == k.id:
        return None  # this process is the owning daemon running a request for it
    if not k.machine or k.runtime == "kubernetes":
        return None
    return None if k.machine == here(brain) else k.machine


def _bus(brain: Brain):  # the Redis bus, or one line why not
    from nika_brain import bus
    if bus.backend_name(brain) != "redis":
        raise BrainError("a kernel on another machine is reached through the bus, and this brain's bus "
                         "is embedded (one machine's file): set `bus: redis` in nika-brain.yml")
    return bus.open_bus(brain)


def alive(brain: Brain, machine_id: str) -> dict | None:
    """The machine's heartbeat ({"id", "region", "pid", "at"}) or None when it is not up."""
    return _bus(brain).get(f"machine:{machine_id}")


def machines(brain: Brain) -> dict[str, dict]:
    """Every machine registered once: id -> {"up": bool, "last": heartbeat or last registry entry}."""
    b = _bus(brain)
    reg = b.get(REGISTRY) or {}
    out = {}
    for mid, last in sorted(reg.items()):
        beat = b.get(f"machine:{mid}")
        out[mid] = {"up": beat is not None, "last": beat or last}
    return out


SPAWN_KIND = "remote-spawn"
SPAWN_FRESH = 600.0               # seconds a signed placement request stays valid


def machines_of_region(brain: Brain, region: str) -> list[str]:
    """The machines of `region` whose daemon heartbeats on the bus now ([] when none, or no Redis bus)."""
    try:
        from nika_brain import bus
        if not region or bus.backend_name(brain) != "redis":
            return []
        return [m for m, v in machines(brain).items() if v["up"] and (v["last"] or {}).get("region") == region
                and m != here(brain)]
    except BrainError:
        return []


def place_spawn(brain: Brain, machine_id: str, kernel_id: str, goal: str, kw: dict) -> Kernel:
    """Spawn on `machine_id` (a machine of the kernel's region): the request carries the operator's
    signature over exactly what is spawned, where, and when; that machine's daemon verifies it before it
    spawns (a message on the bus is no authority by itself). Returns the record as written there."""
    from nika_brain.state import authority
    fields = {"machine": machine_id, "kernel": kernel_id, "goal": goal, "kw": kw,
              "at": clock.iso(clock.now()), "nonce": _nonce()}
    sig = authority.sign(brain, SPAWN_KIND, fields, what=f"placing kernel {kernel_id} on machine {machine_id}")
    text = call(brain, machine_id, "kernel_spawn", kernel_id, spawn=fields, signature=sig)
    import tempfile
    from pathlib import Path

    from nika_brain.state import kernels
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / kernel_id / "kernel.yml"  # a record is read from its kernel's folder
        path.parent.mkdir()
        path.write_text(str(text), encoding="utf-8")
        return kernels.load_path(path)


def placement_hint(brain: Brain, region: str) -> str:
    """For a spawn refused here because of its region: which machine could take it (those of that
    region whose daemon heartbeats on the bus), or why none can now. Never raises."""
    try:
        from nika_brain import bus
        if bus.backend_name(brain) != "redis":
            return "no bus tells which machines are up (bus: embedded)"
        known = machines(brain)
    except BrainError as exc:
        return f"the bus did not say which machines are up ({exc.message})"
    up = [m for m, v in known.items() if v["up"] and (v["last"] or {}).get("region") == region]
    if up:
        return f"machine{'s' if len(up) > 1 else ''} {', '.join(up)} of region {region} " \
               f"{'are' if len(up) > 1 else 'is'} up: run this spawn there"
    gone = [m for m, v in known.items() if not v["up"] and (v["last"] or {}).get("region") == region]
    return (f"no machine of region {region} is up" + (f" ({', '.join(gone)} lost)" if gone else "")
            + " among those registered on the bus")


def status_of(brain: Brain, k: Kernel) -> str:
    """k.status, or `lost` when k is live on a machine that was registered and is up no more."""
    if not k.live or not k.machine or k.runtime == "kubernetes":
        return k.status
    try:
        from nika_brain import bus
        if bus.backend_name(brain) != "redis" or k.machine == here(brain):
            return k.status
        b = bus.open_bus(brain)
        if k.machine in (b.get(REGISTRY) or {}) and b.get(f"machine:{k.machine}") is None:
            return "lost"
    except BrainError:
        return k.status
    return k.status


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {"__dataclass__": type(value).__name__, **asdict(value)}
    return value


def _unplain(value: Any) -> Any:
    if isinstance(value, dict) and value.get("__dataclass__") == "Directive":
        from nika_brain.state.kernels import Directive
        return Directive(**{k: v for k, v in value.items() if k != "__dataclass__"})
    return value


def call(brain: Brain, machine_id: str, verb: str, kernel_id: str, *args: Any,
         wait_for: float | None = None, **kw: Any) -> Any:
    """Run verbs.<verb>(brain, kernel_id, *args, **kw) on `machine_id` and return its result (its
    error raised here, same type and exit code)."""
    if verb not in VERBS:
        raise BrainError(f"{verb} is not a verb another machine runs")
    b = _bus(brain)
    rid = _nonce()
    me = here(brain)
    msg = {"id": rid, "verb": verb, "kernel": kernel_id, "args": list(args), "kw": kw, "from": me,
           "at": clock.iso(clock.now())}
    if alive(brain, machine_id) is None:
        # marked before it is published: the machine, back meanwhile, unmarks it once it ran it
        b.set(HELD + f"{machine_id}:{rid}", {"id": rid, "machine": machine_id, "kernel": kernel_id,
                                              "verb": verb, "from": me, "at": msg["at"]}, ttl=HELD_TTL)
        b.publish(CHANNEL + machine_id, msg)
        raise Held(f"held (machine {machine_id} lost): kernel {kernel_id}'s machine has no heartbeat; the "
                   f"request waits on its stream and runs once when it comes back (request {rid})",
                   machine=machine_id, request=rid)
    b.publish(CHANNEL + machine_id, msg)
    limit = wait_for if wait_for is not None else _timeout_for(kw, brain)
    deadline = time.monotonic() + limit
    step = 0.01
    while True:
        rep = b.get(f"machine:reply:{rid}")
        if rep is not None:
            break
        if time.monotonic() >= deadline:
            raise BrainError(f"machine {machine_id} did not answer {verb} on kernel {kernel_id} within "
                             f"{limit:g}s (request {rid}; it runs there at most once)")
        time.sleep(step)
        step = min(0.1, step * 1.5)
    if rep.get("ok"):
        result = _unplain(rep.get("result"))
        if verb == "await_answer" and isinstance(result, dict):
            result["machine"] = machine_id  # its events are on that machine, not here
        return result
    msg = f"{rep.get('error') or 'failed'} (on machine {machine_id})"
    if rep.get("type") == "NotTaken":
        raise runtimes.NotTaken(msg, queued=rep.get("queued"))
    err = BrainError(msg)
    err.exit_code = int(rep.get("exit_code") or 1)
    raise err


def _timeout_for(kw: dict, brain: Brain) -> float:
    """How long the caller waits: delivery, plus the answer's own timeout when the verb waits for it."""
    base = options.get(brain, "deliver_timeout") + 60.0
    t = kw.get("timeout")
    if kw.get("wait"):
        return base + (float(t) if isinstance(t, (int, float)) else 600.0)
    return base


FREED = "machine:freed:"          # machine:freed:<machine>:<id>: a lease the others freed while it was lost
FREED_TTL = 30 * 86400.0


def free_lost_leases(brain: Brain) -> int:
    """Drop the Redis leases of every registered machine that is up no more (its locks), and record
    them under `machine:freed:<machine>` so that machine drops its lock files when it returns; the
    same lock files synced to this clone are dropped here (journaled LOCK_FREED)."""
    from nika_brain.federation.kernels import leases
    if not leases.enabled(brain):
        return 0
    reg = machines(brain)
    lost = {m for m, v in reg.items() if not v["up"]}
    if not lost:
        return 0
    le = leases.open_leases(brain)
    b = _bus(brain)
    n = 0
    for v in le.held():
        mid = v.get("machine")
        if mid in lost and le.release(v["scope"], v["owner"], v.get("token")):
            n += 1
            b.set(FREED + f"{mid}:{_nonce()}", {"scope": v["scope"], "owner": v["owner"],
                                                          "token": v.get("token"), "by": here(brain),
                                                          "at": clock.iso(clock.now())}, ttl=FREED_TTL)
            _drop_lock_file(brain, v["scope"], v["owner"], clock.now(), "LOCK_FREED",
                            f"machine {mid} lost (no heartbeat): its lease was freed by {here(brain)}")
    return n


def _drop_lock_file(brain: Brain, scope: str, owner: str, before, signal: str, why: str) -> bool:
    """Remove this clone's lock file of (scope, owner) when it was acquired before `before` (one
    taken again since is a new lock, kept); journaled. False when there was none to drop."""
    from nika_brain.engine import signals
    from nika_brain.state import locks
    try:
        lk = locks.load_lock(locks.lock_path(brain, scope, owner))
    except (BrainError, OSError):
        return False
    if lk.owner != owner or lk.acquired > before:
        return False
    if not locks.release(brain, scope, owner, missing_ok=True):
        return False
    signals.emit(brain, signal, claim=owner, reason=f"lock {scope} of {owner} dropped: {why}",
                 payload={"scope": scope, "owner": owner, "machine": here(brain)})
    return True


def reconcile_returned(brain: Brain) -> list[str]:
    """On a machine that comes back: drop (journaled LOCK_DROPPED) its lock files whose leases the
    other machines freed while it was lost, so neither this clone nor its next sync keeps or
    resurrects them beside the locks taken since; the record is cleared once done. Returns the
    scopes dropped."""
    from nika_brain.federation.kernels import leases
    if not leases.enabled(brain):
        return []
    b = _bus(brain)
    me = here(brain)
    keys = b.keys(FREED + me + ":")
    if not keys:
        return []
    live = {(v["scope"], v["owner"]) for v in leases.open_leases(brain).held()}
    dropped = []
    for key in keys:
        f = b.get(key)
        b.delete(key)
        if not isinstance(f, dict) or (f.get("scope"), f.get("owner")) in live:
            continue  # taken again since (by this machine): a live lock
        try:
            at = clock.parse(str(f.get("at")), what="at")
        except BrainError:
            continue
        if _drop_lock_file(brain, str(f["scope"]), str(f["owner"]), at, "LOCK_DROPPED",
                           f"this machine ({me}) was lost and {f.get('by')} freed its lease at {f.get('at')}"):
            dropped.append(str(f["scope"]))
    return dropped
