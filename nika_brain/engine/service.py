"""How people and satellites drive the orchestrator: launch/resume, report, abort, adapt, status,
and the inbound ORCHESTRATE / ADAPT / ABORT signals from the CLI or the bus."""
from __future__ import annotations

import os
import socket
import time
from datetime import datetime
from typing import Callable

from nika_brain.brain import Brain
from nika_brain.engine import gatebackends, orchestrator, satellites, signals
from nika_brain.engine.orchestrator import Outcome
from nika_brain.errors import Blocked, BrainError, Refused
from nika_brain.gitrepo import git
from nika_brain.state import adapt as adapt_mod
from nika_brain.state import claims, locks, runs
from nika_brain.state.workflows import find_workflow
from nika_brain.support import clock, faults

Printer = Callable[[Outcome], None]


def launch(brain: Brain, ref: str, *, mode: str = "assisted", wait: bool = False, restart: bool = False,
           step: str | None = None, context: dict | None = None, poll: float = 1.0,
           timeout: float | None = None, on_event: Printer | None = None) -> Outcome:
    wf = find_workflow(brain, ref)
    run = orchestrator.start_run(brain, wf, mode=mode, step=step, context=context, restart=restart)
    return drive(brain, wf.name, wait=wait, poll=poll, timeout=timeout, on_event=on_event,
                 mode=run.mode)


def drive(brain: Brain, name: str, *, wait: bool = False, poll: float = 1.0, timeout: float | None = None,
          on_event: Printer | None = None, mode: str = "assisted") -> Outcome:
    """Run transitions until the workflow needs someone: a human (mode 1) or it ends/blocks."""
    deadline = None if timeout is None else time.monotonic() + timeout
    shown: set[str] = set()
    relaunch = True  # only the first transition retries a blocked run; one blocked since then stops
    while True:
        run = None if relaunch else runs.load_run(brain, name)
        relaunch = False
        if run is not None and run.status == "blocked":
            out = Outcome(name, "blocked", run.reason)
        else:
            out = orchestrator.step_once(brain, name)
        if out.status == "progress":
            continue
        if out.status == "satellite":
            _run_satellite(brain, name, out)
            continue
        key = f"{out.status}:{out.claim}:{out.gate}"
        if on_event and key not in shown:
            on_event(out)
            shown.add(key)
        if not wait or out.status not in ("waiting", "gated"):
            return out
        if deadline is not None and time.monotonic() >= deadline:
            return out
        if out.status == "gated" and brain.config.gate_backend != "cli":
            gatebackends.sync(brain)
        if out.status == "waiting" and out.claim:
            _keep_locks(brain, out.claim)
        time.sleep(poll)


def _keep_locks(brain: Brain, claim_id: str) -> None:
    """While a human works on a step under --wait, keep its locks from expiring."""
    now = clock.now()
    for lk in locks.list_locks(brain):
        if lk.owner == claim_id and (lk.expires - now).total_seconds() < brain.config.lock_ttl / 2:
            locks.renew(brain, lk.scope, claim_id, now=now)


def _run_satellite(brain: Brain, name: str, out: Outcome) -> None:
    run = runs.load_run(brain, name)
    wf = orchestrator.effective(brain, find_workflow(brain, name), run)
    c = claims.load_claim(brain, out.claim)
    step = wf.step(c.step)
    worktree = orchestrator.worktree_of(brain, wf)
    brief_file = brain.state_dir / "briefs" / f"{c.id}.md"
    brief = out.brief or (brief_file.read_text() if brief_file.exists() else
                          satellites.render_brief(brain, wf, step, c, worktree=worktree, context=run.context))
    if not brief_file.exists():
        brain.write(brief_file, brief)
    result = satellites.launch(brain, c, brief, brief_file, worktree,
                               kernel_settings=satellites.session_settings(brain, run.context.get("kernel")))
    c = claims.load_claim(brain, c.id)
    if not c.is_open:
        # The satellite reported itself; from inside its sandbox it could not commit (Claude Code
        # keeps .git read-only there): its work is committed here, then step_once routes it.
        if worktree.is_dir():
            _commit_work(worktree, c, c.result.summary if c.result else "")
        return
    try:
        report(brain, c.id, result.status or "failed", result.summary or f"satellite exit {result.returncode}")
    except BrainError as exc:
        if not claims.load_claim(brain, c.id).is_open:
            raise
        # Validated close refused (tests red): in swarm mode that is the step's failure.
        report(brain, c.id, "failed", f"tests not green: {exc.message.splitlines()[0]}", validate=False)


def _context(brain: Brain, c: claims.Claim):
    try:
        run = runs.load_run(brain, c.workflow)
    except BrainError:
        return None, None, None
    if run is None:
        return None, None, None
    try:
        wf = orchestrator.effective(brain, find_workflow(brain, c.workflow), run)
        return run, wf, wf.step(c.step)
    except BrainError:
        return run, None, None


def report(brain: Brain, claim_id: str, status: str, summary: str = "", *, tests_passed: int | None = None,
           tests_failed: int | None = None, validate: bool = True, now: datetime | None = None) -> claims.Claim:
    """A satellite's (or human's) result: tiered close, then the orchestrator routes it."""
    c = claims.load_claim(brain, claim_id)
    if not c.is_open:
        raise Refused(f"claim {claim_id} is already closed ({c.result.status if c.result else '?'})")
    waiting = [ch for ch in c.children if claims.load_claim(brain, ch).is_open]
    if waiting:
        raise Blocked(f"orchestrated close: {claim_id} waits for its open children: {', '.join(waiting)}")
    run, wf, step = _context(brain, c)
    in_sandbox = not git_writable(brain)
    if wf is not None and step is not None:
        worktree = orchestrator.worktree_of(brain, wf)
        if worktree.is_dir() and not in_sandbox:
            _commit_work(worktree, c, summary)
        if validate and status == "ok" and orchestrator.tier_of(wf, step) == "validated" and step.test:
            tr = satellites.run_tests(step.test, worktree if worktree.is_dir() else brain.root)
            if not tr.green:
                signals.emit(brain, "INFO", workflow=wf.name, step=step.id, claim=c.id,
                             reason=f"validated close refused: {tr.failed} failed in `{step.test}`")
                raise Blocked(f"tests not green ({tr.failed} failed, {tr.passed} passed in `{step.test}`): "
                                 f"claim {c.id} stays open; fix and report again")
            tests_passed, tests_failed = tr.passed, tr.failed
    c = claims.close_claim(brain, claim_id, status, summary, tests_passed=tests_passed,
                           tests_failed=tests_failed, now=now)
    faults.point("after-claim-close")
    if in_sandbox:
        # An agent closing its claim from inside Claude Code's sandbox: git is read-only here, so
        # committing, routing and merging are left to the orchestrator that launched it.
        return c
    if run is not None and run.claim == c.id:
        orchestrator.step_once(brain, c.workflow)  # routes the result, releases the locks
    else:
        locks.release_all(brain, c.id)
        orchestrator._reindex(brain)
    return c


def git_writable(brain: Brain) -> bool:
    """False inside Claude Code's OS sandbox, which mounts parts of the repository's .git (objects,
    worktrees/) read-only: a commit cannot be made from there."""
    gitdir = brain.root / ".git"
    return all(os.access(p, os.W_OK) for p in (gitdir, gitdir / "objects", gitdir / "worktrees")
               if p.exists())


def _commit_work(worktree, c: claims.Claim, summary: str) -> None:
    """The step's work is committed on the theme branch, attributed to its claim."""
    if not git.run(worktree, "status", "--porcelain", check=False).stdout.strip():
        return
    git.run(worktree, "add", "-A")
    msg = f"{c.workflow} step {c.step}: {summary or c.story_angle or 'work'}\n\nClaim: {c.id}"
    git.run(worktree, "commit", "-q", "-m", msg, env={"NIKA_CLAIM": c.id})


def abort(brain: Brain, name: str, reason: str) -> Outcome:
    with orchestrator._mutex(brain, name):
        run = runs.load_run(brain, name)
        if run is None or not run.active:
            raise BrainError(f"workflow {name} has no active run")
        return orchestrator._abort(brain, run, reason or "aborted by request", clock.now())


def adapt(brain: Brain, name: str, changes: list[dict]) -> runs.Run:
    wf = find_workflow(brain, name)
    with orchestrator._mutex(brain, name):
        run = runs.load_run(brain, name)
        if run is None or not run.active:
            raise BrainError(f"workflow {name} has no active run to adapt")
        stamped = [dict(ch, at=clock.iso(clock.now())) for ch in changes]
        adapt_mod.apply(wf, list(run.adaptations) + stamped)  # validate before recording
        run = runs.update(brain, run, adaptations=run.adaptations + tuple(stamped))
    signals.emit(brain, "INFO", workflow=name, reason=f"ADAPT: {len(changes)} change(s)",
                 payload={"changes": changes})
    orchestrator._reindex(brain)
    return run


def step_states(brain: Brain, name: str) -> list[tuple[str, str]]:
    """(step id, state) in chain order, as BRAIN-INDEX.md shows them (see runs.step_states)."""
    run = runs.load_run(brain, name)
    wf = runs.chain_view(find_workflow(brain, name), run)
    states = runs.step_states(wf, run)
    return [(s.id, states[s.id]) for s in wf.chain]


def handle_inbound(brain: Brain, message: dict, *, on_event: Printer | None = None) -> str:
    """Apply one inbound signal; returns a one-line description."""
    kind = message.get("type") or message.get("signal")
    name = message.get("workflow")
    if not isinstance(name, str) or not name:
        raise BrainError(f"inbound {kind}: missing workflow")
    if kind == "ORCHESTRATE":
        step = message.get("step")
        out = launch(brain, name, mode=message.get("mode", "swarm"),
                     step=None if step is None else str(step), context=message.get("context") or None,
                     on_event=on_event)
        return f"ORCHESTRATE {name}: {out.status} {out.message}"
    if kind == "ADAPT":
        changes = message.get("changes")
        if not isinstance(changes, list):
            raise BrainError("inbound ADAPT: changes must be a list")
        adapt(brain, name, changes)
        return f"ADAPT {name}: {len(changes)} change(s) recorded"
    if kind == "ABORT":
        out = abort(brain, name, str(message.get("reason", "")))
        return f"ABORT {name}: {out.message}"
    raise BrainError(f"unknown inbound signal {kind!r} (ORCHESTRATE, ADAPT, ABORT)")


def listen(brain: Brain, *, once: bool = False, block: float = 1.0, on_line: Callable[[str], None] = print,
           on_event: Printer | None = None) -> int:
    """Consume inbound signals from the bus inbox (a consumer group, so several listeners share it)."""
    from nika_brain import bus
    b = bus.open_bus(brain)
    consumer = f"{socket.gethostname()}-{os.getpid()}"
    handled = 0
    while True:
        for msg_id, msg in b.group_read(signals.INBOX, "orchestrator", consumer, count=10, block=block):
            try:
                on_line(handle_inbound(brain, msg, on_event=on_event))
            except BrainError as exc:
                on_line(f"inbound signal refused: {exc}")
                signals.emit(brain, "INFO", reason=f"inbound signal refused: {exc}", publish=False)
            b.ack(signals.INBOX, "orchestrator", msg_id)
            handled += 1
        if once:
            return handled


def assisted_hint(brain: Brain, name: str) -> str | None:
    """Assisted mode: how the operator starts Claude Code for the step so nika-brain's hooks, rules
    and sandbox apply (a theme worktree has no settings of its own). Installs them if missing."""
    run = runs.load_run(brain, name)
    if run is None:
        return None
    wf = orchestrator.effective(brain, find_workflow(brain, name), run)
    worktree = orchestrator.worktree_of(brain, wf)
    settings = satellites.session_settings(brain, run.context.get("kernel"))
    env = f"NIKA_CLAIM={run.claim} " if run.claim else ""
    return (f"Start Claude Code for this step under nika-brain's hooks and sandbox:\n"
            f"  cd {worktree} && {env}claude --settings {settings}")
