"""Commands that plug nika-brain into Claude Code: settings.json hooks and the status line.

`nika-brain hook <event>` and `nika-brain claude statusline` never reach this module: __main__
dispatches them before typer is imported, because they run on every tool call.
"""
from __future__ import annotations

from typing import Optional

import typer

from nika_brain.claude import settings as claude_settings
from nika_brain.hooks import statusline
from nika_brain.state import kernels
from nika_brain.brain import Brain
from nika_brain.cli import app

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
                                                         "(default: this Python, -m nika_brain)")):
    """Merge nika-brain's hooks and permission rules into .claude/settings.json (idempotent)."""
    brain = Brain.find()
    path = claude_settings.install(_target(brain, kernel), command=command, kernel_id=kernel,
                                   brain_dir=brain.root)
    print(f"installed nika-brain hooks in {path}")


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
