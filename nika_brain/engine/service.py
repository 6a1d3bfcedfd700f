"""How people and satellites drive the orchestrator: launch/resume, report, abort, adapt, status,
and the inbound ORCHESTRATE / ADAPT / ABORT signals from the CLI or the bus."""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Callable

from nika_brain.brain import Brain
from nika_brain.engine import breakerreset, gatebackends, halts, orchestrator, preflight, satellites, signals
from nika_brain.engine.orchestrator import Outcome
from nika_brain.errors import Blocked, BrainError, Invalid, MissingTestRunner, Refused
from nika_brain.gitrepo import git
from nika_brain.state import adapt as adapt_mod
from nika_brain.state import breakers, claims, gates, locks, runs
from nika_brain.state.workflows import find_workflow
from nika_brain.support import clock, faults

Printer = Callable[[Outcome], None]


def launch(brain: Brain, ref: str, *, mode: str | None = None, wait: bool = False, restart: bool = False,
           step: str | None = None, context: dict | None = None, poll: float = 1.0,
           timeout: float | None = None, on_event: Printer | None = None) -> Outcome:
    wf = find_workflow(brain, ref)
    before = runs.load_run(brain, wf.name)
    if before is not None and before.status == "done" and step is not None and not restart:
        raise Refused(f"workflow {wf.name} is done (merged {(before.report or {}).get('merge')}); "
                      "run it again only when asked: --restart (ORCHESTRATE: rerun)")
    if restart and before is not None and before.active:
        raise Refused(f"workflow {wf.name} has an active run ({before.status}, step {before.cursor}): "
                      f"--restart starts a finished or aborted run again and did nothing here; go on with "
                      f"`nika-brain workflow resume {wf.name}` or stop it with `nika-brain workflow abort {wf.name}`")
    if step is not None:
        orchestrator.effective(wf, before if before is not None and before.active else None).step(step)
    if before is not None and before.status == "done" and not restart and step is None:
        # A finished run is said once, with the way to run it again: nothing starts, nothing triggers.
        # (An aborted one already says so: its next-step line names --restart.)
        out = orchestrator.step_once(brain, wf.name)
        out = replace(out, message=f"{out.message} — already done; "
                                   f"`nika-brain workflow-launch {wf.name} --restart` runs it again")
        if on_event:
            on_event(out)
        return out
    orchestrator.start_run(brain, wf, mode=mode, step=step, context=context, restart=restart)
    out = drive(brain, wf.name, wait=wait, poll=poll, timeout=timeout, on_event=on_event)
    done = runs.load_run(brain, wf.name) if out.status == "done" else None
    if done is not None and (wait or done.mode == "swarm"):
        # The run is driven (--wait, swarm, a listener): triggered runs start at once, and it is said.
        for target in (done.report or {}).get("triggered", []):
            other, sid = target.split("/", 1)
            if _finished(brain, other):
                continue  # never re-run a finished workflow silently: the DONE line lists its command
            if on_event:
                on_event(Outcome(wf.name, "info", f"trigger {target}: starting {other} at step {sid} "
                                                  f"({done.mode})"))
            out = launch(brain, other, mode=done.mode, wait=wait, step=sid, context={"from": wf.name},
                         poll=poll, timeout=timeout, on_event=on_event)
            out = replace(out, events=(f"trigger {target}: started {other} at step {sid}",) + out.events)
    return out


def _finished(brain: Brain, name: str) -> bool:
    run = runs.load_run(brain, name)
    return run is not None and run.status == "done"


def drive(brain: Brain, name: str, *, wait: bool = False, poll: float = 1.0, timeout: float | None = None,
          on_event: Printer | None = None) -> Outcome:
    """Run transitions until the workflow needs someone: a human (mode 1) or it ends/blocks. The index
    is regenerated when the drive hands over (engine/index.held), not after each transition."""
    from nika_brain.engine import index
    with index.held(brain):
        return _drive(brain, name, wait=wait, poll=poll, timeout=timeout, on_event=on_event)


def _drive(brain: Brain, name: str, *, wait: bool, poll: float, timeout: float | None,
           on_event: Printer | None) -> Outcome:
    from nika_brain.engine import index
    deadline = None if timeout is None else time.monotonic() + timeout
    shown: set[str] = set()
    events: list[str] = []

    def note(text: str) -> None:
        events.append(text)
        if on_event:
            on_event(Outcome(name, "info", text))

    relaunch = True  # only the first transition retries a blocked run; one blocked since then stops
    while True:
        run = None if relaunch else runs.load_run(brain, name)
        relaunch = False
        if run is not None and run.status == "blocked":
            out = Outcome(name, "halted" if run.halted else "blocked", run.reason, step=run.cursor)
        else:
            out = orchestrator.step_once(brain, name)
        if out.status == "progress":
            if out.message.startswith("notify: "):
                note(out.message)
            continue
        if out.status == "satellite":
            said = _run_satellite(brain, name, out)
            if isinstance(said, Outcome):
                out = said  # its relaunch was refused (preflight): the run is blocked
            else:
                for text in said:
                    note(text)
                continue
        key = f"{out.status}:{out.claim}:{out.gate}"
        if on_event and key not in shown:
            on_event(out)
            shown.add(key)
        if not wait or out.status not in ("waiting", "gated"):
            return replace(out, events=tuple(events))
        if deadline is not None and time.monotonic() >= deadline:
            return replace(out, events=tuple(events))
        if out.status == "gated" and brain.config.gate_backend != "cli":
            gatebackends.sync(brain)
        if out.status == "waiting" and out.claim:
            _keep_locks(brain, out.claim)
        index.flush(brain)   # someone is waited for: they find the index of the state they wait in
        time.sleep(poll)


def _keep_locks(brain: Brain, claim_id: str) -> None:
    """While a human works on a step under --wait, keep its locks from expiring."""
    now = clock.now()
    for lk in locks.list_locks(brain):
        if lk.owner == claim_id and (lk.expires - now).total_seconds() < brain.config.lock_ttl / 2:
            locks.renew(brain, lk.scope, claim_id, now=now)


def _run_satellite(brain: Brain, name: str, out: Outcome) -> list[str] | Outcome:
    """Run (or, after a crash, find) the satellite of the open claim and report its result. A step
    never runs twice at once: a live satellite of the claim is waited for and its result adopted;
    a relaunch of a claim whose satellite is gone runs preflight like any launch."""
    run = runs.load_run(brain, name)
    wf = orchestrator.effective(find_workflow(brain, name), run)
    c = claims.load_claim(brain, out.claim)
    step = wf.step(c.step)
    worktree = orchestrator.worktree_of(brain, wf)
    result = None
    if out.brief is None:  # not a fresh claim: a resume after a crash
        pid = satellites.alive(brain, c.id)
        if pid is not None:
            signals.emit(brain, "INFO", workflow=name, step=step.id, claim=c.id,
                         reason=f"the satellite of {c.id} is still running (pid {pid}): waiting for it")
            deadline = time.monotonic() + brain.config.satellite_timeout
            while satellites.alive(brain, c.id) == pid and time.monotonic() < deadline:
                time.sleep(0.1)
            result = satellites.collect(brain, c.id)
        elif satellites.launched(brain, c.id) and satellites.collect(brain, c.id, 0).status is not None:
            result = satellites.collect(brain, c.id, 0)  # it finished while no one was there: adopt it
        else:
            failed = preflight.failures(preflight.run_checks(brain, step.scope, step.zone, claim=c.id,
                                                             agent=c.agent, branch=wf.branch,
                                                             worktree=worktree))
            if failed:
                reason = "preflight failed: " + "; ".join(f"{x.name}: {x.reason}" for x in failed)
                with orchestrator.lock_workflow(brain, name):
                    run = runs.update(brain, runs.load_run(brain, name), status="blocked", reason=reason)
                orchestrator.emit(brain, "BLOCKED_ON", run, step.id, c.id, reason)
                return Outcome(name, "blocked", reason, claim=c.id, step=step.id)
    if result is None:
        brief_file = brain.state_dir / "briefs" / f"{c.id}.md"
        brief = out.brief or (brief_file.read_text() if brief_file.exists() else
                              satellites.render_brief(brain, wf, step, c, worktree=worktree, context=run.context))
        if not brief_file.exists():
            brain.write(brief_file, brief)
        result = satellites.launch(brain, c, brief, brief_file, worktree,
                                   kernel_settings=satellites.session_settings(brain, run.context.get("kernel")),
                                   timeout=brain.config.satellite_timeout)
        if result.unavailable:  # said, and the claim stays open for a resume once it is set up
            with orchestrator.lock_workflow(brain, name):
                run = runs.update(brain, runs.load_run(brain, name), status="blocked", reason=result.summary)
            orchestrator.emit(brain, "BLOCKED_ON", run, step.id, c.id, result.summary)
            return Outcome(name, "blocked", result.summary, claim=c.id, step=step.id)
    c = claims.load_claim(brain, c.id)
    if not c.is_open:
        # The satellite reported itself; from inside its sandbox it could not commit (Claude Code
        # keeps .git read-only there): its work is committed here, then step_once routes it.
        if worktree.is_dir():
            settle_work(worktree, c, c.result.status if c.result else "failed",
                        c.result.summary if c.result else "")
        return [_said(c)]
    try:
        closed = report(brain, c.id, result.status or "failed",
                        result.summary or f"satellite exit {result.returncode}")
    except BrainError as exc:
        if not claims.load_claim(brain, c.id).is_open:
            raise
        # A refused close (tests red, no work at all): in swarm mode that is the step's failure.
        closed = report(brain, c.id, "failed", exc.message.splitlines()[0], validate=False)
    routed = closed.outcome.message if closed.outcome and closed.outcome.message.startswith("notify: ") else None
    return [_said(closed.claim), *list(closed.warnings), *([routed] if routed else [])]


def _said(c: claims.Claim) -> str:
    r = c.result
    return f"step {c.step} satellite result: {r.status if r else '?'}" + (f" — {r.summary}" if r and r.summary else "")


def _context(brain: Brain, c: claims.Claim):
    """The claim's run, its workflow as adapted, and its step. A close validates what it reads before
    it changes anything: when the active run of the claim's workflow, or that workflow's own file,
    cannot be read, the close is refused and the claim stays open (closing it would leave the work
    uncommitted and the result unrouted, the run wedged half-way)."""
    try:
        run = runs.load_run(brain, c.workflow)
    except BrainError as exc:
        raise Invalid(f"claim {c.id} stays open: the run of {c.workflow} cannot be read ({exc}); "
                      "fix that file, then close again") from exc
    if run is None:
        return None, None, None
    try:
        wf = orchestrator.effective(find_workflow(brain, c.workflow), run)
    except BrainError as exc:
        if not run.active:
            return run, None, None
        raise Invalid(f"claim {c.id} stays open: workflow {c.workflow} cannot be read ({exc}); "
                      "fix that file (`nika-brain validate` lists what is wrong), then close again") from exc
    try:
        return run, wf, wf.step(c.step)
    except BrainError:
        return run, None, None


@dataclass(frozen=True)
class Closed:
    """What a close did: the closed claim, where the run went, and what the closer should know."""
    claim: claims.Claim
    outcome: Outcome | None = None
    warnings: tuple[str, ...] = ()


def report(brain: Brain, claim_id: str, status: str, summary: str = "", *, tests_passed: int | None = None,
           tests_failed: int | None = None, validate: bool = True, empty: bool = False,
           now: datetime | None = None, for_satellite: bool = False) -> Closed:
    """A satellite's (or human's) result: tiered close, then the orchestrator routes it.

    `for_satellite`: closed through the satellite's door (federation/doors/claim.py) while it still
    runs: as from inside a sandbox, committing and routing are left to the orchestrator that
    launched it (which does both once the satellite exits; routing now would merge and remove the
    worktree under the running satellite).

    Only an accepted close commits the step's work on the theme branch; the last step's close also
    finishes the run (merge, DONE) when its result is final."""
    if status not in claims.RESULT_STATUSES:
        raise Invalid(f"--status must be one of {', '.join(claims.RESULT_STATUSES)}, not {status!r}")
    c = claims.load_claim(brain, claim_id)
    if not c.is_open:
        raise Refused(f"claim {claim_id} is already closed ({c.result.status if c.result else '?'})")
    waiting = [ch for ch in c.children if claims.load_claim(brain, ch).is_open]
    if waiting:
        raise Blocked(f"orchestrated close: {claim_id} waits for its open children: {', '.join(waiting)}")
    run, wf, step = _context(brain, c)
    in_sandbox = for_satellite or not git_writable(brain)
    warnings: list[str] = []
    if wf is not None and step is not None:
        worktree = orchestrator.worktree_of(brain, wf)
        from nika_brain.gitrepo import changes
        dirty = changes.changed(worktree) if worktree.is_dir() else []  # read once for this close
        if worktree.is_dir() and status != "failed":
            warnings += _where_is_the_work(brain, worktree, c, step, empty=empty, dirty=dirty)
        if validate and status == "ok" and orchestrator.tier_of(step) == "validated" and step.test:
            tr = satellites.run_tests(step.test, worktree if worktree.is_dir() else brain.root)
            if not tr.green:
                _keep_failure(brain, c.id, tr, now)
                if tr.missing:
                    raise MissingTestRunner(
                        f"the test command `{step.test}` cannot run: {tr.missing} is not installed "
                        f"(install it, e.g. pip install pytest); claim {c.id} stays open, nothing was judged")
                signals.emit(brain, "INFO", workflow=wf.name, step=step.id, claim=c.id,
                             reason=f"validated close refused: {tr.failed} failed in `{step.test}`")
                raise Blocked(f"tests not green ({tr.failed} failed, {tr.passed} passed in `{step.test}`): "
                              f"claim {c.id} stays open; fix and report again. The test output, kept on the "
                              f"claim (nika-brain claim show {c.id}), ends with:\n{_last_lines(tr.tail)}")
            tests_passed, tests_failed = tr.passed, tr.failed
        elif validate and status == "ok" and orchestrator.tier_of(step) == "validated" and tests_failed:
            # Self-reported failed tests are red as well: the validated tier never accepts them.
            signals.emit(brain, "INFO", workflow=wf.name, step=step.id, claim=c.id,
                         reason=f"validated close refused: {tests_failed} failed tests reported")
            raise Blocked(f"tests not green ({tests_failed} failed, {tests_passed or 0} passed, as reported): "
                          f"claim {c.id} stays open; fix and report again")
        if worktree.is_dir() and not in_sandbox:
            warnings += settle_work(worktree, c, status, summary, dirty)  # accepted: now, only now, committed
    c = claims.close_claim(brain, claim_id, status, summary, tests_passed=tests_passed,
                           tests_failed=tests_failed, now=now)
    faults.point("after-claim-close")
    out = None
    if in_sandbox:
        # An agent closing its claim from inside Claude Code's sandbox: git is read-only here, so
        # committing, routing and merging are left to the orchestrator that launched it.
        return Closed(c, None, tuple(warnings))
    if run is not None and run.claim == c.id:
        # The claim is closed now: a commit refused from here on (state, merge) is redone by a resume,
        # never by this close again (it would be refused as already closed).
        with git.rerun_as(f"nika-brain workflow resume {c.workflow}"):
            out = orchestrator.step_once(brain, c.workflow)  # routes the result, releases the locks
            after = runs.load_run(brain, c.workflow)
            if out.status == "progress" and after is not None and after.cursor == runs.END and not after.claim:
                out = orchestrator.step_once(brain, c.workflow)  # the last step's result is final: finish
    else:
        locks.release_all(brain, c.id)
        orchestrator.reindex(brain)
    return Closed(c, out, tuple(warnings))


def _keep_failure(brain: Brain, claim_id: str, tr: satellites.TestRun, now: datetime | None) -> None:
    """The refused close's test output, on the open claim (`failed_tests`), for `claim show`."""
    failure = claims.TestFailure(tr.command, tr.returncode, tr.passed, tr.failed, tr.tail,
                                 clock.iso(now or clock.now()))
    claims.update_open(brain, claim_id, failed_tests=failure)


def _last_lines(text: str, n: int = 15) -> str:
    return "\n".join("  " + line for line in text.rstrip().splitlines()[-n:])


def _where_is_the_work(brain: Brain, worktree, c: claims.Claim, step, *, empty: bool,
                       dirty: list[str]) -> list[str]:
    """A close with no change in the claim's scope in its theme worktree: say where work must go."""
    from nika_brain.state.scopes import covers
    if any(_inside(c.scope, p, covers) for p in dirty):
        return []
    stray = _changed(brain.root, c.scope)
    if (stray or (step.type == "code" and not empty)) and _changed(worktree, c.scope, since=c.opened):
        return []  # committed by the worker itself
    where = (f"no change in {', '.join(c.scope)} in the theme worktree {worktree}"
             + (f", but the brain root has changes there ({', '.join(stray[:3])}): the work must be "
                f"written in {worktree}" if stray else ""))
    if step.type == "code" and not empty:
        raise Blocked(f"{where}; claim {c.id} stays open (close with --empty if the step needed no change)")
    return [where] if stray else []


def _changed(checkout, scopes, since=None) -> list[str]:
    specs = [s.rstrip("/") or "." for s in scopes]
    out = git.run(checkout, "status", "--porcelain", "--untracked-files=all", "--", *specs,
                  check=False).stdout
    paths = [line[3:] for line in out.splitlines() if line[3:] and not line[3:].startswith(".nika")]
    if not paths and since is not None:
        log = git.run(checkout, "log", f"--since={clock.iso(since)}", "--format=%H", "--", *specs,
                      check=False).stdout.strip()
        paths = ["(committed)"] if log else []
    return paths


def git_writable(brain: Brain) -> bool:
    """False inside Claude Code's OS sandbox, which mounts parts of the repository's .git (objects,
    worktrees/) read-only: a commit cannot be made from there."""
    gitdir = brain.root / ".git"
    return all(os.access(p, os.W_OK) for p in (gitdir, gitdir / "objects", gitdir / "worktrees")
               if p.exists())


def _inside(scopes, path: str, covers) -> bool:
    try:
        return any(covers(s, path) for s in scopes)
    except BrainError:  # a path no scope can name (odd characters): not the claim's
        return False


def attempt_ref(claim_id: str) -> str:
    return f"refs/nika/attempts/{claim_id}"


def base_ref(claim_id: str) -> str:
    """Where the theme branch stood when the claim was opened (orchestrator.mark_claim_base)."""
    return f"refs/nika/claim-base/{claim_id}"


def _attempt_commits(worktree, c: claims.Claim) -> tuple[str | None, list[str]]:
    """A failed attempt that committed on the theme branch itself: the branch tip at the claim's opening
    and the paths its commits changed since (none when the tip has not moved, or moved elsewhere)."""
    base = git.run(worktree, "rev-parse", "-q", "--verify", base_ref(c.id) + "^{commit}", check=False).stdout.strip()
    if not base:
        return None, []
    head = git.out(worktree, "rev-parse", "HEAD")
    if head == base or git.run(worktree, "merge-base", "--is-ancestor", base, head, check=False).returncode:
        return None, []
    return base, [p for p in git.out(worktree, "diff", "--name-only", "-z", base, head).split("\0") if p]


def settle_work(worktree, c: claims.Claim, status: str, summary: str, dirty: list[str] | None = None) -> list[str]:
    """A claim's work in its theme worktree once its result is known: an accepted result commits the
    paths inside the claim's scope (and only those); a failed attempt's changes there are set aside
    on a ref. Returns what the closer must be told."""
    from nika_brain.gitrepo import changes
    from nika_brain.state.scopes import covers
    dirty = changes.changed(worktree) if dirty is None else dirty
    mine = [p for p in dirty if _inside(c.scope, p, covers)]
    others = [p for p in dirty if p not in mine]
    said = []
    if status == "failed":
        ref = attempt_ref(c.id)
        base, committed = _attempt_commits(worktree, c)
        if base is not None:  # its own commits are the attempt too: the branch goes back to the opening
            git.run(worktree, "reset", "-q", "--soft", base)
            mine = sorted(set(mine) | set(committed))
        aside = changes.set_aside(worktree, ref, f"{c.workflow} step {c.step}: failed attempt\n\nClaim: {c.id}",
                                  paths=mine)
        git.run(worktree, "update-ref", "-d", base_ref(c.id), check=False)
        if aside:
            said.append(f"the failed attempt's changes are set aside on {ref} ({', '.join(aside[:5])}"
                        f"{', ...' if len(aside) > 5 else ''}): `git show {ref}`")
        return said
    msg = f"{c.workflow} step {c.step}: {summary or c.story_angle or 'work'}\n\nClaim: {c.id}"
    changes.commit_paths(worktree, mine, msg, env={"NIKA_CLAIM": c.id})
    # Its mark (base_ref) is tidied by the next claim's mark or at the run's end (orchestrator).
    if others:
        said.append(f"not committed under {c.id} (outside its scope {', '.join(c.scope)}): "
                    f"{', '.join(others[:5])}{', ...' if len(others) > 5 else ''}")
    return said


def abort(brain: Brain, name: str, reason: str) -> Outcome:
    with orchestrator.lock_workflow(brain, name):
        run = runs.load_run(brain, name)
        if run is None or not run.active:
            raise BrainError(f"workflow {name} has no active run")
        return orchestrator.abort_run(brain, run, reason or "aborted by request", clock.now())


def resume(brain: Brain, name: str, *, retry: bool = False, skip: bool = False, wait: bool = False,
           poll: float = 1.0, timeout: float | None = None, on_event: Printer | None = None) -> Outcome:
    """`workflow resume`: go on from the files; a halted run needs --retry or --skip first."""
    name = find_workflow(brain, name).name
    from nika_brain.engine import sync
    sync.pull_if_shared(brain)  # a gate decided on another machine is read fresh
    run = runs.load_run(brain, name)
    other = runs.driven_elsewhere(brain, run) if run is not None and run.active else None
    if other:
        raise Refused(f"workflow {name} is driven by machine {other} (its one writer): resume it there, or "
                      f"take it over here with `nika-brain workflow takeover {name}`")
    if retry or skip:
        halts.resume_halted(brain, name, retry=retry, skip=skip)
    return drive(brain, name, wait=wait, poll=poll, timeout=timeout, on_event=on_event)


@dataclass(frozen=True)
class Takeover:
    workflow: str
    driver: str
    previous: str | None
    previous_alive: bool | None   # None: nobody could tell (no Redis bus, or it did not answer)
    synced: bool


def take_over(brain: Brain, name: str, *, force: bool = False, note: str = "") -> Takeover:
    """`workflow takeover`: this machine drives the run from now on (the operator's explicit act).
    Refused while the driving machine's daemon still heartbeats on the bus, or when nobody can tell,
    unless `force`; journaled (RUN_TAKEN_OVER) and pushed at once when the brain syncs, so the old
    driver's daemon sees after its next pull that the run is no longer its own."""
    from nika_brain.engine import sync
    from nika_brain.state import machine
    name = find_workflow(brain, name).name
    sync.pull_if_shared(brain)
    me = machine.load(brain).id
    with orchestrator.lock_workflow(brain, name):
        run = runs.load_run(brain, name)
        if run is None:
            raise BrainError(f"workflow {name} has no run: nothing to take over")
        if not run.active:
            raise Refused(f"workflow {name}'s run is {run.status}: a finished run has no driver to take over")
        prev = run.driver
        if prev == me:
            return Takeover(name, me, prev, True, False)
        alive = _machine_alive(brain, prev) if prev else None
        if prev and not force:
            if alive:
                raise Refused(f"machine {prev} still drives workflow {name}: its daemon heartbeats on the bus "
                              f"({alive}); stop it there first, or --force to take the run over anyway "
                              "(two machines would then both advance it)")
            if alive is None:
                raise Refused(f"cannot tell whether machine {prev}, which drives workflow {name}, is still up "
                              "(no Redis bus to read its heartbeat): --force if you know it is gone")
        runs.update(brain, run, driver=me)
        signals.emit(brain, "RUN_TAKEN_OVER", workflow=name, step=run.cursor, claim=run.claim,
                     reason=f"driven by {me} from now on (was {prev or 'no machine'})"
                            + (" (forced)" if force else "") + (f": {note}" if note else ""),
                     payload={"from": prev, "to": me, "forced": force, "previous_alive": bool(alive)})
    synced = False
    if sync.settings(brain).configured:
        sync.sync(brain)
        synced = True
    return Takeover(name, me, prev, None if alive is None else bool(alive), synced)


def _machine_alive(brain: Brain, machine_id: str):
    """The machine's heartbeat line when its daemon is up, False when it is registered and gone or
    never registered, None when the bus cannot tell."""
    from nika_brain import bus
    if bus.backend_name(brain) != "redis":
        return None
    try:  # the heartbeat key every machine's daemon keeps (federation/kernels/remote.py)
        beat = bus.open_bus(brain).get(f"machine:{machine_id}")
    except BrainError:
        return None
    if beat is None:
        return False
    return f"pid {beat.get('pid')}, last beat {beat.get('at')}"


def decide_gate(brain: Brain, gate_id: str, decision: str, *,
                note: str = "") -> tuple[gates.Gate, Outcome | None, bool]:
    """A human decides a gate (journaled once); the run waiting on it takes that one transition at
    once. Deciding it again the same way changes nothing and journals nothing (the bool: decided now)."""
    g, decided = gates.decide_once(brain, gate_id, decision, note=note)
    if not decided:
        return g, None, False
    signals.emit(brain, "GATE_DECIDED", workflow=g.workflow, step=None if g.step is None else str(g.step),
                 claim=g.claim, reason=f"gate {g.id} {g.status} by {g.decided_by}",
                 payload={"gate": g.id, "status": g.status, "by": g.decided_by, "via": g.via})
    if not g.workflow:
        return g, None, True
    run = runs.load_run(brain, g.workflow)
    if run is None or not run.active or run.gate != g.id or runs.driven_elsewhere(brain, run):
        return g, None, True  # driven on another machine: its daemon takes the transition after its sync
    out = orchestrator.step_once(brain, g.workflow)
    return g, out, True


def reset_breaker(brain: Brain, scope: str) -> breakers.Breaker | None:
    """preflight-check.sh reset <scope>: a human resets a tripped breaker (and approves its gate)."""
    if gates.in_agent_session():
        raise Refused("refused: a circuit breaker is reset by a human, not from an agent session")
    from nika_brain.state import authority
    authority.require(brain, f"resetting the circuit breaker on {scope}")
    b = breakerreset.reset_breaker_state(brain, scope, why="reset by a human")
    if b is not None:
        orchestrator.reindex(brain)
    return b


def open_branch(brain: Brain, branch: str, base: str | None = None):
    """theme-branch-open.sh: the branch and its worktree (idempotent); a new one is journaled."""
    from nika_brain.gitrepo import branches
    base = base or brain.config.base_branch
    with orchestrator.base_checkout(brain):
        existed = branches.theme_worktree_path(branch, brain.worktrees_dir).is_dir()
        path = branches.open_theme_branch(brain.root, branch, base, brain.worktrees_dir)
    if not existed:
        signals.emit(brain, "BRANCH_OPEN", reason=f"{branch} opened at {path}",
                     payload={"branch": branch, "base": base, "worktree": str(path)})
    return path


def merge_branch(brain: Brain, branch: str, **options) -> tuple[object, list[Outcome]]:
    """theme-branch-merge.sh: the merge (merging.merge_branch), then each active run of that branch
    is finished as the orchestrator's own close would (DONE with its report), a forced merge included."""
    from nika_brain.engine import merging
    from nika_brain.state.workflows import list_workflows
    res = merging.merge_branch(brain, branch, **options)
    finished = []
    for wf in [w for w in list_workflows(brain) if w.branch == branch]:
        with orchestrator.lock_workflow(brain, wf.name):
            run = runs.load_run(brain, wf.name)
            if run is None or not run.active:
                continue
            eff = orchestrator.effective(wf, run)
            forced = bool(merging.owed(eff, run))
            finished.append(orchestrator.finish_run(brain, eff, run, res.commit, clock.now(), forced=forced))
    return res, finished


def open_claim(brain: Brain, **fields) -> claims.Claim:
    """A claim opened by hand (the orchestrator opens its own), journaled like the orchestrator's."""
    c = claims.open_claim(brain, **fields)
    signals.emit(brain, "CLAIM_OPEN", workflow=c.workflow, step=str(c.step), claim=c.id,
                 reason=f"claim opened by hand ({', '.join(c.scope)})", payload={"scope": list(c.scope)})
    orchestrator.reindex(brain)  # as after the orchestrator's own open
    return c


def adapt(brain: Brain, name: str, changes: list[dict]) -> runs.Run:
    wf = find_workflow(brain, name)
    with orchestrator.lock_workflow(brain, name):
        run = runs.load_run(brain, name)
        if run is None or not run.active:
            raise BrainError(f"workflow {name} has no active run to adapt")
        stamped = [dict(ch, at=clock.iso(clock.now())) for ch in changes]
        try:
            adapt_mod.apply(wf, list(run.adaptations) + stamped)  # validate before recording
        except BrainError as exc:  # a conflicting plan change: not the orchestrator's to settle
            signals.emit(brain, "ESCALATE", workflow=name, reason=f"ADAPT refused: {exc.message}",
                         payload={"changes": changes})
            raise
        run = runs.update(brain, run, adaptations=run.adaptations + tuple(stamped))
    signals.emit(brain, "INFO", workflow=name, reason=f"ADAPT: {len(changes)} change(s)",
                 payload={"changes": changes})
    orchestrator.reindex(brain)
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
        ctx = message.get("context") if isinstance(message.get("context"), dict) else {}
        current = runs.load_run(brain, find_workflow(brain, name).name)
        if ctx.get("from") and current is not None and current.context.get("from") == ctx["from"] \
                and not message.get("rerun"):
            # A trigger its driven run already started at once: said, not run a second time.
            return f"ORCHESTRATE {name}: already started by {ctx['from']} ({current.status})"
        out = launch(brain, name, mode=message.get("mode", "swarm"), restart=bool(message.get("rerun")),
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
            from nika_brain.engine import inbox
            why = inbox.refusal(brain, msg)  # only the operator (signed) or a recorded trigger
            if why is None:
                why = inbox.once(brain, msg)   # a signed message is applied once (nonce journal)
            try:
                if why is not None:
                    raise BrainError(why)
                on_line(handle_inbound(brain, msg, on_event=on_event))
            except (BrainError, TypeError, ValueError, KeyError, AttributeError) as exc:
                text = exc.message if isinstance(exc, BrainError) else f"{type(exc).__name__}: {exc}"
                on_line(f"inbound signal refused: {text}")
                signals.emit(brain, "INFO", reason=f"inbound signal refused: {text} (message {msg_id})",
                             publish=False)
            b.ack(signals.INBOX, "orchestrator", msg_id)
            handled += 1
        if once:
            return handled


def assisted_hint(brain: Brain, name: str) -> str | None:
    """Assisted mode: the command that starts Claude Code for the step the way nika-brain starts a
    satellite (engine/assisted.start_session): in the theme worktree, under the satellite-style
    settings, acting as the claim only through the claim's door, never through a `NIKA_CLAIM` the
    agent could rewrite. Installs the brain's (or kernel's) settings if missing."""
    run = runs.load_run(brain, name)
    if run is None or not run.claim:
        return None
    satellites.session_settings(brain, run.context.get("kernel"))
    return (f"Start Claude Code for this step (its worktree, nika-brain's hooks and sandbox, the claim's door):\n"
            f"  nika-brain claude start {run.claim}")
