"""What each page shows, as plain dicts the templates render (and `?json` returns).

Everything is read from the brain's files and the bus, as the CLI reads them (`federation status`,
`kernel list`, `gate list`, `kernel proposals`, `workflow status`); records are parsed once per file
version (`records.Records`). Ages are against the wall clock: the page is live.
"""
from __future__ import annotations

import socket
from datetime import datetime
from typing import Any

from nika_brain import bus
from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation import options
from nika_brain.federation.kernels import health, runtimes
from nika_brain.federation.kernels.status import kernel_state
from nika_brain.federation.spawning import proposals
from nika_brain.state import claims, gates, kernels, locks, runs, sessions, workflows
from nika_brain.state import prompts as queue
from nika_brain.support import clock

from .records import Records

HOST = socket.gethostname()


def age(when: datetime | str | None, now: datetime | None = None) -> str:
    if not when:
        return ""
    try:
        t = clock.parse(when) if isinstance(when, str) else when
    except BrainError:
        return ""
    return clock.age(t, now or clock.now())


def _pct(value: Any) -> float | None:
    try:
        return None if value is None else max(0.0, min(100.0, float(value)))
    except (TypeError, ValueError):
        return None


def _latest_sessions(brain: Brain) -> dict[str, sessions.Session]:
    """Each kernel's newest session (one pass over the session records)."""
    out: dict[str, sessions.Session] = {}
    for s in sessions.list_sessions(brain):
        if s.kernel:
            key = s.heartbeat_at or s.started_at or ""
            cur = out.get(s.kernel)
            if cur is None or key >= (cur.heartbeat_at or cur.started_at or ""):
                out[s.kernel] = s
    return out


def limits_text(k: kernels.Kernel) -> str:
    return " ".join(f"{key}={v}" for key, v in k.limits.to_dict().items())


def kernel_row(brain: Brain, k: kernels.Kernel, hb: dict | None, sess: sessions.Session | None,
               ttl: float, now: datetime) -> dict[str, Any]:
    rt = runtimes.load_state(brain, k.id)
    pct = _pct(sess.context_pct if sess is not None and sess.context_pct is not None
               else (hb or {}).get("context_pct"))
    sandbox = getattr(k, "sandbox", None)
    if sandbox is None:
        sandbox = rt.get("sandbox")
    return {
        "id": k.id, "goal": k.goal, "state": kernel_state(k, hb, ttl, now.timestamp()), "status": k.status,
        "reason": k.status_reason or "", "runtime": k.runtime,
        "machine": getattr(k, "machine", None) or (hb or {}).get("host") or rt.get("host") or HOST,
        "context_pct": pct, "queue_depth": len(queue.pending(brain, k.id)),
        "last_heartbeat": (hb or {}).get("at"), "heartbeat_age": age((hb or {}).get("at"), now),
        "limits": limits_text(k), "enforcement": k.enforcement or "",
        "sandbox": None if sandbox is None else ("on" if sandbox not in (False, "off") else "off"),
        "temporary": k.temporary, "parent": k.parent or "", "tags": ", ".join(k.tags),
    }


def kernel_rows(brain: Brain, rec: Records) -> tuple[list[dict], list[str]]:
    ks, bad = rec.kernels(brain.kernels_dir, kernels.load_path)
    if not ks:
        return [], bad
    ttl = options.get(brain, "heartbeat_ttl")
    now = clock.now()
    latest = _latest_sessions(brain)
    try:
        b = bus.open_bus(brain)
        beats = {k.id: b.get(health.heartbeat_key(k.id)) for k in ks}
    except BrainError as exc:
        beats = {}
        bad.append(f"bus: {exc}")
    return [kernel_row(brain, k, beats.get(k.id), latest.get(k.id), ttl, now) for k in ks], bad


def decisions(brain: Brain, rec: Records) -> dict[str, Any]:
    """Pending gates (those of a spawn proposal show as the proposal) and pending spawn proposals."""
    gs, bad = rec.folder(brain.gates_dir, gates.load_path)
    try:
        props = [p for p in proposals.list_proposals(brain, "pending")]
    except BrainError as exc:
        props, bad = [], bad + [f"proposals: {exc}"]
    now = clock.now()
    proposal_gates = {p.get("gate") for p in props}
    gate_rows = [{"id": g.id, "message": g.message, "workflow": g.workflow or "", "step": "" if g.step is None
                  else str(g.step), "claim": g.claim or "", "reason": g.reason or "",
                  "created": clock.iso(g.created), "age": age(g.created, now)}
                 for g in gs if g.pending and g.id not in proposal_gates]
    prop_rows = [{"id": p["id"], "trigger": p.get("trigger", ""), "kernel": p.get("kernel") or "",
                  "goal": p.get("goal", ""), "why": p.get("why", ""), "memory": p.get("memory_estimate", ""),
                  "gate": p.get("gate", ""), "created": str(p.get("created") or ""),
                  "age": age(str(p.get("created") or ""), now)} for p in props]
    gate_rows.sort(key=lambda r: r["created"])
    return {"gates": gate_rows, "proposals": prop_rows, "count": len(gate_rows) + len(prop_rows), "bad": bad}


def _workflow_map(brain: Brain, rec: Records) -> dict[str, workflows.Workflow]:
    wfs, _ = rec.folder(brain.workflows_dir, workflows.load_workflow)
    return {wf.name: wf for wf in wfs}


def run_rows(brain: Brain, rec: Records, *, active_only: bool, cs: list | None = None,
             ls: list | None = None) -> list[dict[str, Any]]:
    rs, _ = rec.folder(runs.runs_dir(brain), runs.load_path)
    if active_only and not any(r.active for r in rs):
        return []
    wfs = _workflow_map(brain, rec)
    if cs is None:
        cs, _ = rec.folder(brain.claims_dir, claims.load_path)
    if ls is None:
        ls, _ = rec.folder(brain.locks_dir, locks.load_lock)
    out = []
    for r in sorted(rs, key=lambda r: r.started, reverse=True):
        if active_only and not r.active:
            continue
        wf = runs.chain_view(wfs.get(r.workflow), r)
        states = runs.step_states(wf, r)
        steps = []
        for s in (wf.chain if wf else ()):
            step_claims = [c for c in cs if c.workflow == r.workflow and str(c.step) == s.id]
            open_ids = {c.id for c in step_claims if c.is_open}
            steps.append({"id": s.id, "type": s.type, "scope": ", ".join(s.scope), "state": states.get(s.id, ""),
                          "claims": [{"id": c.id, "status": c.status,
                                      "result": c.result.status if c.result else ""} for c in step_claims[-3:]],
                          "locks": [lk.scope for lk in ls if lk.owner in open_ids],
                          "gate": r.gate if r.cursor == s.id and r.gate else ""})
        finished = sum(1 for v in states.values() if v in ("done", "partial", "skipped"))
        out.append({"workflow": r.workflow, "status": r.status, "mode": r.mode, "cursor": r.cursor or "",
                    "gate": r.gate or "", "claim": r.claim or "", "reason": r.reason, "halted": r.halted,
                    "started": clock.iso(r.started), "age": age(r.started),
                    "progress": f"{finished}/{len(states)}", "steps": steps, "next": next_action(r),
                    "report": r.report if r.status == "done" else None})
    return out


def next_action(r: runs.Run) -> str:
    """What moves the run on, in the CLI's words."""
    if r.status == "done":
        return "nothing: done"
    if r.gate:
        return f"decide gate {r.gate}"
    if r.halted or r.status in ("blocked", "breaker"):
        return f"`nika-brain workflow resume {r.workflow} --retry|--skip` (halted: {r.reason or r.status})"
    if r.claim:
        return f"close claim {r.claim}"
    if r.active:
        return f"`nika-brain workflow resume {r.workflow}`"
    return r.status


def overview(brain: Brain, rec: Records, signals: list[dict]) -> dict[str, Any]:
    krows, bad = kernel_rows(brain, rec)
    cs, _ = rec.folder(brain.claims_dir, claims.load_path)
    ls, _ = rec.folder(brain.locks_dir, locks.load_lock)
    by_state: dict[str, int] = {}
    for r in krows:
        by_state[r["state"]] = by_state.get(r["state"], 0) + 1
    dec = decisions(brain, rec)
    return {"kernels": krows, "by_state": by_state, "decisions": dec,
            "runs": run_rows(brain, rec, active_only=True, cs=cs, ls=ls),
            "open_claims": sum(1 for c in cs if c.is_open), "locks": len(ls), "signals": signals,
            "bad": bad + dec["bad"], "bus": bus.backend_name(brain), "host": HOST}


def kernel_page(brain: Brain, rec: Records, kernel_id: str, beats: list[dict]) -> dict[str, Any]:
    from nika_brain.engine.index import federation_rows

    from . import asks
    k = kernels.load_kernel(brain, kernels.check_id(kernel_id))
    try:
        hb = bus.open_bus(brain).get(health.heartbeat_key(k.id))
    except BrainError:
        hb = None
    sess = [s for s in sessions.list_sessions(brain) if s.kernel == k.id]
    sess.sort(key=lambda s: s.started_at or "", reverse=True)
    row = kernel_row(brain, k, hb, sess[0] if sess else None, options.get(brain, "heartbeat_ttl"), clock.now())
    sids = {s.id for s in sess}
    cs, _ = rec.folder(brain.claims_dir, claims.load_path)
    mine = [c for c in cs if c.session in sids or c.id in {s.claim for s in sess}]
    fed = federation_rows(brain)
    return {
        "kernel": row, "record": kernels.to_dict(k), "runtime": runtimes.load_state(brain, k.id),
        "chart": chart(beats), "beats": len(beats),
        "directives": [d.__dict__ for d in kernels.list_directives(brain, k.id)][::-1][:30],
        "asks": asks.for_kernel(brain, k.id)[:20],
        "claims": [{"id": c.id, "status": c.status, "scope": ", ".join(c.scope), "workflow": c.workflow,
                    "result": c.result.status if c.result else ""} for c in mine[-30:]][::-1],
        "sessions": [{"id": s.id, "started_at": s.started_at or "", "heartbeat_at": s.heartbeat_at or "",
                      "context_pct": s.context_pct, "ended_at": s.ended_at or "", "end_reason": s.end_reason or ""}
                     for s in sess[:20]],
        "lineage": [{"id": p.id, "status": p.status, "goal": p.goal} for p in kernels.lineage(brain, k)],
        "handovers": [h for h in fed["handovers"] if k.id in (h["from_kernel"], h["successor"])],
        "proposals": [p for p in fed["proposals"] if p["kernel"] == k.id],
    }


# ---- the heartbeat chart: an inline SVG, drawn here (no script, no library) ------------------------

W, H, PAD = 640, 140, 24


def chart(beats: list[dict]) -> dict[str, Any]:
    """Polylines of context % and queue depth over the heartbeats' times."""
    pts = [(float(b["t"]), b.get("context_pct"), b.get("queue_depth") or 0) for b in beats
           if isinstance(b.get("t"), (int, float))]
    if not pts:
        return {"w": W, "h": H, "context": "", "queue": "", "dots": [], "t0": "", "t1": "", "qmax": 0}
    t0, t1 = pts[0][0], pts[-1][0]
    span = (t1 - t0) or 1.0
    qmax = max(1, max(int(q) for _, _, q in pts))

    def x(t: float) -> float:
        return round(PAD + (t - t0) / span * (W - 2 * PAD), 1)

    def y(frac: float) -> float:
        return round(H - PAD - frac * (H - 2 * PAD), 1)

    ctx = [(x(t), y((_pct(c) or 0) / 100)) for t, c, _ in pts if _pct(c) is not None]
    que = [(x(t), y(int(q) / qmax)) for t, _, q in pts]
    return {"w": W, "h": H, "context": " ".join(f"{a},{b}" for a, b in ctx),
            "queue": " ".join(f"{a},{b}" for a, b in que), "dots": ctx[-1:],
            "t0": clock.iso(datetime.fromtimestamp(t0, clock.now().tzinfo)),
            "t1": clock.iso(datetime.fromtimestamp(t1, clock.now().tzinfo)), "qmax": qmax}
