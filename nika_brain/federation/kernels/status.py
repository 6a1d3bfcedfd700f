"""`federation status`: each kernel's state as the federation sees it, and the aggregates.

States: alive (live record, heartbeat within federation.heartbeat_ttl), stale (live record, older or
no heartbeat), starting, dead, killed, failed, paused, handed-over (from the record).
"""
from __future__ import annotations

import statistics

from nika_brain import bus
from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation import options
from nika_brain.federation.kernels import health, remote
from nika_brain.state import kernels
from nika_brain.support import clock


def kernel_state(k: kernels.Kernel, hb: dict | None, ttl: float, now: float) -> str:
    if k.status not in ("active",):
        return k.status
    if hb and now - float(hb.get("t", 0)) <= ttl:
        return "alive"
    return "stale"


def status(brain: Brain) -> dict:
    ttl = options.get(brain, "heartbeat_ttl")
    now = clock.now().timestamp()
    try:
        where = f"{bus.backend_name(brain)} ({bus.open_bus(brain).where})"
        bus_ok = True
    except BrainError as exc:
        where, bus_ok = f"{bus.backend_name(brain)} (unreachable: {exc})", False
    rows = []
    for k in kernels.list_kernels(brain):
        hb = None
        if bus_ok:
            try:
                hb = health.last_heartbeat(brain, k.id)
            except BrainError as exc:  # the store went away: show the records, say so
                where, bus_ok = f"{bus.backend_name(brain)} (unreachable: {exc})", False
        m = health.metrics(brain, k.id)
        state = kernel_state(k, hb, ttl, now)
        held = 0
        if bus_ok and remote.status_of(brain, k) == "lost":
            state = "lost"  # its machine is up no more (remote.py)
            held = len(remote.held(brain, k.id))  # its requests wait on that machine's stream
        rows.append({"id": k.id, "state": state, "status": k.status, "machine": k.machine, "held": held,
                     "reason": k.status_reason, "runtime": k.runtime, "goal": k.goal,
                     "limits": k.limits.to_dict(), "enforcement": k.enforcement,
                     "last_heartbeat": hb.get("at") if hb else None, **m})
    by_state: dict[str, int] = {}
    for r in rows:
        by_state[r["state"]] = by_state.get(r["state"], 0) + 1
    pcts = [r["context_pct"] for r in rows if r["context_pct"] is not None and r["state"] == "alive"]
    rates = [r["error_rate"] for r in rows if r["state"] == "alive"]
    return {"bus": where, "bus_ok": bus_ok, "heartbeat_ttl": ttl, "kernels": rows, "aggregates": {
        "kernels": len(rows), "by_state": by_state,
        "mean_context_pct": round(statistics.mean(pcts), 1) if pcts else None,
        "mean_error_rate": round(statistics.mean(rates), 3) if rates else None,
        "queue_depth": sum(r["queue_depth"] for r in rows)}}
