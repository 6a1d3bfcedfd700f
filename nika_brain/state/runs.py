"""Workflow runs: runs/<workflow>.yml, the orchestrator's cursor through a chain.

Every transition of the loop (step claimed, result routed, gate pending, blocked, done) is one atomic
write of this file, so a crash or kill -9 at any point resumes from the files: the claim and lock
files tell what happened after the last write, and the cursor what to do next.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.support import clock
from nika_brain.support.schema import F, fields, name, step_id, step_id_error
from nika_brain.support.yamlsafe import Doc, Parsed, dumps_fast

STATUSES = ("running", "gated", "blocked", "breaker", "done", "aborted")
MODES = ("assisted", "swarm")
END = "END"


@dataclass(frozen=True)
class Run:
    workflow: str
    status: str
    mode: str
    started: datetime
    cursor: str | None = None        # the step to run next, or running now; END when the chain is done
    claim: str | None = None         # the open claim of the cursor step
    gate: str | None = None          # the pending gate blocking the run
    after_gate: str | None = None    # where the chain goes when that gate is approved
    reason: str = ""
    context: dict = field(default_factory=dict)
    history: tuple[dict, ...] = ()   # {step, claim, result, action, at}
    adaptations: tuple[dict, ...] = ()
    gates: tuple[str, ...] = ()      # every gate the run triggered
    finished: datetime | None = None
    report: dict | None = None
    halted: bool = False             # the step itself halted: only `workflow resume --retry/--skip` goes on
    driver: str | None = None        # the machine driving the run (a brain on several machines): its one writer

    @property
    def active(self) -> bool:
        return self.status in ("running", "gated", "blocked", "breaker")


def _cursor_error(value) -> str | None:
    return None if value == END else step_id_error(value)


_SPEC = {
    "workflow": F(str, required=True, check=name), "status": F(str, required=True, choices=STATUSES),
    "mode": F(str, default="assisted", choices=MODES), "started": F(str, required=True),
    "cursor": F((str, int), check=_cursor_error), "claim": F(str), "gate": F(str),
    "after_gate": F((str, int)),
    "reason": F(str, default=""), "context": F(dict, default={}), "history": F(list, default=[]),
    "adaptations": F(list, default=[]), "gates": F(list, default=[]), "finished": F(str),
    "report": F(dict), "halted": F(bool, default=False), "driver": F(str, check=name),
}


def runs_dir(brain: Brain) -> Path:
    return brain.runs_dir


def run_path(brain: Brain, workflow: str) -> Path:
    if name(workflow):
        raise BrainError(f"not a workflow name: {workflow!r}")
    return runs_dir(brain) / f"{workflow}.yml"


def load_path(path: Path) -> Run:
    return _PARSED.load(path)


def _from_doc(path: Path, doc: Doc) -> Run:  # noqa: ARG001 (yamlsafe.Parsed's signature)
    v = fields(doc, doc.data, (), _SPEC)
    for key in ("history", "adaptations"):
        for i, item in enumerate(v[key]):
            if not isinstance(item, dict):
                raise doc.error("expected a mapping", key, i)
    try:
        started = clock.parse(v["started"], what="started")
        finished = clock.parse(v["finished"], what="finished") if v["finished"] else None
    except BrainError as exc:
        raise doc.error(exc.message, "started") from exc
    return Run(v["workflow"], v["status"], v["mode"], started,
               None if v["cursor"] is None else step_id(v["cursor"]), v["claim"], v["gate"],
               None if v["after_gate"] is None else str(v["after_gate"]), v["reason"], v["context"],
               tuple(v["history"]), tuple(v["adaptations"]), tuple(str(g) for g in v["gates"]),
               finished, v["report"], v["halted"], v["driver"])


_PARSED = Parsed(_from_doc)


def to_dict(r: Run) -> dict:
    return {"workflow": r.workflow, "status": r.status, "mode": r.mode, "started": clock.iso(r.started),
            "cursor": r.cursor, "claim": r.claim, "gate": r.gate, "after_gate": r.after_gate,
            "reason": r.reason, "context": r.context, "history": list(r.history),
            "adaptations": list(r.adaptations), "gates": list(r.gates),
            "finished": clock.iso(r.finished) if r.finished else None, "report": r.report,
            **({"halted": True} if r.halted else {}), **({"driver": r.driver} if r.driver else {})}


def load_run(brain: Brain, workflow: str) -> Run | None:
    path = run_path(brain, workflow)
    return load_path(path) if path.exists() else None


def list_runs(brain: Brain) -> list[Run]:
    return brain.load_all(runs_dir(brain), load_path)


def save(brain: Brain, run: Run) -> Run:
    brain.write(run_path(brain, run.workflow), dumps_fast(to_dict(run)))
    return run


def update(brain: Brain, run: Run, **changes) -> Run:
    return save(brain, replace(run, **changes))


def driven_elsewhere(brain: Brain, run: Run) -> str | None:
    """The machine driving `run` when it is not this one (a brain on several machines)."""
    if not run.driver:
        return None
    from nika_brain.state import machine
    here = machine.load(brain).id
    return None if run.driver == here else run.driver


def take_over(brain: Brain, workflow: str) -> Run:
    """This machine drives the run from now on (an explicit takeover, e.g. its machine is gone)."""
    from nika_brain.state import machine
    run = load_run(brain, workflow)
    if run is None:
        raise BrainError(f"workflow {workflow} has no run")
    return update(brain, run, driver=machine.load(brain).id)


# ---- how the index and `workflow status` show a run -----------------------------------------------

_RESULT_STATE = {"ok": "done", "partial": "partial", "failed": "failed", "skipped": "skipped",
                 "accepted": "accepted"}


def chain_view(wf, run: Run | None):
    """The chain as the run executes it: inserted and replaced steps applied, skipped ones kept
    (they show as skipped). A bad ADAPT is reported by the orchestrator; here the declared chain shows."""
    if wf is None or run is None:
        return wf
    changes = [a for a in run.adaptations if isinstance(a, dict) and a.get("op") != "skip"]
    if not changes:
        return wf
    from nika_brain.state.adapt import apply
    try:
        return apply(wf, changes)
    except BrainError:
        return wf


def step_states(wf, run: Run | None) -> dict[str, str]:
    """State of each step of `wf` (chain_view): done | partial | failed from the latest result,
    overridden at the cursor by running | gated | blocked while the run is active; skipped; pending."""
    states = {s.id: "pending" for s in wf.chain} if wf else {}
    if run is None:
        return states
    for a in run.adaptations:
        if isinstance(a, dict) and a.get("op") == "skip" and a.get("step") is not None:
            states[str(a["step"])] = "skipped"
    for h in run.history:
        if isinstance(h, dict) and h.get("step") is not None and h.get("result") in _RESULT_STATE:
            states[str(h["step"])] = _RESULT_STATE[h["result"]]
    if run.status == "done":  # as the report says: a step the run never went through was skipped
        states = {k: ("skipped" if v == "pending" else v) for k, v in states.items()}
    cur = run.cursor
    if cur is not None and cur in states and run.active:
        if run.status == "gated" or run.gate:
            states[cur] = "gated"
        elif run.status in ("blocked", "breaker"):
            states[cur] = "blocked"
        elif run.claim:
            states[cur] = "running"
    return states
