"""Commands: init, validate, index, hooks install|uninstall|status."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app
from nika_brain.errors import BrainError

hooks_app = typer.Typer(no_args_is_help=True, help="Git hooks: validate, guard locks, keep BRAIN-INDEX.md current.")
app.add_typer(hooks_app, name="hooks")


@app.command("init")
def init_cmd(directory: Path = typer.Argument(Path("."), help="the brain folder (created if missing)"),
             no_hooks: bool = typer.Option(False, "--no-hooks", help="do not install the git hooks")):
    """Make (or adopt) a git repository as a brain: agents, zones, workflows, scripts, hooks, index."""
    from nika_brain.engine.init import init
    r = init(directory, hooks=not no_hooks)
    if r.repo_created:
        print(f"initialised a git repository in {r.root}")
    for rel in r.created:
        print(f"created {rel}")
    if r.gitignore:
        print(f"{r.gitignore} .gitignore (.nika/ is local state)")
    if r.index_written:
        print("wrote BRAIN-INDEX.md")
    if r.hooks:
        print(f"installed git hooks: {', '.join(r.hooks)}")
    if r.committed:
        print(f"committed the template ({r.committed[:12]})")
    print(f"brain ready at {r.root}" if r.changed else f"{r.root} is already a brain: nothing to do")


@app.command("validate")
def validate_cmd(paths: Optional[List[Path]] = typer.Argument(None,
                                                              help="files or folders (default: the whole brain)")):
    """Check brain files against their schemas; one `file:line: key: message` line per problem."""
    from nika_brain.state.validate import locate_root, validate
    start = Path.cwd()
    root = locate_root(start)
    if root is None and paths:
        root = locate_root(paths[0] if paths[0].is_absolute() else start / paths[0])
    if root is None:
        raise BrainError(f"no brain found at or above {start} (no nika-brain.yml; run `nika-brain init`)")
    report = validate(root, paths or None)
    for note in report.notes:
        print(f"note: {note}")
    for problem in report.problems:
        print(problem)
    if report.problems:
        raise typer.Exit(1)
    print(f"ok: {report.files} files")


@app.command("index")
def index_cmd(check: bool = typer.Option(False, "--check", help="exit 1 if BRAIN-INDEX.md is stale; write nothing"),
              stdout: bool = typer.Option(False, "--stdout", help="print the index instead of writing it")):
    """Regenerate BRAIN-INDEX.md from the state files (byte-identical when nothing changed)."""
    from nika_brain.cli import fast
    raise typer.Exit(fast.index(check, stdout))


def _repo() -> Path:
    return Brain.find().root


@hooks_app.command("install")
def hooks_install():
    """Install the git hooks (an existing hook is kept and runs first)."""
    from nika_brain.gitrepo import githooks
    changed = githooks.install(_repo())
    print(f"installed: {', '.join(changed)}" if changed else "git hooks already installed")


@hooks_app.command("uninstall")
def hooks_uninstall():
    """Remove the git hooks and restore the ones they chained."""
    from nika_brain.gitrepo import githooks
    changed = githooks.uninstall(_repo())
    print(f"uninstalled: {', '.join(changed)}" if changed else "no nika-brain git hook installed")


@hooks_app.command("status")
def hooks_status():
    """Which git hooks are installed."""
    from nika_brain.gitrepo import githooks
    for name, state in githooks.status(_repo()).items():
        print(f"{name}\t{state}")
