"""`nika-brain registry`: the session registry (sessions <-> kernels <-> entities, federation/lineage/registry.py)."""

from __future__ import annotations

import json

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app
from nika_brain.errors import BrainError

registry_app = typer.Typer(
    no_args_is_help=True, help="session_registry: sessions, kernels and entities (strategy -> atomic)."
)
app.add_typer(registry_app, name="registry")


@registry_app.command("show")
def registry_show(name: str, as_json: bool = typer.Option(False, "--json")):
    """A session (kernel, entity lineage, predecessor, successor) or an entity (lineage, children,
    sessions)."""
    from nika_brain.federation.lineage import registry

    info = registry.show(Brain.find(), name)
    if as_json:
        print(json.dumps(info, ensure_ascii=False, default=str))
        return
    for key, value in info.items():
        if value not in (None, [], {}, ""):
            shown = value
            if isinstance(value, (dict, list)):
                shown = json.dumps(value, ensure_ascii=False, default=str)
            print(f"{key}: {shown}")


@registry_app.command("add")
def registry_add(
    entity_id: str,
    level: str = typer.Option(..., "--level"),
    parent: str = typer.Option(None, "--parent"),
    kernel: str = typer.Option(None, "--kernel"),
    title: str = typer.Option("", "--title"),
):
    """Add an entity; its parent must be one level up (a strategy has none)."""
    from nika_brain.federation.lineage import registry

    e = registry.add_entity(Brain.find(), entity_id, level, parent=parent, kernel=kernel, title=title)
    print(f"{e['id']} ({e['level']})")


@registry_app.command("link")
def registry_link(
    session_id: str,
    entity: str = typer.Option(None, "--entity"),
    kernel: str = typer.Option(None, "--kernel"),
):
    """Link a Claude session (one the brain has seen) to a kernel and an entity."""
    from nika_brain.federation.lineage import registry
    from nika_brain.state import kernels, sessions

    brain = Brain.find()
    if not sessions.valid_id(session_id) or (sessions.load(brain, session_id) is None
                                             and registry.get_session(brain, session_id) is None):
        raise BrainError(f"no such session: {session_id!r} (the brain has not seen it start)")
    if kernel is not None and not kernels.kernel_dir(brain, kernel).is_dir():
        raise BrainError(f"no such kernel: {kernel}")
    s = registry.link_session(brain, session_id, kernel=kernel, entity=entity)
    print(
        f"{s['session']}: kernel {s.get('kernel') or '-'}, entity {s.get('entity') or '-'} "
        f"(root {s.get('root') or '-'})"
    )
