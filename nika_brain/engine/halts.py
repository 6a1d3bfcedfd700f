"""What holds a run until a human says how to go on: a halt (a step's own BLOCKED_ON, a failure) and
a tripped circuit breaker. A halted run resumes only by `workflow resume --retry|--skip`; a breaker
only by approving its gate or `preflight-check.sh reset <scope>` — both the same reset."""
from __future__ import annotations

from datetime import datetime

from nika_brain.brain import Brain
from nika_brain.engine import gatebackends, merging, signals
from nika_brain.engine import orchestrator as orch
from nika_brain.errors import Invalid
from nika_brain.state import breakers, gates, runs
from nika_brain.state.runs import END, Run
from nika_brain.state.workflows import Workflow, find_workflow
from nika_brain.support import clock


def resume_halted(brain: Brain, name: str, *, retry: bool = False, skip: bool = False,
                  now: datetime | None = None) -> Run:
    """A human says how a halted run goes on: re-run the halted step, or go past it (recorded)."""
    if retry == skip:
        raise Invalid("say how to go on: --retry (re-run the halted step) or --skip (go past it)")
    now = now or clock.now()
    with orch.lock_workflow(brain, name):
        run = runs.load_run(brain, name)
        if run is None or run.status != "blocked":
            raise Invalid(f"workflow {name} is not halted or blocked ({run.status if run else 'no run'}): "
                          f"go on with `nika-brain workflow resume {name}`")
        wf = orch.effective(find_workflow(brain, name), run)
        at_end = run.cursor in (None, END)
        if at_end:  # blocked before the merge: the failed step is the one to retry or go past
            failed = merging.owed(wf, run).failed
            if not failed:
                raise Invalid(f"workflow {name} has no failed step to {'retry' if retry else 'skip'}: "
                              f"{run.reason} — fix it, then `nika-brain workflow resume {name}`")
            step = wf.step(failed[0])
        else:
            step = wf.step(run.cursor)
        if retry:
            run = runs.update(brain, run, status="running", reason="", halted=False, cursor=step.id)
        else:
            nxt = wf.next_of(step.id)
            run = runs.update(brain, run, status="running", reason="", halted=False,
                              cursor=END if at_end or not nxt else nxt.id,
                              history=orch.with_history(run, step.id, None, "skipped", "resume --skip", now))
    orch.emit(brain, "CHECKPOINT", run, step.id, reason=f"resumed by a human: {'retry' if retry else 'skip'} "
          f"step {step.id}")
    return run


def after_breaker(brain: Brain, wf: Workflow, run: Run, now: datetime) -> orch.Outcome | None:
    """A tripped breaker holds the run until its gate is decided or the breaker is reset by a human.
    Approving the gate is the reset (one transition, one signal); rejecting it aborts the run."""
    step = wf.step(run.cursor)
    g = None
    if run.gate and gates.gate_path(brain, run.gate).exists():
        # Only an authentic decision counts (the operator's signature, or the pull-request review):
        # a breaker file deleted by hand, or a gate edited by hand, is not a reset.
        g = gates.effective(brain, gates.load_gate(brain, run.gate), review=gatebackends.review_check(brain))
    if g is not None and g.status == "rejected":
        return orch.abort_run(brain, run, f"gate {g.id} rejected by {g.decided_by}", now)
    tripped = breakers.tripped_for(brain, step.scope)
    if (g is None and tripped) or (g is not None and g.status != "approved"):
        return orch.Outcome(wf.name, "breaker", run.reason, gate=run.gate, step=step.id)
    for b in tripped:
        reset_breaker_state(brain, b.scope, why=f"gate {g.id} approved by {g.decided_by}" if g else "")
    runs.update(brain, run, status="running", reason="", gate=None, after_gate=None)
    return None


def reset_breaker_state(brain: Brain, scope: str, *, why: str = "") -> breakers.Breaker | None:
    """Reset one breaker and journal it (BREAKER_RESET); its pending gate is approved with it."""
    b = breakers.reset(brain, scope)
    if b is None:
        return None
    if b.gate and gates.gate_path(brain, b.gate).exists() and gates.load_gate(brain, b.gate).pending:
        gates.decide(brain, b.gate, "approve", note=f"breaker reset on {b.scope}")
    signals.emit(brain, "BREAKER_RESET", reason=f"circuit breaker reset on {b.scope} after {b.fails} fails"
                 + (f" ({why})" if why else ""), payload={"scope": b.scope, "gate": b.gate})
    return b
