"""`nika-brain ask "<prompt>" [--wait] [--json] [--timeout S]` and `ask show <id>`: the federation's
way in. Thin: nika_brain.federation.asking does the work."""
from __future__ import annotations

import getpass
import json
from typing import Optional

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app
from nika_brain.errors import BrainError

EXIT_NOT_ANSWERED = 8


def _print(rec: dict, as_json: bool) -> None:
    from nika_brain.federation.asking import route
    out = route.public(rec)
    if as_json:
        print(json.dumps(out, ensure_ascii=False))
        return
    print(f"ask {out['ask']}: {out['decision']} ({out.get('reason') or '-'})")
    for r in out["routes"]:
        print(f"-> {r['kernel']} [{r['status']}{' ' + r['prompt_id'] if r['prompt_id'] else ''}]: {r['prompt']}")
        if r.get("answer") is not None:
            print(r["answer"])
        elif r.get("reason"):
            print(f"   {r['reason']}")


@app.command("ask", context_settings={"allow_interspersed_args": True})
def ask(prompt: str = typer.Argument(..., help='the prompt, or "show <id>"'),
        ask_id: Optional[str] = typer.Argument(None, metavar="[ID]", help="with show: the ask's id"),
        wait: bool = typer.Option(False, "--wait", help="wait for every route's answer"),
        as_json: bool = typer.Option(False, "--json"),
        timeout: float = typer.Option(600.0, "--timeout", help="seconds --wait waits")):
    """Route a prompt to the right kernel(s) (triage), deliver it, and with --wait print the answers.
    `nika-brain ask show <id>` shows a recorded ask. Exit 8 when a route was not taken or answered."""
    from nika_brain.federation.asking import record, route
    brain = Brain.find()
    if prompt == "show" and ask_id is not None:
        _print(record.load_ask(brain, ask_id), as_json)
        return
    if ask_id is not None:
        raise BrainError('one prompt: quote it (nika-brain ask "...")')
    if not 0 < timeout <= 86400:
        raise BrainError("--timeout must be between 0 and 86400 seconds")
    rec = route.ask(brain, prompt, wait=wait, timeout=timeout, by=getpass.getuser())
    _print(rec, as_json)
    want = "answered" if wait else "taken"
    if any(r["status"] != want for r in rec["routes"]):
        raise typer.Exit(EXIT_NOT_ANSWERED)
