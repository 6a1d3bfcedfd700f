"""Kernel commands available before the federation: list, show, readjust (a directive that the
kernel's next SessionStart or UserPromptSubmit hook injects)."""
from __future__ import annotations

import getpass
import json

import typer

from nika_brain.state import kernels
from nika_brain.brain import Brain
from nika_brain.cli import app

kernel_app = typer.Typer(no_args_is_help=True, help="Kernels: one folder per /goal under kernels/<id>/.")
app.add_typer(kernel_app, name="kernel")


@kernel_app.command("list")
def kernel_list(as_json: bool = typer.Option(False, "--json")):
    ks = kernels.list_kernels(Brain.find())
    if as_json:
        print(json.dumps([{"id": k.id, "goal": k.goal, "tags": list(k.tags), "card": k.card,
                           "parent": k.parent, "status": k.status} for k in ks]))
        return
    for k in ks:
        print(f"{k.id}\t{k.status}\t{k.goal}")


@kernel_app.command("show")
def kernel_show(kernel_id: str):
    brain = Brain.find()
    k = kernels.load_kernel(brain, kernel_id)
    print(f"{k.id}: {k.goal}\n  status: {k.status}\n  card: {k.card}\n  tags: {', '.join(k.tags) or '-'}")
    if k.parent:
        print("  lineage: " + " <- ".join(x.id for x in kernels.lineage(brain, k)))
    for d in kernels.list_directives(brain, k.id):
        print(f"  directive {d.id} ({d.at}, {d.by}): {d.text}")


@kernel_app.command("readjust")
def kernel_readjust(kernel_id: str, directive: str):
    """Inject a directive into a running kernel without killing it (the seed's readjust verb)."""
    d = kernels.readjust(Brain.find(), kernel_id, directive, by=getpass.getuser())
    print(f"directive {d.id} queued for {kernel_id}")
