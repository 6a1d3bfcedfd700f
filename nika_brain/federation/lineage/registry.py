"""session_registry: which Claude sessions belong to which kernel and which entity, kept in the brain.

The seed's point of truth for lineage: a successor (or any child pod) finds where it comes from here,
without reading transcripts. Files under `registry/` in the brain (versioned state, like gates/):

- `registry/entities/<id>.yml`: {id, level, parent, kernel, title, created}. Levels, top down:
  strategy -> project -> job -> task -> atomic; a strategy has no parent, every other level has a
  parent exactly one level up (the vault's hierarchy, issue 13).
- `registry/sessions/<session>.yml`: {session, kernel, entity, root, predecessor, successor,
  linked, handover}: the session's place; `handover` is filled by federation/lineage/handover.py.
- `registry/handovers/<successor kernel>.yml`: what a successor's SessionStart receives (the old
  session, its entity, the root entity, the summary).

Every write is atomic and under the brain's "registry" mutex. Reads tolerate a file that vanished.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.support import clock

LEVELS = ("strategy", "project", "job", "task", "atomic")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def folder(brain: Brain) -> Path:
    return brain.root / "registry"


def _check(what: str, value: str) -> str:
    if not isinstance(value, str) or not _ID.match(value) or ".." in value:
        raise BrainError(f"not a valid {what}: {value!r}")
    return value


def _path(brain: Brain, kind: str, name: str) -> Path:
    return folder(brain) / kind / f"{_check(kind[:-1] + ' id', name)}.yml"


def _read(path: Path) -> dict[str, Any] | None:
    from nika_brain.support.yamlsafe import load_doc

    try:
        doc = load_doc(path)
    except BrainError:
        if not path.exists():
            return None
        raise
    if not isinstance(doc.data, dict):
        raise BrainError("expected a mapping", file=str(path))
    return doc.data


def _write(brain: Brain, path: Path, data: dict) -> None:
    from nika_brain.support.yamlsafe import dumps

    path.parent.mkdir(parents=True, exist_ok=True)
    brain.write(path, dumps(data))


# ---- entities -----------------------------------------------------------------------------------


def get_entity(brain: Brain, entity_id: str) -> dict | None:
    return _read(_path(brain, "entities", entity_id))


def add_entity(
    brain: Brain,
    entity_id: str,
    level: str,
    *,
    parent: str | None = None,
    kernel: str | None = None,
    title: str = "",
    now: datetime | None = None,
) -> dict:
    """Create an entity; re-adding the same one is a no-op, a different one is an error."""
    _check("entity id", entity_id)
    if level not in LEVELS:
        raise BrainError(f"entity level must be one of {', '.join(LEVELS)}, not {level!r}")
    want = LEVELS.index(level)
    if want == 0 and parent:
        raise BrainError("a strategy is the top of the hierarchy: it has no parent")
    with brain.mutex("registry"):
        if want > 0:
            if not parent:
                raise BrainError(f"a {level} needs a parent {LEVELS[want - 1]} (--parent)")
            p = get_entity(brain, parent)
            if p is None:
                raise BrainError(f"no such entity: {parent}")
            if p.get("level") != LEVELS[want - 1]:
                raise BrainError(
                    f"the parent of a {level} must be a {LEVELS[want - 1]}; {parent} is a {p.get('level')}"
                )
        record = {
            "id": entity_id,
            "level": level,
            "parent": parent or None,
            "kernel": kernel,
            "title": title,
            "created": clock.iso(now or clock.now()),
        }
        have = get_entity(brain, entity_id)
        if have is not None:
            same = all(have.get(k) == record[k] for k in ("level", "parent", "kernel"))
            if not same:
                raise BrainError(f"entity {entity_id} exists already as a {have.get('level')}")
            return have
        _write(brain, _path(brain, "entities", entity_id), record)
    return record


def ancestors(brain: Brain, entity_id: str) -> list[dict]:
    """The entity and its parents up to the strategy, nearest first (stops at a cycle or a gap)."""
    out: list[dict] = []
    seen: set[str] = set()
    cur: str | None = entity_id
    while cur and cur not in seen and len(out) < len(LEVELS) + 1:
        seen.add(cur)
        e = get_entity(brain, cur)
        if e is None:
            break
        out.append(e)
        cur = e.get("parent")
    return out


def root_of(brain: Brain, entity_id: str) -> str:
    chain = ancestors(brain, entity_id)
    return chain[-1]["id"] if chain else entity_id


def _all(brain: Brain, kind: str) -> list[dict]:
    out = []
    for p in brain.iter_yaml(folder(brain) / kind):
        d = _read(p)
        if d is not None:
            out.append(d)
    return out


def children(brain: Brain, entity_id: str) -> list[dict]:
    return [e for e in _all(brain, "entities") if e.get("parent") == entity_id]


def kernel_root(brain: Brain, kernel_id: str, goal: str = "") -> str:
    """The kernel's own strategy entity (`kernel-<id>`), created on first use."""
    eid = f"kernel-{kernel_id}"
    if get_entity(brain, eid) is None:
        add_entity(brain, eid, "strategy", kernel=kernel_id, title=goal)
    return eid


# ---- sessions -----------------------------------------------------------------------------------


def get_session(brain: Brain, session_id: str) -> dict | None:
    return _read(_path(brain, "sessions", session_id))


def link_session(
    brain: Brain,
    session_id: str,
    *,
    kernel: str | None,
    entity: str | None = None,
    predecessor: str | None = None,
    now: datetime | None = None,
) -> dict:
    """Record (or update) a session's kernel and entity; its root entity is derived."""
    if entity is not None and get_entity(brain, entity) is None:
        raise BrainError(f"no such entity: {entity}")
    with brain.mutex("registry"):
        rec = get_session(brain, session_id) or {
            "session": session_id,
            "kernel": None,
            "entity": None,
            "root": None,
            "predecessor": None,
            "successor": None,
            "linked": clock.iso(now or clock.now()),
            "handover": None,
        }
        if kernel:
            rec["kernel"] = kernel
        if entity:
            rec["entity"] = entity
            rec["root"] = root_of(brain, entity)
        if predecessor:
            rec["predecessor"] = predecessor
        _write(brain, _path(brain, "sessions", session_id), rec)
    return rec


def update_session(brain: Brain, session_id: str, **changes: Any) -> dict:
    with brain.mutex("registry"):
        rec = get_session(brain, session_id) or {"session": session_id}
        rec.update(changes)
        _write(brain, _path(brain, "sessions", session_id), rec)
    return rec


def sessions_of(brain: Brain, *, entity: str | None = None, kernel: str | None = None) -> list[dict]:
    """Sessions of a kernel and/or linked to an entity or anything under it."""
    out = []
    for s in _all(brain, "sessions"):
        if kernel is not None and s.get("kernel") != kernel:
            continue
        if entity is not None:
            linked = s.get("entity")
            if not linked or entity not in [e["id"] for e in ancestors(brain, linked)]:
                continue
        out.append(s)
    return out


# ---- handovers (read by the successor's SessionStart) -----------------------------------------


def put_handover(brain: Brain, successor_kernel: str, record: dict) -> None:
    with brain.mutex("registry"):
        _write(brain, _path(brain, "handovers", successor_kernel), record)


def get_handover(brain: Brain, successor_kernel: str) -> dict | None:
    return _read(_path(brain, "handovers", successor_kernel))


# ---- show ---------------------------------------------------------------------------------------


def show(brain: Brain, name: str) -> dict:
    """A session (its kernel, entity chain, predecessor and successor) or an entity (its chain,
    children and sessions), whichever `name` is."""
    _check("session or entity id", name)
    s = get_session(brain, name)
    if s is not None:
        chain = ancestors(brain, s["entity"]) if s.get("entity") else []
        return {"kind": "session", **s, "lineage": [e["id"] for e in chain]}
    e = get_entity(brain, name)
    if e is not None:
        return {
            "kind": "entity",
            **e,
            "lineage": [x["id"] for x in ancestors(brain, name)],
            "children": [c["id"] for c in children(brain, name)],
            "sessions": [x["session"] for x in sessions_of(brain, entity=name)],
        }
    raise BrainError(f"no session or entity {name!r} in the registry")
