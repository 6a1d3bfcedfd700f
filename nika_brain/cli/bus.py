"""Commands over the bus: publish a message, tail a channel, ping the store."""
from __future__ import annotations

import json
from typing import Optional

import typer

from nika_brain import bus as busmod
from nika_brain.brain import Brain
from nika_brain.cli import app, json_object

bus_app = typer.Typer(no_args_is_help=True,
                      help="The bus between kernels and the orchestrator (embedded SQLite or Redis).")
app.add_typer(bus_app, name="bus")

FOLLOW_SLICE = 5.0  # seconds one blocking read waits before the next; Ctrl-C ends --follow


def _line(mid: str, message: dict) -> str:
    return f"{mid} {json.dumps(message, ensure_ascii=False, sort_keys=True)}"


@bus_app.command("publish")
def publish(channel: str, message: str = typer.Argument(..., help="a JSON object"),
            sign: bool = typer.Option(False, "--sign", help="sign it with the operator key (the "
                                      "orchestrator's inbox obeys only signed messages)")):
    """Append MESSAGE (a JSON object) to CHANNEL; print its id."""
    value = json_object(message, "bus: the message")
    brain = Brain.find()
    if sign:
        from nika_brain.engine import inbox
        value = inbox.sign(brain, value)
    print(busmod.open_bus(brain).publish(channel, value))


@bus_app.command("tail")
def tail(channel: str,
         after: Optional[str] = typer.Option(None, help="print only messages after this id"),
         follow: bool = typer.Option(False, "--follow", "-f", help="keep printing new messages"),
         count: int = typer.Option(100, help="messages fetched per read")):
    """Print the messages of CHANNEL, one `<id> <json>` per line, oldest first."""
    bus = busmod.open_bus(Brain.find())
    while True:
        batch = bus.read(channel, after=after, count=count, block=FOLLOW_SLICE if follow else 0)
        for mid, message in batch:
            print(_line(mid, message), flush=follow)
        if batch:
            after = batch[-1][0]
        elif not follow:
            return


@bus_app.command("ping")
def ping():
    """Check that the configured bus answers."""
    bus = busmod.open_bus(Brain.find())
    bus.ping()
    print(f"ok: {bus.backend} bus at {bus.where}")
