"""What the operator is told after every transition: one line saying what happens next.

`claim close`, `gate approve|reject`, `workflow-launch` and `workflow resume` all end with this line,
built here and only here, so each outcome reads the same wherever it comes from.
"""
from __future__ import annotations

from nika_brain.brain import Brain
from nika_brain.engine.orchestrator import Outcome
from nika_brain.state import breakers, runs

RESUME = "nika-brain workflow resume {wf}"


def line(brain: Brain, out: Outcome) -> str:
    wf = out.workflow
    resume = RESUME.format(wf=wf)
    if out.status == "progress":
        run = runs.load_run(brain, wf)
        step = run.cursor if run else None
        return f"next: step {step} of {wf} — `{resume}`" if step and step != runs.END else \
            f"next: finish {wf} (merge) — `{resume}`"
    if out.status == "waiting":
        return (f"next: do step {out.step} of {wf}, then `nika-brain claim close {out.claim} "
                f"--status ok|partial|failed --summary \"...\"`")
    if out.status == "satellite":
        return f"next: a satellite runs step {out.step} of {wf} (claim {out.claim}) — `{resume}`"
    if out.status == "gated":
        return (f"next: gate {out.gate} — {out.message} — `nika-brain gate approve {out.gate}` or "
                f"`nika-brain gate reject {out.gate}`")
    if out.status == "halted":
        return (f"halted: {out.message} — `{resume} --retry` (run step {out.step} again), "
                f"`{resume} --skip` (go past it) or `nika-brain workflow abort {wf}`")
    if out.status == "breaker":
        scopes = sorted({b.scope for b in breakers.list_breakers(brain) if b.tripped and
                         (out.gate is None or b.gate == out.gate)})
        resets = " ".join(f"`scripts/preflight-check.sh reset {s}`" for s in scopes) or \
            "`scripts/preflight-check.sh reset <scope>`"
        gate = f" or `nika-brain gate approve {out.gate}`" if out.gate else ""
        return f"breaker: {out.message} — inspect, then {resets}{gate}, then `{resume}`"
    if out.status == "blocked":
        return f"blocked: {out.message} — fix it, then `{resume}`"
    if out.status == "done":
        run = runs.load_run(brain, wf)
        mode = run.mode if run else "assisted"
        nxt = [f"`nika-brain workflow-launch {t.split('/', 1)[0]} --step {t.split('/', 1)[1]} --mode {mode}`"
               for t in ((run.report or {}).get("triggered", []) if run else [])]
        return f"DONE: {wf} {out.message}" + (f" — next (triggered): {', '.join(nxt)}" if nxt else "")
    if out.status == "aborted":
        return f"aborted: {out.message} — start again with `nika-brain workflow-launch {wf} --restart`"
    return f"{out.status}: {out.message}"
