"""`nika-brain sync`: one brain on several machines, through the git remote (engine/sync.py)."""
from __future__ import annotations

import json
from typing import Optional

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app


@app.command("sync")
def sync_cmd(remote: Optional[str] = typer.Option(None, help="the git remote (default: sync.remote, else origin)"),
             as_json: bool = typer.Option(False, "--json", help="one JSON object for scripts")):
    """Commit this machine's state, merge the other machines' from the remote, push (retried on a race)."""
    from nika_brain.engine import sync
    r = sync.sync(Brain.find(), remote=remote)
    if as_json:
        print(json.dumps({"remote": r.remote, "branch": r.branch, "committed": r.committed,
                          "pulled": r.pulled, "pushed": r.pushed, "attempts": r.attempts}))
    else:
        print(r.line())
