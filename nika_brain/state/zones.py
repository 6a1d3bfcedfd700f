"""Zones from brain/KERNEL.md: which paths are protected at which level.

Levels, from least to most guarded:
  open       agents whose card grants the zone may write it
  protected  as open, and in swarm mode a step in this zone waits for a human gate before it runs
  tool-only  only nika-brain writes it (claims/, locks/, gates/...); agents never edit it by hand
The first zone (in file order) whose paths cover a path is that path's zone.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.state.agents import front_matter
from nika_brain.state.scopes import covers, normalize_scope
from nika_brain.support.schema import F, fields, name, str_list
from nika_brain.support.yamlsafe import ByText

LEVELS = ("open", "protected", "tool-only")


@dataclass(frozen=True)
class Zone:
    name: str
    level: str
    paths: tuple[str, ...]
    description: str = ""


_ZONE_SPEC = {
    "name": F(str, required=True, check=name),
    "level": F(str, required=True, choices=LEVELS),
    "paths": F(list, required=True, check=str_list),
    "description": F(str, default=""),
}


def load_zones_path(path) -> list[Zone]:
    return list(_SEEN.load(Path(path)))


def _zones(path: Path, text: str) -> tuple[Zone, ...]:
    doc, _ = front_matter(path, text)
    v = fields(doc, doc.data, (), {"zones": F(list, required=True)})
    zones, seen = [], set()
    for i, item in enumerate(v["zones"]):
        z = fields(doc, item, ("zones", i), _ZONE_SPEC)
        if z["name"] in seen:
            raise doc.error(f"zone {z['name']!r} is declared twice", "zones", i, "name")
        seen.add(z["name"])
        try:
            paths = tuple(normalize_scope(p) for p in z["paths"])
        except BrainError as exc:
            raise doc.error(exc.message, "zones", i, "paths") from exc
        zones.append(Zone(z["name"], z["level"], paths, z["description"]))
    return tuple(zones)


_SEEN: ByText[tuple[Zone, ...]] = ByText(_zones)  # KERNEL.md, read at every step of a launch


def load_zones(brain: Brain) -> list[Zone]:
    if not brain.kernel_md.is_file():
        raise BrainError("no brain/KERNEL.md: zones are undefined (run `nika-brain init`)")
    return load_zones_path(brain.kernel_md)


def zone_of(zones: list[Zone] | Brain, relpath: str) -> Zone | None:
    if isinstance(zones, Brain):
        zones = load_zones(zones)
    for z in zones:
        if any(covers(p, relpath) for p in z.paths):
            return z
    return None


def zone_named(zones: list[Zone], zone: str) -> Zone:
    for z in zones:
        if z.name == zone:
            return z
    raise BrainError(f"unknown zone {zone!r} (zones: {', '.join(z.name for z in zones)})")
