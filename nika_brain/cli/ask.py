"""`nika-brain ask "<prompt>" [--wait] [--json] [--timeout S]` and `ask show <id>`: the federation's
way in. Thin: nika_brain.federation.asking does the work. A plain call never comes here: `__main__`
runs it through cli/askfast.py, without typer; this command serves --help and the forms typer parses
(`--timeout=S`, a prompt after `--`...), with the same body."""
from __future__ import annotations

from typing import Optional

import typer

from nika_brain.cli import app, askfast

EXIT_NOT_ANSWERED = askfast.EXIT_NOT_ANSWERED


@app.command("ask", context_settings={"allow_interspersed_args": True})
def ask(prompt: str = typer.Argument(..., help='the prompt, or "show <id>"'),
        ask_id: Optional[str] = typer.Argument(None, metavar="[ID]", help="with show: the ask's id"),
        wait: bool = typer.Option(False, "--wait", help="wait for every route's answer"),
        as_json: bool = typer.Option(False, "--json"),
        timeout: float = typer.Option(600.0, "--timeout", help="seconds --wait waits")):
    """Route a prompt to the right kernel(s) (triage), deliver it, and with --wait print the answers.
    `nika-brain ask show <id>` shows a recorded ask. Exit 8 when a route was not taken or answered."""
    code = askfast.body(prompt, ask_id, wait=wait, as_json=as_json, timeout=timeout)
    if code:
        raise typer.Exit(code)
