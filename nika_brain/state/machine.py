"""This machine, as one brain spread over several sees it: `.nika/machine.yml` (local, never in git).

    id: paris-1        # default: the host name
    region: fr         # where this machine runs (a data region); none declared: regions are labels only

A kernel is placed on the machine that spawns it (its record says which); a kernel with a `region`
is refused on a machine that declares another one, so a `region: fr` kernel cannot run elsewhere.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass

from nika_brain.brain import Brain
from nika_brain.errors import Invalid, Refused
from nika_brain.support.schema import F, fields, name
from nika_brain.support.yamlsafe import dumps, load_doc

FILE = "machine.yml"
_SPEC = {"id": F(str, check=name), "region": F(str, check=name)}


@dataclass(frozen=True)
class Machine:
    id: str
    region: str | None = None


def _host() -> str:
    host = socket.gethostname().split(".")[0] or "localhost"
    return host if name(host) is None else "localhost"


def load(brain: Brain) -> Machine:
    path = brain.state_dir / FILE
    if not path.exists():
        return Machine(_host())
    doc = load_doc(path)
    if doc.data is None:
        return Machine(_host())
    values = fields(doc, doc.data, (), _SPEC)
    return Machine(values.get("id") or _host(), values.get("region"))


def save(brain: Brain, *, machine_id: str | None = None, region: str | None = None,
         clear_region: bool = False) -> Machine:
    for what, value in (("id", machine_id), ("region", region)):
        if value is not None and name(value) is not None:
            raise Invalid(f"machine {what} {value!r}: {name(value)}")
    with brain.mutex("machine"):
        cur = load(brain)
        new = Machine(machine_id or cur.id, None if clear_region else (region or cur.region))
        data = {"id": new.id, **({"region": new.region} if new.region else {})}
        path = brain.state_dir / FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        brain.write(path, dumps(data))
    return new


def check_placement(machine: Machine, kernel_id: str, region: str | None, runtime: str) -> None:
    """A kernel bound to a region runs only on a machine of that region (a cluster runtime places it
    itself, by node affinity)."""
    if not region or runtime == "kubernetes" or machine.region is None:
        return
    if region != machine.region:
        raise Refused(f"kernel {kernel_id} belongs to region {region} but this machine ({machine.id}) is in "
                      f"region {machine.region}: spawn it on a machine of region {region} (or with "
                      "--runtime kubernetes, which places it by node affinity)")
