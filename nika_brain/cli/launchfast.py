"""`workflow-launch` and `workflow resume` without the CLI framework: a swarm launch is one process
for the whole run, and typer with the pydantic it imports costs that process ~0.2 s CPU before the
first step, about as much as two no-op satellites.

`__main__` hands the plain forms here (cli/fast.parse: exactly the typer commands' options, anything
else goes to typer, which words the errors and the usage). The bodies, the outcome's printing and
the exit codes are the typer commands' own (cli/workflow.py calls them), so both paths print the same
lines (tests/cli/test_launch_fast.py compares them).
"""
from __future__ import annotations

import json
from typing import Any

from nika_brain.cli import fast

SPECS: dict[tuple[str, ...], tuple[list[str], dict[str, tuple[str, Any]]]] = {
    ("workflow-launch",): (["workflow"], {"--mode": ("mode", str), "--wait": ("wait", None),
                                          "--restart": ("restart", None), "--step": ("step", str),
                                          "--context": ("context", str), "--poll": ("poll", float),
                                          "--timeout": ("timeout", float), "--json": ("as_json", None)}),
    ("workflow", "resume"): (["name"], {"--retry": ("retry", None), "--skip": ("skip", None),
                                        "--wait": ("wait", None), "--poll": ("poll", float),
                                        "--timeout": ("timeout", float), "--json": ("as_json", None)}),
}


def print_outcome(out: Any) -> None:
    """An outcome as the operator reads it: the brief (assisted), the outcome, then what comes next.
    Blocked and refused outcomes are results, not errors: stdout like the others."""
    from nika_brain.brain import Brain
    from nika_brain.engine import nextstep, orchestrator
    from nika_brain.engine import service as launch
    if out.brief and out.status == "waiting":
        print(out.brief)
        hint = launch.assisted_hint(Brain.find(), out.workflow)
        if hint:
            print(hint)
    if out.status == "info":  # something seen on the way: a notify: text, a satellite's result
        print(f"[{out.workflow}] {out.message}")
        return
    if out.status == "done" and out.report is not None:  # DONE once, with its report
        print(f"[{out.workflow}] DONE: {out.message} — report: {orchestrator.report_line(out.report)}")
        _, _, triggered = nextstep.line(Brain.find(), out).partition(" — next (triggered): ")
        if triggered:
            print(f"next (triggered): {triggered}")
        return
    tag = {"waiting": "WAITING", "gated": "GATE_PENDING", "blocked": "BLOCKED_ON", "halted": "BLOCKED_ON",
           "breaker": "CIRCUIT_BREAK", "done": "DONE", "aborted": "ABORT"}.get(out.status, out.status.upper())
    extra = f" (claim {out.claim})" if out.claim else ""
    print(f"[{out.workflow}] {tag}: {out.message}{extra}")
    print(nextstep.line(Brain.find(), out))


def finish(out: Any, as_json: bool = False) -> int:
    """The last word of a run command (one JSON object with --json) and its exit code."""
    if as_json:
        from nika_brain.brain import Brain
        from nika_brain.engine import nextstep
        print(json.dumps({**out.to_dict(), "next": nextstep.line(Brain.find(), out)}))
    return out.exit_code


def workflow_launch(workflow: str, mode: str | None = None, wait: bool = False, restart: bool = False,
                    step: str | None = None, context: str | None = None, poll: float = 1.0,
                    timeout: float | None = None, as_json: bool = False) -> int:
    from nika_brain.brain import Brain
    from nika_brain.cli import json_object
    from nika_brain.engine import service as launch
    from nika_brain.errors import Invalid
    from nika_brain.gitrepo import git
    from nika_brain.state import runs
    if mode is not None and mode not in runs.MODES:
        raise Invalid(f"--mode must be one of {', '.join(runs.MODES)}")
    git.rerun_is_this_command()  # what the git hooks name when they refuse a commit of this run
    out = launch.launch(Brain.find(), workflow, mode=mode, wait=wait, restart=restart, step=step,
                        context=json_object(context, "--context") if context else None, poll=poll,
                        timeout=timeout, on_event=None if as_json else print_outcome)
    return finish(out, as_json)


def workflow_resume(name: str, retry: bool = False, skip: bool = False, wait: bool = False, poll: float = 1.0,
                    timeout: float | None = None, as_json: bool = False) -> int:
    from nika_brain.brain import Brain
    from nika_brain.engine import service as launch
    from nika_brain.gitrepo import git
    git.rerun_is_this_command()
    return finish(launch.resume(Brain.find(), name, retry=retry, skip=skip, wait=wait, poll=poll, timeout=timeout,
                                on_event=None if as_json else print_outcome), as_json)


def run(argv: list[str]) -> int | None:
    """Run a plain `workflow-launch` or `workflow resume` without typer; None when typer must."""
    parsed = fast.parse(argv, SPECS, {})
    if parsed is None:
        return None
    key, args = parsed
    return fast.guarded(workflow_launch if key == ("workflow-launch",) else workflow_resume, args)
