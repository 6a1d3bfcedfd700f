"""A halted run (a step's own BLOCKED_ON, a failure) resumes only when a human says how to go on:
`workflow resume --retry|--skip`. A tripped breaker is the orchestrator's (`_after_breaker`) and
breakerreset.py's: approving its gate or `preflight-check.sh reset <scope>`, the same reset."""
from __future__ import annotations

from datetime import datetime

from nika_brain.brain import Brain
from nika_brain.engine import merging
from nika_brain.engine import orchestrator as orch
from nika_brain.errors import Invalid
from nika_brain.state import runs
from nika_brain.state.runs import END, Run
from nika_brain.state.workflows import find_workflow
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
