"""Commands that plug nika-brain into Claude Code: settings.json hooks and the status line.

`nika-brain hook <event>` and `nika-brain claude statusline` never reach this module: __main__
dispatches them before typer is imported, because they run on every tool call.
"""
from __future__ import annotations

import sys
from typing import Optional

import typer

from nika_brain.brain import Brain
from nika_brain.claude import settings as claude_settings
from nika_brain.cli import app
from nika_brain.errors import BrainError
from nika_brain.hooks import statusline
from nika_brain.state import kernels

claude_app = typer.Typer(no_args_is_help=True, help="Claude Code integration: hooks, permissions, status line.")
app.add_typer(claude_app, name="claude")


def _target(brain: Brain, kernel: Optional[str]):
    if kernel is None:
        return brain.root
    kernels.load_kernel(brain, kernel)  # a clear error for an unknown kernel
    return kernels.kernel_dir(brain, kernel)


@claude_app.command("install")
def claude_install(kernel: Optional[str] = typer.Option(None, help="the kernel whose folder gets the settings"),
                   command: Optional[str] = typer.Option(None, help="how hooks run nika-brain "
                                                         "(default: this Python, -m nika_brain)"),
                   sandbox: Optional[str] = typer.Option(None, help="auto | required | off "
                                                         "(default: nika-brain.yml sandbox)")):
    """Merge nika-brain's hooks, deny rules and OS sandbox into .claude/settings.json (idempotent)."""
    brain = Brain.find()
    mode = sandbox or brain.config.sandbox
    missing = claude_settings.sandbox_dependencies() if mode != "off" else []
    if missing and mode == "required":
        raise BrainError("the sandbox is required (failIfUnavailable) and Claude Code needs "
                         f"{', '.join(missing)} here: apt-get install {' '.join(missing)}")
    path = claude_settings.install(_target(brain, kernel), command=command, kernel_id=kernel,
                                   brain_dir=brain.root, sandbox=mode)
    print(f"installed nika-brain hooks in {path} (sandbox: {mode})")
    if missing:
        print(f"warning: Claude Code's sandbox needs {', '.join(missing)} on this machine "
              f"(apt-get install {' '.join(missing)}); until then agents' commands run unsandboxed "
              "and only the hook's tripwire guards secrets and the operator key "
              "(`nika-brain doctor` checks)", file=sys.stderr)


@claude_app.command("uninstall")
def claude_uninstall(kernel: Optional[str] = typer.Option(None)):
    """Remove exactly what `claude install` added."""
    brain = Brain.find()
    path = claude_settings.uninstall(_target(brain, kernel))
    print(f"removed nika-brain hooks from {path}")


@claude_app.command("statusline")
def claude_statusline():
    """Status line for Claude Code: kernel, claim and context percentage (reads stdin)."""
    raise typer.Exit(statusline.statusline_main())


@claude_app.command("start", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def claude_start(ctx: typer.Context,
                 claim: Optional[str] = typer.Argument(None, help="the step's claim (default: the claim of "
                                                       "the only assisted run waiting)")):
    """Start Claude Code for an assisted step, as nika-brain starts a satellite: in the claim's worktree,
    under its own settings, acting as the claim only through the claim's door (closed when the
    session ends). Arguments after `--` go to `claude` (e.g. `-- --permission-mode acceptEdits`)."""
    from nika_brain.engine import assisted
    args = list(ctx.args)
    if claim is not None and claim.startswith("-"):   # `claude start -- --flag`: no claim, all for claude
        claim, args = None, [claim, *args]
    brain = Brain.find()
    cid = claim or assisted.waiting_claim(brain)
    returncode = assisted.start_session(brain, cid, args)
    name = assisted.settle(brain, cid)
    if name is None:
        from nika_brain.state import claims
        if claims.load_claim(brain, claims.id_from_argument(cid)).is_open:
            print(f"claim {cid} is still open: `nika-brain claude start {cid}` to go on with it, or "
                  f"`nika-brain claim close {cid} --status ok|partial|failed --summary \"...\"`")
        raise typer.Exit(returncode)
    from nika_brain.cli import workflow
    from nika_brain.engine import service
    out = service.resume(brain, name, on_event=workflow._print)   # the step it closed is routed now
    raise typer.Exit(returncode or out.exit_code)
