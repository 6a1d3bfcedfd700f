"""The kernel-orchestrator (BSI v3): executes a declared workflow mechanically, step by step.

It never decides architecture: it reads workflows/<name>.yml, opens the theme branch, and for each step
runs the preflight, locks the scope, opens the claim, delegates (mode 1: a brief for a human; mode 3:
a satellite process), and routes the result's exit action. Every transition is one atomic write of
runs/<name>.yml under the workflow's mutex, so a crash at any point resumes from the files without
running a step twice or leaking a lock.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.engine import breakerreset, gatebackends, merging, preflight, satellites, signals
from nika_brain.engine.merging import base_checkout, commit_state, merge_into_base  # noqa: F401 (re-exported)
from nika_brain.errors import EXIT_BLOCKED, EXIT_GATE_PENDING, EXIT_REFUSED, BrainError
from nika_brain.gitrepo import branches, git
from nika_brain.state import breakers, claims, gates, locks, runs
from nika_brain.state import zones as zones_mod
from nika_brain.state.runs import END, Run
from nika_brain.state.workflows import Action, Step, Workflow, find_workflow, parse_action, resolve_target
from nika_brain.support import clock, faults


@dataclass(frozen=True)
class Outcome:
    workflow: str
    status: str    # progress | waiting | satellite | gated | blocked | halted | breaker | done | aborted
    message: str = ""
    claim: str | None = None
    gate: str | None = None
    brief: str | None = None
    step: str | None = None
    report: dict | None = None          # done: DONE's report (delivered / partial / skipped / gates)
    events: tuple[str, ...] = ()        # what the drive saw on the way (notify: texts, satellite results)

    @property
    def exit_code(self) -> int:
        return {"gated": EXIT_GATE_PENDING, "blocked": EXIT_BLOCKED, "halted": EXIT_BLOCKED,
                "breaker": EXIT_BLOCKED, "aborted": EXIT_REFUSED}.get(self.status, 0)

    def to_dict(self) -> dict:
        d = {"workflow": self.workflow, "status": self.status, "message": self.message,
             "claim": self.claim, "gate": self.gate, "step": self.step, "exit": self.exit_code,
             "events": list(self.events)}
        if self.report is not None:
            d["report"] = self.report
        return d


# ---- helpers ------------------------------------------------------------------------------------

def lock_workflow(brain: Brain, name: str):
    """The workflow's mutex: every transition of its run happens under it."""
    return brain.mutex(f"workflow-{name}")


def _stamp(run: Run) -> str:
    return f"{run.started:%Y%m%d-%H%M%S}"


def base_of(brain: Brain, wf: Workflow) -> str:
    return wf.base or brain.config.base_branch


def worktree_of(brain: Brain, wf: Workflow) -> Path:
    return branches.theme_worktree_path(wf.branch, brain.worktrees_dir)


def open_branch(brain: Brain, wf: Workflow) -> Path:
    # git worktree add/list/remove read each other's half-written .git/worktrees/<name>/ entries.
    with base_checkout(brain):
        existed = branches.theme_worktree_path(wf.branch, brain.worktrees_dir).is_dir()
        path = branches.open_theme_branch(brain.root, wf.branch, base_of(brain, wf), brain.worktrees_dir)
    if not existed:
        signals.emit(brain, "BRANCH_OPEN", workflow=wf.name, reason=f"{wf.branch} opened at {path}",
                     payload={"branch": wf.branch, "base": base_of(brain, wf), "worktree": str(path)})
    return path


def reindex(brain: Brain) -> None:
    """Regenerate BRAIN-INDEX.md after a transition (inside a drive: once, when it hands over)."""
    from nika_brain.engine import index
    index.soon(brain)


def _agent(brain: Brain, wf: Workflow, step: Step) -> str:
    return step.agent or wf.agent or brain.config.default_agent


def tier_of(step: Step) -> str:
    """Tiered close: validated (code/test steps), atomic (everything else)."""
    return "validated" if step.type in ("code", "test") else "atomic"


def effective(wf: Workflow, run: Run | None) -> Workflow:
    """The workflow with the run's recorded ADAPT changes applied (insert, skip, replace)."""
    if run is None or not run.adaptations:
        return wf
    from nika_brain.state.adapt import apply
    return apply(wf, run.adaptations)


def emit(brain: Brain, type_: str, run: Run, step: str | None = None, claim: str | None = None,
          reason: str = "", payload: dict | None = None) -> None:
    signals.emit(brain, type_, workflow=run.workflow, step=step, claim=claim, reason=reason,
                 payload=payload)


def with_history(run: Run, step: str, claim: str | None, result: str, action: str, now: datetime) -> tuple:
    return run.history + ({"step": step, "claim": claim, "result": result, "action": action,
                           "at": clock.iso(now)},)


# ---- starting a run -------------------------------------------------------------------------------

def _first_step(brain: Brain, wf: Workflow) -> str:
    """Seed rule for a fresh run: the first step without a closed (ok or partial) claim."""
    from nika_brain.engine.index import claim_summaries
    done = {str(c["step"]) for c in claim_summaries(brain)
            if c["status"] == "closed" and c["workflow"] == wf.name and c["result"] in ("ok", "partial")}
    for s in wf.chain:
        if s.id not in done:
            return s.id
    return END


def start_run(brain: Brain, wf: Workflow, *, mode: str | None = None, step: str | None = None,
              context: dict | None = None, restart: bool = False, now: datetime | None = None) -> Run:
    now = now or clock.now()
    with lock_workflow(brain, wf.name):
        run = runs.load_run(brain, wf.name)
        if run is not None and run.active:
            changes = {}
            if mode is not None and mode != run.mode:  # no --mode: the run keeps its own
                changes["mode"] = mode
            if context:
                changes["context"] = {**run.context, **context}
            if step is not None and run.claim is None and run.status == "running":
                changes["cursor"] = str(effective(wf, run).step(step).id)  # inserted steps too
            return runs.update(brain, run, **changes) if changes else run
        if run is not None and not restart and step is None:
            return run  # done or aborted: say so, start again only when asked
        cursor = str(wf.step(step).id) if step is not None else (wf.chain[0].id if restart else _first_step(brain, wf))
        mode = mode or "assisted"
        driver = None
        if brain.config.sync:  # several machines: this one drives the run (its cursor's one writer)
            from nika_brain.state import machine
            driver = machine.load(brain).id
        run = runs.save(brain, Run(wf.name, "running", mode, now, cursor, context=context or {}, driver=driver))
    open_branch(brain, wf)
    emit(brain, "CHECKPOINT", run, cursor, reason=f"run started in {mode} mode")
    return run


# ---- one transition -------------------------------------------------------------------------------

def step_once(brain: Brain, name: str, now: datetime | None = None) -> Outcome:
    """Perform the next transition of the workflow's run and say where it stands."""
    now = now or clock.now()
    with lock_workflow(brain, name):
        run = runs.load_run(brain, name)
        if run is None:
            raise BrainError(f"workflow {name} has no run (start it with workflow-launch)")
        declared = find_workflow(brain, name)
        wf = effective(declared, run)
        if run.status == "done" and run.report:
            return Outcome(name, "done", f"merged {wf.branch} into {base_of(brain, wf)} "
                                         f"({run.report.get('merge')})", report=run.report)
        if run.status in ("done", "aborted"):
            return Outcome(name, run.status, run.reason or f"workflow {name} is {run.status}")
        _release_orphans(brain, wf)
        if run.status == "gated":
            return _after_gate(brain, wf, run, now)
        if run.status == "breaker":
            out = _after_breaker(brain, wf, run, now)
            # The reset is one transition of its own: whoever resumes the run claims the step.
            return out or Outcome(name, "progress", "circuit breaker reset", step=run.cursor)
        if run.status == "blocked" and run.halted:
            return Outcome(name, "halted", run.reason, step=run.cursor)
        if run.status == "blocked":
            run = runs.update(brain, run, status="running", reason="")  # preflight, lock: relaunch = retry
        if run.claim:
            c = _maybe_claim(brain, run.claim)
            if c is None:
                run = runs.update(brain, run, claim=None)
            elif c.is_open:
                return Outcome(name, "satellite" if run.mode == "swarm" else "waiting",
                               f"step {c.step} in progress", claim=c.id, step=str(c.step))
            else:
                return _route(brain, wf, run, c, now)
        adopted = _adopt_open_claim(brain, wf, run)
        if adopted is not None:
            return adopted
        if run.cursor in (None, END):
            return _close(brain, wf, run, now)
        if run.cursor not in {s.id for s in wf.chain}:  # skipped by an ADAPT meanwhile
            run = runs.update(brain, run, cursor=next_in_plan(wf, declared, run.cursor))
            return Outcome(name, "progress", f"step {run.cursor} (adapted plan)", step=run.cursor)
        return _start_step(brain, wf, run, wf.step(run.cursor), now)


def next_in_plan(wf: Workflow, declared: Workflow, step_id: str) -> str:
    """The step after `step_id` in the adapted plan `wf`, even when `step_id` itself was skipped."""
    ids = [s.id for s in wf.chain]
    if step_id in ids:
        nxt = wf.next_of(step_id)
        return nxt.id if nxt else END
    order = [s.id for s in declared.chain]
    later = order[order.index(step_id) + 1:] if step_id in order else []
    return next((sid for sid in later if sid in ids), END)


def _maybe_claim(brain: Brain, claim_id: str) -> claims.Claim | None:
    try:
        return claims.load_claim(brain, claim_id)
    except BrainError:
        if claims.claim_path(brain, claim_id).exists():
            raise
        return None


def _adopt_open_claim(brain: Brain, wf: Workflow, run: Run) -> Outcome | None:
    """A crash between opening a claim and recording it in the run: adopt that claim."""
    from nika_brain.engine.index import claim_summaries
    for row in claim_summaries(brain):
        if row["status"] == "open" and row["workflow"] == wf.name and str(row["step"]) == run.cursor:
            c = claims.load_claim(brain, row["id"])
            if c.is_open and c.opened >= run.started:
                runs.update(brain, run, claim=c.id)
                return Outcome(wf.name, "satellite" if run.mode == "swarm" else "waiting",
                               f"step {c.step} in progress", claim=c.id, step=str(c.step))
    return None


def _release_orphans(brain: Brain, wf: Workflow) -> None:
    """Locks of this workflow's claims that are closed or were never opened (crash leftovers)."""
    marker = f"-{claims.slug(wf.name)}-step-"
    for lk in locks.list_locks(brain):
        if marker not in lk.owner or not lk.owner.startswith("sess-"):
            continue
        c = _maybe_claim(brain, lk.owner)
        if c is None or not c.is_open:
            locks.release(brain, lk.scope, lk.owner, missing_ok=True)


def _block(brain: Brain, run: Run, step: str | None, reason: str, signal: str = "BLOCKED_ON",
           claim: str | None = None) -> Outcome:
    runs.update(brain, run, status="blocked", reason=reason)
    emit(brain, signal, run, step, claim, reason)
    reindex(brain)
    return Outcome(run.workflow, "blocked", reason, claim=claim, step=step)


def gate_id(wf: Workflow, run: Run, step: str, claim: str | None, reason: str) -> str:
    """The one scheme of gate ids: gate-<claim>-<reason>, or gate-<workflow>-<run stamp>-step-<id>-<reason>
    before a step has a claim. Deterministic, so a crash re-opens the same gate."""
    about = claim or f"{wf.name}-{_stamp(run)}-step-{claims.slug(step)}"
    return f"gate-{about}-{reason}"


def _open_gate(brain: Brain, wf: Workflow, run: Run, gate_id: str, message: str, *, step: str,
               claim: str | None, reason: str, after: str, history: tuple | None = None) -> Outcome:
    g = gates.open_gate(brain, gate_id, message, workflow=wf.name, step=step, claim=claim, reason=reason)
    run = runs.update(brain, run, status="gated", gate=g.id, after_gate=after, claim=None,
                      gates=run.gates + ((g.id,) if g.id not in run.gates else ()),
                      history=run.history if history is None else history)
    faults.point("after-gate-open")
    emit(brain, "GATE_PENDING", run, step, claim, message, payload={"gate": g.id})
    reindex(brain)
    # Announced last: if the backend fails (no token, GitHub down), the run is already gated and
    # the next launch announces again, instead of routing the step's result a second time.
    _announce(brain, g)
    return Outcome(wf.name, "gated", message, gate=g.id, claim=claim, step=step)


def _announce(brain: Brain, g: gates.Gate) -> None:
    if not g.pending or g.pr is not None:
        return
    announced = gatebackends.backend(brain).announce(brain, g)
    if announced != g:
        gates.save(brain, announced)


def _after_gate(brain: Brain, wf: Workflow, run: Run, now: datetime) -> Outcome:
    stored = gates.load_gate(brain, run.gate)
    # A decision that is not authentic (hand-edited, or unconfirmed by the review) counts as pending.
    g = gates.effective(brain, stored, review=gatebackends.review_check(brain))
    if g.pending:
        if stored.pending:
            _announce(brain, stored)
        return Outcome(wf.name, "gated", g.message, gate=g.id, step=g.step and str(g.step))
    if g.status == "rejected":
        return abort_run(brain, run, f"gate {g.id} rejected by {g.decided_by}", now)
    if g.reason == "breaker":  # the human inspected: approving the breaker gate resets it
        for b in breakers.list_breakers(brain):
            if b.gate == g.id:
                breakerreset.reset_breaker_state(brain, b.scope, why=f"gate {g.id} approved by {g.decided_by}")
    step_id, _, what = (run.after_gate or "").partition("::")
    ids = {s.id for s in wf.chain}
    if what in ("run", "next"):  # resolved now, in the plan as adapted while the gate was pending
        declared = find_workflow(brain, wf.name)
        cursor = step_id if what == "run" and step_id in ids else next_in_plan(wf, declared, step_id)
        if what == "run" and step_id not in ids and step_id not in [s.id for s in declared.chain]:
            cursor = step_id  # END or an unknown step: as recorded
        runs.update(brain, run, status="running", gate=None, after_gate=None, cursor=cursor,
                    history=_accepted(run, g, now))
        return Outcome(wf.name, "progress", f"gate {g.id} approved")
    run = runs.update(brain, run, status="running", gate=None, after_gate=None)
    return _apply(brain, wf, run, wf.step(step_id), parse_action(what), None, "ok", now)


def _accepted(run: Run, g: gates.Gate, now: datetime) -> tuple:
    """A human's go on a gate opened for a failed step is that step's recorded override: the
    0-failures check then names it as accepted instead of failed."""
    last = next((h for h in reversed(run.history) if str(h.get("step")) == str(g.step)), None)
    if g.step is None or last is None or last.get("result") != "failed" or last.get("claim") != g.claim:
        return run.history
    return with_history(run, str(g.step), g.claim, "accepted", f"gate {g.id} approved by {g.decided_by}", now)


# ---- a step starts ----------------------------------------------------------------------------------

def _start_step(brain: Brain, wf: Workflow, run: Run, step: Step, now: datetime) -> Outcome:
    worktree = worktree_of(brain, wf)
    if not worktree.is_dir():
        open_branch(brain, wf)
    if step.gate == "0-failures":  # the suite must be green before this step may start
        test = step.test or wf.test
        if not test:
            return _block(brain, run, step.id, f"step {step.id} has gate 0-failures but no test command")
        tr = satellites.run_tests(test, worktree)
        if not tr.green:
            return _block(brain, run, step.id, f"0-failures gate red before step {step.id}: "
                                               f"{tr.failed} failed ({test})")
        emit(brain, "CHECKPOINT", run, step.id, reason=f"0-failures gate green before step {step.id} "
              f"({tr.passed} passed in `{test}`)")
    agent = _agent(brain, wf, step)
    with base_checkout(brain):  # not while another run commits or merges there (index.lock, MERGE_HEAD)
        failed = preflight.failures(preflight.run_checks(brain, step.scope, step.zone, agent=agent,
                                                         branch=wf.branch, worktree=worktree, now=now))
    if failed:
        # A zone the card does not grant is a decision the orchestrator must not take: ESCALATE.
        return _block(brain, run, step.id, "preflight failed: " + "; ".join(
            f"{c.name}: {c.reason}" for c in failed),
            signal="ESCALATE" if any(c.name == "zone" for c in failed) else "BLOCKED_ON")
    # A human is asked only for a step that can run: preflight first, then the go gate.
    pre = _pre_gate(brain, wf, run, step)
    if pre is not None:
        return pre
    faults.point("after-preflight")
    claim_id = claims.next_id(brain, wf.name, step.id, now)
    holder = os.getpid() if run.mode == "swarm" else None
    taken: list[str] = []
    # Locks and claim are one transaction: a lock is only ever handed to a written claim. Any error
    # (not only a busy scope) releases what was taken; a kill -9 in between leaves locks owned by a
    # claim id that does not exist, which _release_orphans frees on the next step.
    try:
        for s in step.scope:
            locks.acquire(brain, s, claim_id, pid=holder, now=now)
            taken.append(s)
        faults.point("after-lock")
        c = claims.open_claim(brain, workflow=wf.name, step=step.id, satellite_type=step.type,
                              scope=step.scope, satellite_level=wf.level_of(step), zone=step.zone,
                              story_angle=step.story_angle, agent=agent, on_done=str(step.on_done),
                              on_partial=str(step.partial_action), on_fail=str(step.on_fail),
                              claim_id=claim_id, now=now)
    except BaseException as exc:
        for s in taken:
            with contextlib.suppress(BrainError, OSError):
                locks.release(brain, s, claim_id, missing_ok=True)
        if isinstance(exc, BrainError) and len(taken) < len(step.scope):  # a scope could not be locked
            return _block(brain, run, step.id, f"lock: {exc.message}")
        raise
    faults.point("after-claim-open")
    mark_claim_base(worktree, c.id, settled=[str(h["claim"]) for h in run.history[-1:] if h.get("claim")])
    run = runs.update(brain, run, claim=c.id, status="running")
    emit(brain, "CLAIM_OPEN", run, step.id, c.id, f"step {step.id} claimed ({', '.join(step.scope)})",
          payload={"scope": list(step.scope), "mode": run.mode})
    reindex(brain)
    brief = satellites.render_brief(brain, wf, step, c, worktree=worktree, context=run.context)
    brief_file = brain.state_dir / "briefs" / f"{c.id}.md"
    brain.write(brief_file, brief)
    return Outcome(wf.name, "satellite" if run.mode == "swarm" else "waiting",
                   f"step {step.id} claimed", claim=c.id, brief=brief, step=step.id)


def mark_claim_base(worktree: Path, claim_id: str, settled: list[str] | tuple[str, ...] = ()) -> None:
    """Where the theme branch stands as the claim opens: a failed attempt that committed on the branch
    itself is set aside back to here (service.settle_work). The marks of `settled` claims (an accepted
    close leaves its mark: tidied here, and at the run's end, in the same git process as a new mark)
    go in the same git process."""
    lines = [f"update {CLAIM_BASE}{claim_id} HEAD\n"] + [f"delete {CLAIM_BASE}{c}\n" for c in settled if c != claim_id]
    git.run(worktree, "update-ref", "--stdin", input="".join(lines), check=False)


CLAIM_BASE = "refs/nika/claim-base/"


def _tidy_claim_bases(brain: Brain, run: Run, also: str | None = None) -> None:
    """The marks the run's claims left (mark_claim_base), in one git process."""
    ids = sorted({str(h["claim"]) for h in run.history if h.get("claim")} | ({also} if also else set()))
    if ids:
        git.run(brain.root, "update-ref", "--stdin", input="".join(f"delete {CLAIM_BASE}{c}\n" for c in ids),
                check=False)


def _pre_gate(brain: Brain, wf: Workflow, run: Run, step: Step) -> Outcome | None:
    """gate: human on the step, or (swarm) a step writing a protected zone: a human first."""
    why = None
    if step.gate == "human":
        why = f"step {step.id} of {wf.name} asks for a human go before it runs"
    elif run.mode == "swarm":
        zs = zones_mod.load_zones(brain)
        hits = {z.name for s in step.scope for z in [zones_mod.zone_of(zs, s)] if z and z.level == "protected"}
        if step.zone and zones_mod.zone_named(zs, step.zone).level == "protected":
            hits.add(step.zone)
        if hits:
            why = f"step {step.id} writes protected zone {', '.join(sorted(hits))}: a human go is required"
    if why is None:
        return None
    gid = gate_id(wf, run, step.id, None, "go")
    path = gates.gate_path(brain, gid)
    if path.exists():
        g = gates.effective(brain, gates.load_path(path), review=gatebackends.review_check(brain))
        if g.status == "approved":
            return None
        if g.status == "rejected":
            return abort_run(brain, run, f"gate {gid} rejected by {g.decided_by}", clock.now())
    return _open_gate(brain, wf, run, gid, why, step=step.id, claim=None, reason="human",
                      after=f"{step.id}::run")


# ---- a step's result is routed ------------------------------------------------------------------------

def _route(brain: Brain, wf: Workflow, run: Run, c: claims.Claim, now: datetime) -> Outcome:
    step = wf.step(c.step)
    status = c.result.status if c.result else "failed"
    locks.release_all(brain, c.id)
    tripped = breakers.record(brain, step.scope, status, c.id, now=now)
    emit(brain, "STEP_DONE", run, step.id, c.id, c.result.summary if c.result else "",
          payload={"result": status})
    if tripped:
        b = tripped[0]
        gid = gate_id(wf, run, step.id, c.id, "breaker")
        history = with_history(run, step.id, c.id, status, "signal:CIRCUIT_BREAK", now)
        for t in tripped:
            breakers.set_gate(brain, t.scope, gid)
        out = _open_gate(brain, wf, run, gid, f"circuit breaker: {b.fails} consecutive fails on {b.scope}; "
                         "inspect, then approve to reset and retry", step=step.id, claim=c.id,
                         reason="breaker", after=f"{step.id}::run", history=history)
        run = runs.update(brain, runs.load_run(brain, wf.name), status="breaker",
                          reason=f"circuit breaker tripped on {', '.join(t.scope for t in tripped)}")
        emit(brain, "CIRCUIT_BREAK", run, step.id, c.id, run.reason, payload={"fails": b.fails})
        reindex(brain)
        return Outcome(wf.name, "breaker", run.reason, claim=c.id, gate=out.gate, step=step.id)
    action = {"ok": step.on_done, "partial": step.partial_action, "failed": step.on_fail}[status]
    if status == "partial" and step.on_partial is None and run.mode == "swarm":
        # Mode 3 keeps a human gate on partial results unless the workflow routes them itself.
        action = Action("gate", message=f"step {step.id} partial — go on?")
    if status == "ok" and tier_of(step) == "validated" and not step.test and c.result \
            and (c.result.tests_failed is None or c.result.tests_failed > 0):
        history = with_history(run, step.id, c.id, status, "gate:no-tests", now)
        return _open_gate(brain, wf, run, gate_id(wf, run, step.id, c.id, "no-tests"),
                          f"step {step.id} ({step.type}) has no tests: "
                          "accept its result?", step=step.id, claim=c.id, reason="no-tests",
                          after=f"{step.id}::{action}", history=history)
    run = replace(run, history=with_history(run, step.id, c.id, status, str(action), now), claim=None)
    return _apply(brain, wf, run, step, action, c.id, status, now)


def _apply(brain: Brain, wf: Workflow, run: Run, step: Step, action: Action, claim: str | None,
           status: str, now: datetime) -> Outcome:
    # A failed step is retried when the chain is relaunched; a finished one moves on.
    nxt = wf.next_of(step.id)
    onward = nxt.id if nxt else END
    if action.kind == "trigger":
        target = resolve_target(wf, step, action)
        if target is not None and "/" in target:
            other, sid = target.split("/", 1)
            # The triggered run starts in this run's mode: at once under --wait, else it is listed
            # as "next" when this run ends; a listener on the inbox may start it as well.
            order = {"workflow": other, "step": sid, "context": {"from": wf.name}, "mode": run.mode}
            emit(brain, "ORCHESTRATE", run, step.id, claim, f"trigger {target}", payload=order)
            _send_inbox(brain, {"type": "ORCHESTRATE", **order})
            run = replace(run, context={**run.context, "triggered": list(run.context.get("triggered", []))
                                        + [target]})
            target = None
        runs.save(brain, replace(run, cursor=target or END, status="running", claim=None))
        faults.point("after-route")
        reindex(brain)
        return Outcome(wf.name, "progress", f"step {step.id} → {target or 'end'}")
    if action.kind == "gate":
        return _open_gate(brain, wf, run, gate_id(wf, run, step.id, claim, "partial" if status == "partial"
                                                  else "human"), action.message,
                          step=step.id, claim=claim, reason="partial" if status == "partial" else "human",
                          after=f"{step.id}::next", history=run.history)
    if action.kind == "notify":
        emit(brain, "INFO", run, step.id, claim, action.message)
        runs.save(brain, replace(run, cursor=onward, status="running", claim=None))
        reindex(brain)
        return Outcome(wf.name, "progress", f"notify: {action.message}")
    if action.kind == "abort":
        return abort_run(brain, replace(run, claim=None), f"abort after step {step.id}", now)
    # signal:<TYPE>
    if action.halts:  # the seed: BLOCKED_ON → stop, until a human says how to go on
        run = runs.save(brain, replace(run, cursor=step.id, claim=None, halted=True))
        c = _maybe_claim(brain, claim) if claim else None
        said = c.result.summary if c is not None and c.result and c.result.summary else ""
        out = _block(brain, run, step.id, f"signal {action.target} after step {step.id} ({status})"
                     + (f": {said}" if said else ""), signal=action.target, claim=claim)
        return replace(out, status="halted", step=step.id)
    emit(brain, action.target, run, step.id, claim, f"after step {step.id}")
    runs.save(brain, replace(run, cursor=onward, status="running", claim=None))
    reindex(brain)
    return Outcome(wf.name, "progress", f"signal {action.target}")


def _send_inbox(brain: Brain, message: dict) -> None:
    try:
        from nika_brain import bus
        bus.open_bus(brain).publish(signals.INBOX, message)
    except (ModuleNotFoundError, BrainError) as exc:
        signals.emit(brain, "INFO", reason=f"could not post to the inbox: {exc}", publish=False)


def abort_run(brain: Brain, run: Run, reason: str, now: datetime) -> Outcome:
    marked = run.claim
    if run.claim:
        c = _maybe_claim(brain, run.claim)
        if c is not None and c.is_open:
            claims.close_claim(brain, c.id, "failed", f"aborted: {reason}", now=now)
        locks.release_all(brain, run.claim)
    run = runs.update(brain, run, status="aborted", reason=reason, claim=None, finished=now)
    _tidy_claim_bases(brain, run, marked)
    emit(brain, "ABORT", run, run.cursor, None, reason)
    reindex(brain)
    return Outcome(run.workflow, "aborted", reason)


# ---- the chain ends ---------------------------------------------------------------------------------------

def _close(brain: Brain, wf: Workflow, run: Run, now: datetime) -> Outcome:
    """Orchestrated close: every step closed; merge the theme branch if the 0-failures gate is green
    on exactly what is merged (the committed branch tip)."""
    debt = merging.owed(wf, run)
    tr, untested = None, ()
    if not debt and wf.test:
        tr, untested = merging.run_branch_tests(brain, wf.branch, wf.test)
    green = not debt and (tr is None or tr.green)
    try:
        res = merge_into_base(brain, wf.branch, base_of(brain, wf), green=green,
                              message=f"Merge theme {wf.branch} ({wf.name})",
                              state_message=f"brain: {wf.name} ready to merge")
    except BrainError as exc:
        return _block(brain, run, END, exc.message)
    if not res.merged:
        return _block(brain, run, END, merging.refusal(owed_=debt, tests=tr, conflicts=res.conflicts,
                                                       reason=res.reason, untested=untested))
    faults.point("after-merge")
    accepted = _accepted_steps(run)
    signals.emit(brain, "MERGE", workflow=wf.name, reason=f"{wf.branch} merged into {base_of(brain, wf)}"
                 + (f" (failed steps accepted by a human: {', '.join(accepted)})" if accepted else ""),
                 payload={"branch": wf.branch, "base": base_of(brain, wf), "commit": res.commit})
    return finish_run(brain, wf, run, res.commit, now)


def _accepted_steps(run: Run) -> list[str]:
    return sorted(s for s, r in merging.step_results(run).items() if r == "accepted")


def finish_run(brain: Brain, wf: Workflow, run: Run, commit: str | None, now: datetime, *,
               forced: bool = False) -> Outcome:
    """The branch is in its base (the merge commit exists): DONE with the report, then tidy up. What
    fails after the merge (a worktree git will not remove) is said, never a half-finished run."""
    results = merging.step_results(run)
    skipped = [str(a.get("step")) for a in run.adaptations if a.get("op") == "skip"]
    skipped += [s for s, r in results.items() if r == "skipped" and s not in skipped]
    report = {"delivered": sorted(s for s, r in results.items() if r == "ok"),
              "partial": sorted(s for s, r in results.items() if r == "partial"),
              "accepted": _accepted_steps(run),
              "failed": sorted(s for s, r in results.items() if r == "failed"),
              "skipped": skipped + [s.id for s in wf.chain if s.id not in results and s.id not in skipped],
              "gates": list(run.gates), "merge": commit}
    if forced:
        report["forced"] = True
    if run.context.get("triggered"):
        report["triggered"] = list(run.context["triggered"])
    run = runs.update(brain, run, status="done", finished=now, report=report, reason="", claim=None,
                      gate=None, halted=False)
    emit(brain, "DONE", run, None, None, report_line(report), payload=report)
    notes = []
    worktree = worktree_of(brain, wf)
    with base_checkout(brain):
        try:
            from nika_brain.gitrepo import changes
            if worktree.is_dir():
                ref = f"refs/nika/leftover/{wf.branch}"
                left = changes.set_aside(worktree, ref, f"{wf.name}: left in the theme worktree at DONE")
                if left:
                    notes.append(f"uncommitted in the theme worktree, set aside on {ref}: {', '.join(left[:5])}")
            branches.remove_theme_worktree(brain.root, wf.branch, brain.worktrees_dir)
        except BrainError as exc:
            notes.append(f"the theme worktree {worktree} stays: {exc.message}")
        _tidy_claim_bases(brain, run)
    if notes:
        signals.emit(brain, "INFO", workflow=wf.name, reason="; ".join(notes))
    reindex(brain)
    commit_state(brain, f"brain: {wf.name} done")
    return Outcome(wf.name, "done", f"merged {wf.branch} into {base_of(brain, wf)} ({commit})"
                   + "".join(f"; {n}" for n in notes), report=report)


def report_line(report: dict) -> str:
    """DONE's report, as the card says: delivered / partial / skipped / gates."""
    parts = [f"delivered {', '.join(report.get('delivered') or []) or '-'}",
             f"partial {', '.join(report.get('partial') or []) or '-'}"]
    if report.get("accepted"):
        parts.append(f"accepted by a human {', '.join(report['accepted'])}")
    if report.get("failed"):
        parts.append(f"failed {', '.join(report['failed'])}")
    parts += [f"skipped {', '.join(report.get('skipped') or []) or '-'}",
              f"gates {len(report.get('gates') or [])}"]
    return "; ".join(parts)


def _after_breaker(brain: Brain, wf: Workflow, run: Run, now: datetime) -> Outcome | None:
    """A tripped breaker holds the run until its gate is decided or the breaker is reset by a human.
    Approving the gate is the reset (one transition, one signal); rejecting it aborts the run."""
    step = wf.step(run.cursor)
    g = None
    if run.gate and gates.gate_path(brain, run.gate).exists():
        # Only an authentic decision counts (the operator's signature, or the pull-request review):
        # a breaker file deleted by hand, or a gate edited by hand, is not a reset.
        g = gates.effective(brain, gates.load_gate(brain, run.gate), review=gatebackends.review_check(brain))
    if g is not None and g.status == "rejected":
        return abort_run(brain, run, f"gate {g.id} rejected by {g.decided_by}", now)
    tripped = breakers.tripped_for(brain, step.scope)
    if (g is None and tripped) or (g is not None and g.status != "approved"):
        return Outcome(wf.name, "breaker", run.reason, gate=run.gate, step=step.id)
    for b in tripped:
        breakerreset.reset_breaker_state(brain, b.scope, why=f"gate {g.id} approved by {g.decided_by}" if g else "")
    runs.update(brain, run, status="running", reason="", gate=None, after_gate=None)
    return None
