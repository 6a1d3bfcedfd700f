"""`nika-brain registry`: the session registry (sessions <-> kernels <-> entities, federation/lineage/registry.py)."""

from __future__ import annotations

import json

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app

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
    """Link a Claude session to a kernel and an entity."""
    from nika_brain.federation.lineage import registry

    s = registry.link_session(Brain.find(), session_id, kernel=kernel, entity=entity)
    print(
        f"{s['session']}: kernel {s.get('kernel') or '-'}, entity {s.get('entity') or '-'} "
        f"(root {s.get('root') or '-'})"
    )
