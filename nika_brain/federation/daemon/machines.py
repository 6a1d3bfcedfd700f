"""The daemon's side of kernels anywhere (federation/kernels/remote.py is the caller's side): this
machine's heartbeat on the bus, the requests other machines send for this machine's kernels (each run
once, answered under its reply key), and the freeing of lost machines' leases.
"""
from __future__ import annotations

import os
import threading
from typing import Any

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation.kernels import remote, runtimes, verbs
from nika_brain.state import machine
from nika_brain.support import clock, faults


def spawn_placed(brain: Brain, kernel_id: str, spawn: Any = None, signature: Any = None) -> str:
    """On the machine a spawn was placed on: verify the operator's signature, its target and freshness,
    then spawn here; returns the kernel.yml text."""
    from nika_brain.errors import Refused
    from nika_brain.state import authority, kernels
    if not isinstance(spawn, dict) or not authority.verify(brain, remote.SPAWN_KIND, spawn, signature):
        raise Refused(f"refused: a spawn of {kernel_id} placed here is not signed by the operator")
    if spawn.get("machine") != remote.here(brain) or spawn.get("kernel") != kernel_id:
        raise Refused(f"refused: the signed spawn of {spawn.get('kernel')} is for machine {spawn.get('machine')}")
    try:
        age = clock.now().timestamp() - clock.parse(str(spawn.get("at")), what="at").timestamp()
    except BrainError:
        age = remote.SPAWN_FRESH + 1
    if age < -30 or age > remote.SPAWN_FRESH:  # 30 s of clock skew between machines allowed
        raise Refused(f"refused: the signed spawn of {kernel_id} is {age:.0f}s old (at most {remote.SPAWN_FRESH:g}s)")
    if not remote._bus(brain).set_if_absent(f"machine:spawn-nonce:{spawn.get('nonce')}",
                                            {"kernel": kernel_id}, ttl=remote.SPAWN_FRESH * 2):
        raise Refused(f"refused: the signed spawn of {kernel_id} was used already (a replay)")
    kw = dict(spawn.get("kw") or {})
    k = verbs.kernel_spawn(brain, str(spawn.get("goal") or ""), kernel_id=kernel_id, **kw)
    return kernels.kernel_dir(brain, k.id).joinpath("kernel.yml").read_text(encoding="utf-8")


def run_request(brain: Brain, msg: dict) -> dict:
    """On the owning machine: run one request once, set its reply; returns the reply."""
    b = remote._bus(brain)
    rid = str(msg.get("id") or "")
    key = f"machine:reply:{rid}"
    if not rid:
        return {"ok": False, "error": "a request without an id"}
    if not b.set_if_absent(f"machine:req:{rid}", {"at": clock.iso(clock.now())}, ttl=remote.REPLY_TTL * 24):
        rep = b.get(key) or {"ok": False, "error": f"request {rid} was interrupted on this machine (its "
                                                   "daemon stopped while running it); not run twice"}
        b.set(key, rep, ttl=remote.REPLY_TTL)
        b.delete(remote.HELD + f"{remote.here(brain)}:{rid}")
        return rep
    verb = msg.get("verb")
    kid = msg.get("kernel")
    args, kw = msg.get("args") or [], msg.get("kw") or {}
    prev = os.environ.get("NIKA_REMOTE_RUNNING")
    try:
        if verb not in remote.VERBS or not isinstance(kid, str) or not isinstance(kw, dict):
            raise BrainError(f"a malformed request ({verb!r} on {kid!r})")
        os.environ["NIKA_REMOTE_RUNNING"] = kid
        if verb == "kernel_spawn":  # placed here for its region: the operator's signature decides
            result = spawn_placed(brain, kid, **kw)
        else:
            result = getattr(verbs, verb)(brain, kid, *args, **kw)
        rep = {"ok": True, "result": remote._plain(result)}
    except runtimes.NotTaken as exc:
        rep = {"ok": False, "type": "NotTaken", "error": str(exc), "queued": exc.queued}
    except BrainError as exc:
        rep = {"ok": False, "type": type(exc).__name__, "error": str(exc), "exit_code": exc.exit_code}
    except Exception as exc:  # noqa: BLE001 (the caller gets one line, the daemon goes on)
        rep = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        if prev is None:
            os.environ.pop("NIKA_REMOTE_RUNNING", None)
        else:
            os.environ["NIKA_REMOTE_RUNNING"] = prev
    b.set(key, rep, ttl=remote.REPLY_TTL)
    b.delete(remote.HELD + f"{remote.here(brain)}:{rid}")  # held while this machine was lost: ran once now
    return rep



class MachineService:
    """The daemon's side: heartbeat, requests for this machine's kernels, freeing lost machines' leases."""
    name = "machine"

    def __init__(self, brain: Brain):
        self.brain = brain
        self.every = max(0.2, min(5.0, remote.machine_ttl(brain) / 3))
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.beating: threading.Thread | None = None
        self.served = 0
        self.freed = 0
        self.dropped: list[str] = []
        self.enabled = False

    def _beat(self) -> None:
        m = machine.load(self.brain)
        b = remote._bus(self.brain)
        beat = {"id": m.id, "region": m.region, "pid": os.getpid(), "at": clock.iso(clock.now())}
        b.set(f"machine:{m.id}", beat, ttl=remote.machine_ttl(self.brain))
        reg = b.get(remote.REGISTRY) or {}
        if reg.get(m.id, {}).get("pid") != os.getpid():
            reg[m.id] = beat  # the registry says who was ever up; a lost heartbeat says who is gone
            b.set(remote.REGISTRY, reg)

    def start(self) -> None:
        from nika_brain import bus
        if bus.backend_name(self.brain) != "redis":
            return  # one machine's bus: nothing travels between machines
        self.enabled = True
        self.dropped += remote.reconcile_returned(self.brain)  # before it says it is up again
        self._beat()
        self.thread = threading.Thread(target=self._serve, name="machine-requests", daemon=True)
        self.thread.start()
        # the heartbeat has its own thread: a slow sync or supervisor tick in the daemon's main loop
        # must not let this machine's heartbeat expire (the others would call it lost and free its leases)
        self.beating = threading.Thread(target=self._beats, name="machine-heartbeat", daemon=True)
        self.beating.start()

    def _beats(self) -> None:
        while not self.stopping.wait(self.every):
            try:
                self._beat()
            except BrainError:
                pass  # Redis unreachable: the heartbeat expires, which is the truth


    def _serve(self) -> None:
        me = remote.here(self.brain)
        b = remote._bus(self.brain)
        ch = remote.CHANNEL + me
        # requests a previous daemon of this machine took and never answered come back first (once:
        # later, a pending request is one of ours still running)
        try:
            first = b.reclaim(ch, remote.GROUP, me, 0.0, count=1000)
        except BrainError:
            first = []
        for mid, msg in first:
            threading.Thread(target=self._one, args=(ch, mid, msg), daemon=True).start()
        while not self.stopping.is_set():
            try:
                batch = b.group_read(ch, remote.GROUP, me, count=10, block=1.0)
            except BrainError:
                self.stopping.wait(1.0)
                continue
            for mid, msg in batch:
                threading.Thread(target=self._one, args=(ch, mid, msg), daemon=True).start()

    def _one(self, ch: str, mid: str, msg: dict) -> None:
        try:
            run_request(self.brain, msg)
            self.served += 1
            faults.point("after-remote-request")
        finally:
            try:
                remote._bus(self.brain).ack(ch, remote.GROUP, mid)
            except BrainError:
                pass

    def tick(self) -> None:
        if not self.enabled:
            return
        self.dropped += remote.reconcile_returned(self.brain)  # back from a partition: no restart
        self.freed += remote.free_lost_leases(self.brain)

    def stop(self) -> None:
        self.stopping.set()
        for t in (self.thread, self.beating):
            if t is not None:
                t.join(timeout=5)


def service(brain: Brain) -> MachineService:
    return MachineService(brain)
