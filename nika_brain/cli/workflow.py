"""Commands of the kernel-orchestrator: workflow-launch, workflow ..., preflight, branch."""
from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from nika_brain.gitrepo import branches
from nika_brain.state import breakers, gates, runs
from nika_brain.engine import service as launch, orchestrator, preflight, signals
from nika_brain.brain import Brain
from nika_brain.errors import Blocked, BrainError, EXIT_BLOCKED, Refused
from nika_brain.state.workflows import find_workflow
from nika_brain.support.yamlsafe import loads
from nika_brain.cli import app, json_object

wf_app = typer.Typer(no_args_is_help=True, help="Workflow runs: status, resume, abort, adapt, listen.")
pre_app = typer.Typer(no_args_is_help=True, help="Preflight checks and circuit-breaker reset.")
branch_app = typer.Typer(no_args_is_help=True, help="Theme branches and their worktrees.")
app.add_typer(wf_app, name="workflow")
app.add_typer(pre_app, name="preflight")
app.add_typer(branch_app, name="branch")


def _print(out: orchestrator.Outcome) -> None:
    if out.brief and out.status == "waiting":
        print(out.brief)
        hint = launch.assisted_hint(Brain.find(), out.workflow)
        if hint:
            print(hint)
    tag = {"waiting": "WAITING", "gated": "GATE_PENDING", "blocked": "BLOCKED_ON", "breaker": "CIRCUIT_BREAK",
           "done": "DONE", "aborted": "ABORT"}.get(out.status, out.status.upper())
    extra = f" (claim {out.claim})" if out.claim else ""
    extra += f" (gate {out.gate}: approve with `nika-brain gate approve {out.gate}`)" if out.gate and \
        out.status == "gated" else ""
    print(f"[{out.workflow}] {tag}: {out.message}{extra}", file=sys.stderr if out.status in
          ("blocked", "breaker", "aborted") else sys.stdout)


def _finish(out: orchestrator.Outcome) -> None:
    raise typer.Exit(out.exit_code)


def _context(text: Optional[str]) -> Optional[dict]:
    return json_object(text, "--context") if text else None


@app.command("workflow-launch")
def workflow_launch(workflow: str = typer.Argument(..., help="workflows/<name>.yml or <name>"),
                    mode: str = typer.Option("assisted", help="assisted (mode 1) | swarm (mode 3)"),
                    wait: bool = typer.Option(False, help="stay and route each result as it comes"),
                    restart: bool = typer.Option(False, help="start a finished/aborted workflow again"),
                    step: Optional[str] = typer.Option(None, help="start at this step"),
                    context: Optional[str] = typer.Option(None, help="JSON context for the satellites"),
                    poll: float = typer.Option(1.0, help="seconds between checks with --wait"),
                    timeout: Optional[float] = typer.Option(None, help="give up waiting after this")):
    """Run a workflow: INIT, then each step (preflight, locks, claim, brief or satellite, routing)."""
    if mode not in runs.MODES:
        raise BrainError(f"--mode must be one of {', '.join(runs.MODES)}")
    out = launch.launch(Brain.find(), workflow, mode=mode, wait=wait, restart=restart, step=step,
                        context=_context(context), poll=poll, timeout=timeout, on_event=_print)
    _finish(out)


@wf_app.command("resume")
def workflow_resume(name: str, wait: bool = False, poll: float = 1.0, timeout: Optional[float] = None):
    """Go on from the files after a report, a gate decision, or a crash."""
    _finish(launch.drive(Brain.find(), find_workflow(Brain.find(), name).name, wait=wait, poll=poll,
                         timeout=timeout, on_event=_print))


@wf_app.command("status")
def workflow_status(name: str, as_json: bool = typer.Option(False, "--json")):
    """Where a workflow stands: run status, cursor, claim, gate, each step's state."""
    brain = Brain.find()
    wf = find_workflow(brain, name)
    run = runs.load_run(brain, wf.name)
    states = launch.step_states(brain, wf.name)
    if as_json:
        print(json.dumps({"run": runs.to_dict(run) if run else None,
                          "steps": [{"step": s, "state": st} for s, st in states]}))
        return
    if run is None:
        print(f"{wf.name}: not started")
    else:
        print(f"{wf.name}: {run.status} ({run.mode}) cursor={run.cursor} claim={run.claim or '-'} "
              f"gate={run.gate or '-'}" + (f" — {run.reason}" if run.reason else ""))
    for sid, st in states:
        print(f"  step {sid}: {st}")
    if run and run.report:
        r = run.report
        print(f"  report: delivered {r.get('delivered')}, partial {r.get('partial')}, "
              f"skipped {r.get('skipped')}, gates {r.get('gates')}")


@wf_app.command("abort")
def workflow_abort(name: str, reason: str = typer.Option("aborted by request")):
    """ABORT {workflow, reason}: stop the chain."""
    out = launch.abort(Brain.find(), name, reason)
    _print(out)


@wf_app.command("orchestrate")
def workflow_orchestrate(name: str, step: Optional[str] = None, context: Optional[str] = None,
                         mode: str = typer.Option("swarm"), wait: bool = False):
    """ORCHESTRATE {workflow, step, context}: what brain-hypervisor sends."""
    out = launch.launch(Brain.find(), name, mode=mode, step=step, context=_context(context), wait=wait,
                        on_event=_print)
    _finish(out)


@wf_app.command("adapt")
def workflow_adapt(name: str,
                   skip: list[str] = typer.Option([], help="skip this step (repeatable)"),
                   insert_after: Optional[str] = typer.Option(None, help="insert --step-yaml after this step"),
                   replace: Optional[str] = typer.Option(None, help="replace this step with --step-yaml"),
                   step_yaml: Optional[str] = typer.Option(None, help="a step mapping in YAML/JSON")):
    """ADAPT {workflow, changes}: insert, skip or replace steps mid-sequence (recorded in the run)."""
    changes: list[dict] = [{"op": "skip", "step": s} for s in skip]
    if insert_after or replace:
        if not step_yaml:
            raise BrainError("--insert-after/--replace need --step-yaml")
        mapping = loads(step_yaml, "--step-yaml").data
        if insert_after:
            changes.append({"op": "insert", "after": insert_after, "step": mapping})
        if replace:
            changes.append({"op": "replace", "step": replace, "with": mapping})
    if not changes:
        raise BrainError("nothing to adapt (use --skip, --insert-after or --replace)")
    run = launch.adapt(Brain.find(), name, changes)
    print(f"{name}: {len(run.adaptations)} adaptation(s) recorded")


@wf_app.command("listen")
def workflow_listen(once: bool = typer.Option(False, help="handle what is waiting, then stop"),
                    block: float = 1.0):
    """Consume ORCHESTRATE / ADAPT / ABORT signals from the bus inbox."""
    launch.listen(Brain.find(), once=once, block=block, on_event=_print)


@wf_app.command("signals")
def workflow_signals(name: Optional[str] = typer.Argument(None), as_json: bool = typer.Option(False, "--json")):
    """The signal journal (journal/signals.jsonl), optionally for one workflow."""
    for rec in signals.read(Brain.find(), workflow=name):
        print(json.dumps(rec, sort_keys=True) if as_json else
              f"{rec.get('time')} {rec.get('type'):<13} {rec.get('workflow') or '-'} "
              f"step={rec.get('step') or '-'} {rec.get('reason', '')}")


@pre_app.command("check")
def preflight_check(scope: str, zone: Optional[str] = typer.Argument(None),
                    agent: Optional[str] = None, claim: Optional[str] = None,
                    as_json: bool = typer.Option(False, "--json")):
    """preflight-check.sh <scope> <zone>: exit 4 with every failing reason when not clear."""
    checks = preflight.run_checks(Brain.find(), [scope], zone, agent=agent, claim=claim)
    failed = preflight.failures(checks)
    if as_json:
        print(json.dumps({"ok": not failed, "checks": [c.__dict__ for c in checks]}))
    else:
        for c in checks:
            print(f"{'ok  ' if c.ok else 'FAIL'} {c.name}" + (f": {c.reason}" if c.reason else ""))
    raise typer.Exit(EXIT_BLOCKED if failed else 0)


@pre_app.command("reset")
def preflight_reset(scope: str):
    """preflight-check.sh reset <scope>: a human resets a tripped circuit breaker."""
    brain = Brain.find()
    if gates.in_agent_session():
        raise Refused("refused: a circuit breaker is reset by a human, not from an agent session")
    from nika_brain.state import authority
    authority.require(brain, f"resetting the circuit breaker on {scope}")
    b = breakers.reset(brain, scope)
    if b is None:
        print(f"no breaker on {scope}")
        return
    if b.gate:
        g = gates.load_gate(brain, b.gate)
        if g.pending:
            gates.decide(brain, g.id, "approve", note=f"breaker reset on {scope}")
    signals.emit(brain, "INFO", reason=f"circuit breaker reset on {b.scope} after {b.fails} fails")
    orchestrator._reindex(brain)
    print(f"breaker reset on {b.scope}")


@branch_app.command("open")
def branch_open(branch: str, base: Optional[str] = None):
    """theme-branch-open.sh <branch>: create the branch and its own worktree (idempotent)."""
    brain = Brain.find()
    path = branches.open_theme_branch(brain.root, branch, base or brain.config.base_branch,
                                      brain.worktrees_dir)
    print(path)


@branch_app.command("merge")
def branch_merge(branch: str, base: Optional[str] = None,
                 test: Optional[str] = typer.Option(None, help="test command for the 0-failures gate"),
                 no_tests: bool = typer.Option(False, help="merge without a test command (declared)")):
    """theme-branch-merge.sh <branch>: --no-ff merge, only when the 0-failures gate is green."""
    from nika_brain.engine.satellites import run_tests
    from nika_brain.state.workflows import list_workflows
    brain = Brain.find()
    if test is None:
        test = next((w.test for w in list_workflows(brain) if w.branch == branch and w.test), None)
    worktree = branches.theme_worktree_path(branch, brain.worktrees_dir)
    if test is None and not no_tests:
        raise BrainError(f"no test command known for {branch}: give --test CMD (or --no-tests)")
    green, why = True, ""
    if test is not None:
        tr = run_tests(test, worktree if worktree.is_dir() else brain.root)
        green, why = tr.green, f"{tr.failed} failed in `{test}`"
    res = orchestrator.merge_into_base(brain, branch, base or brain.config.base_branch, green=green,
                                       state_message=f"brain: state before merging {branch}")
    if not res.merged:
        reason = f"merge conflict on {', '.join(res.conflicts)}" if res.conflicts else \
            (res.reason if green else f"0-failures gate is not green: {why}")
        signals.emit(brain, "BLOCKED_ON", reason=reason)
        raise Blocked(reason)
    print(f"{res.reason} ({res.commit})")
