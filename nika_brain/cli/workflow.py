"""Commands of the kernel-orchestrator: workflow-launch, workflow ..., preflight, branch."""
from __future__ import annotations

import json
from typing import Optional

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app, json_object, launchfast, operator_only
from nika_brain.engine import orchestrator, preflight, signals
from nika_brain.engine import service as launch
from nika_brain.errors import EXIT_BLOCKED, Invalid
from nika_brain.gitrepo import git
from nika_brain.state import runs
from nika_brain.state.workflows import find_workflow
from nika_brain.support.yamlsafe import loads

wf_app = typer.Typer(no_args_is_help=True, help="Workflow runs: status, resume, abort, adapt, listen.")
pre_app = typer.Typer(no_args_is_help=True, help="Preflight checks and circuit-breaker reset.")
branch_app = typer.Typer(no_args_is_help=True, help="Theme branches and their worktrees.")
app.add_typer(wf_app, name="workflow")
app.add_typer(pre_app, name="preflight")
app.add_typer(branch_app, name="branch")


_print = launchfast.print_outcome


def _finish(out: orchestrator.Outcome, as_json: bool = False) -> None:
    raise typer.Exit(launchfast.finish(out, as_json))


def _printer(as_json: bool):
    return None if as_json else _print


def _context(text: Optional[str]) -> Optional[dict]:
    return json_object(text, "--context") if text else None


@app.command("workflow-launch")
def workflow_launch(workflow: str = typer.Argument(..., help="workflows/<name>.yml or <name>"),
                    mode: Optional[str] = typer.Option(None, help="assisted (mode 1) | swarm (mode 3); "
                                                       "default: the run's own mode, assisted for a new run"),
                    wait: bool = typer.Option(False, "--wait", help="stay and route each result as it comes"),
                    restart: bool = typer.Option(False, "--restart",
                                                 help="start a finished/aborted workflow again"),
                    step: Optional[str] = typer.Option(None, help="start at this step"),
                    context: Optional[str] = typer.Option(None, help="JSON context for the satellites"),
                    poll: float = typer.Option(1.0, help="seconds between checks with --wait"),
                    timeout: Optional[float] = typer.Option(None, help="give up waiting after this"),
                    as_json: bool = typer.Option(False, "--json", help="one JSON object for scripts")):
    """Run a workflow: INIT, then each step (preflight, locks, claim, brief or satellite, routing)."""
    raise typer.Exit(launchfast.workflow_launch(workflow, mode, wait, restart, step, context, poll, timeout,
                                                as_json))


@wf_app.command("resume")
def workflow_resume(name: str,
                    retry: bool = typer.Option(False, "--retry",
                                               help="a halted run: run the halted step again"),
                    skip: bool = typer.Option(False, "--skip", help="a halted run: go past the halted step"),
                    wait: bool = typer.Option(False, "--wait", help="stay and route each result as it comes"),
                    poll: float = 1.0, timeout: Optional[float] = None,
                    as_json: bool = typer.Option(False, "--json", help="one JSON object for scripts")):
    """Go on from the files after a report, a gate decision, a halt or a crash."""
    raise typer.Exit(launchfast.workflow_resume(name, retry, skip, wait, poll, timeout, as_json))


@wf_app.command("status")
def workflow_status(name: str, as_json: bool = typer.Option(False, "--json"),
                    claim: bool = typer.Option(False, "--claim", help="print only the open claim's id"),
                    gate: bool = typer.Option(False, "--gate", help="print only the pending gate's id"),
                    worktree: bool = typer.Option(False, "--worktree", help="print only the theme worktree")):
    """Where a workflow stands: run status, cursor, claim, gate, each step's state."""
    brain = Brain.find()
    wf = find_workflow(brain, name)
    run = runs.load_run(brain, wf.name)
    if claim or gate or worktree:  # one value, for scripts and the README's quick start
        value = (run.claim if claim else run.gate) if run and not worktree else None
        if worktree:
            value = str(orchestrator.worktree_of(brain, wf))
        if not value:
            raise Invalid(f"{wf.name} has no {'open claim' if claim else 'pending gate'} now")
        print(value)
        return
    states = launch.step_states(brain, wf.name)
    if as_json:
        print(json.dumps({"run": runs.to_dict(run) if run else None,
                          "steps": [{"step": s, "state": st} for s, st in states]}))
        return
    if run is None:
        print(f"{wf.name}: not started")
    else:
        halted = " (halted)" if run.halted else ""
        print(f"{wf.name}: {run.status}{halted} ({run.mode}) cursor={run.cursor} claim={run.claim or '-'} "
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
    operator_only("aborting a workflow")
    out = launch.abort(Brain.find(), name, reason)
    print(f"[{out.workflow}] ABORT: {out.message}")


@wf_app.command("takeover")
def workflow_takeover(name: str,
                      force: bool = typer.Option(False, "--force", help="take it over even while its driving "
                                                 "machine still heartbeats, or when nobody can tell"),
                      note: str = typer.Option("", help="why (journaled)")):
    """This machine drives the run from now on (a brain on several machines: the run's one writer)."""
    operator_only("taking over a workflow run")
    t = launch.take_over(Brain.find(), name, force=force, note=note)
    if t.previous == t.driver:
        print(f"{t.workflow}: already driven by this machine ({t.driver})")
        return
    print(f"{t.workflow}: driven by {t.driver} from now on (was {t.previous or 'no machine'})"
          + (" — synced" if t.synced else ""))
    print(f"next: `nika-brain workflow resume {t.workflow}`")


@wf_app.command("orchestrate")
def workflow_orchestrate(name: str, step: Optional[str] = None, context: Optional[str] = None,
                         mode: str = typer.Option("swarm"), wait: bool = typer.Option(False, "--wait"),
                         rerun: bool = typer.Option(False, "--rerun", help="run a finished workflow again")):
    """ORCHESTRATE {workflow, step, context}: what brain-hypervisor sends."""
    git.rerun_is_this_command()
    out = launch.launch(Brain.find(), name, mode=mode, step=step, context=_context(context), wait=wait,
                        restart=rerun, on_event=_print)
    _finish(out)


@wf_app.command("adapt")
def workflow_adapt(name: str,
                   skip: list[str] = typer.Option([], help="skip this step (repeatable)"),
                   insert_after: Optional[str] = typer.Option(None, help="insert --step-yaml after this step"),
                   replace: Optional[str] = typer.Option(None, help="replace this step with --step-yaml"),
                   step_yaml: Optional[str] = typer.Option(None, help="a step mapping in YAML/JSON")):
    """ADAPT {workflow, changes}: insert, skip or replace steps mid-sequence (recorded in the run)."""
    operator_only("adapting a workflow")
    changes: list[dict] = [{"op": "skip", "step": s} for s in skip]
    if insert_after or replace:
        if not step_yaml:
            raise Invalid("--insert-after/--replace need --step-yaml")
        mapping = loads(step_yaml, "--step-yaml").data
        if insert_after:
            changes.append({"op": "insert", "after": insert_after, "step": mapping})
        if replace:
            changes.append({"op": "replace", "step": replace, "with": mapping})
    if not changes:
        raise Invalid("nothing to adapt (use --skip, --insert-after or --replace)")
    run = launch.adapt(Brain.find(), name, changes)
    print(f"{name}: {len(run.adaptations)} adaptation(s) recorded")


@wf_app.command("listen")
def workflow_listen(once: bool = typer.Option(False, "--once", help="handle what is waiting, then stop"),
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
    b = launch.reset_breaker(brain, scope)
    print(f"breaker reset on {b.scope}" if b else f"no breaker on {scope}")
    waiting = [r.workflow for r in runs.list_runs(brain) if r.status == "breaker"] if b else []
    print(" ".join(f"next: `nika-brain workflow resume {w}`" for w in waiting) if waiting else
          "next: nothing waits on this breaker — `nika-brain workflow-launch <workflow>` when ready")


@branch_app.command("open")
def branch_open(branch: str, base: Optional[str] = None):
    """theme-branch-open.sh <branch>: create the branch and its own worktree (idempotent)."""
    print(launch.open_branch(Brain.find(), branch, base))


@branch_app.command("merge")
def branch_merge(branch: str, base: Optional[str] = None,
                 test: Optional[str] = typer.Option(None, help="test command for the 0-failures gate"),
                 no_tests: bool = typer.Option(False, "--no-tests",
                                               help="merge without a test command (declared)"),
                 force_human: bool = typer.Option(False, "--force-human",
                                                  help="a human merges a run with failed or "
                                                       "unresolved steps (journaled)"),
                 note: str = typer.Option("", help="why, recorded with --force-human")):
    """theme-branch-merge.sh <branch>: --no-ff merge, only when the branch's run owes nothing (no failed
    or unresolved step) and its tests are green."""
    brain = Brain.find()
    git.rerun_is_this_command()  # what the git hooks name when they refuse a commit of this merge
    res, finished = launch.merge_branch(brain, branch, base=base, test=test, no_tests=no_tests,
                                        force_human=force_human, note=note)
    print(f"{res.reason} ({res.commit})")
    for out in finished:
        _print(out)
