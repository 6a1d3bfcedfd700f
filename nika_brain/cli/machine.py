"""`nika-brain machine`: this machine's id and region (state/machine.py), for a brain on several machines."""
from __future__ import annotations

from typing import Optional

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app


@app.command("machine")
def machine_cmd(machine_id: Optional[str] = typer.Option(None, "--id", help="this machine's name in the brain"),
                region: Optional[str] = typer.Option(None, help="the data region this machine runs in (e.g. fr)"),
                no_region: bool = typer.Option(False, "--no-region", help="forget the region")):
    """Show (or set) this machine's id and region: a kernel with a region runs only on a machine of it."""
    from nika_brain.state import machine
    brain = Brain.find()
    m = machine.save(brain, machine_id=machine_id, region=region, clear_region=no_region) \
        if (machine_id or region or no_region) else machine.load(brain)
    print(f"machine {m.id}: region {m.region or '(none declared: regions are labels only here)'}")
