"""Grants: who may read whose vault records, as YAML state files in the brain (`grants/`).

`grants/<owner>--<reader>.yml` says that kernel <reader> may read kernel <owner>'s records, for some
levels (all when the list is empty) and until some time (forever when null). The file is the record:
it is reviewed in git, listed in BRAIN-INDEX.md, and every grant and revoke is journaled
(VAULT_GRANT / VAULT_REVOKE in journal/signals.jsonl). A kernel session (NIKA_KERNEL_ID set) may only
grant or revoke its own records; an expired grant counts as absent.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.engine import signals
from nika_brain.errors import BrainError, Refused
from nika_brain.federation.vault.records import LEVELS, check_kernel, check_level
from nika_brain.support import clock
from nika_brain.support.schema import F, fields, str_list
from nika_brain.support.yamlsafe import dumps, load_doc


@dataclass(frozen=True)
class Grant:
    owner: str                   # whose records
    reader: str                  # who may read them
    levels: tuple[str, ...] = ()  # empty = every level
    until: str | None = None     # ISO time; None = no end
    by: str = ""
    at: str = ""

    def active(self, now: datetime) -> bool:
        return self.until is None or clock.parse(self.until, what="until") > now

    def allows(self, level: str) -> bool:
        return not self.levels or level in self.levels


_SPEC = {
    "owner": F(str, required=True),
    "reader": F(str, required=True),
    "levels": F(list, default=[], check=lambda v: str_list(v) or (
        None if all(x in LEVELS for x in v) else f"levels must be among {', '.join(LEVELS)}")),
    "until": F(str),
    "by": F(str, default=""),
    "at": F(str, default=""),
}


def grants_dir(brain: Brain) -> Path:
    return brain.root / "grants"


def grant_path(brain: Brain, owner: str, reader: str) -> Path:
    return grants_dir(brain) / f"{check_kernel(owner)}--{check_kernel(reader)}.yml"


def load_path(path: Path) -> Grant:
    doc = load_doc(path)
    v = fields(doc, doc.data, (), _SPEC)
    for key in ("owner", "reader"):
        try:
            check_kernel(v[key])
        except BrainError as exc:
            raise doc.error(exc.message, key) from exc
    if path.stem != f"{v['owner']}--{v['reader']}":
        raise doc.error(f"owner/reader do not match the file name ({path.name})", "owner")
    if v["until"] is not None:
        try:
            clock.parse(v["until"], what="until")
        except BrainError as exc:
            raise doc.error(exc.message, "until") from exc
    return Grant(v["owner"], v["reader"], tuple(v["levels"]), v["until"], v["by"], v["at"])


def list_grants(brain: Brain) -> list[Grant]:
    return brain.load_all(grants_dir(brain), load_path)


def active_for(brain: Brain, reader: str, *, now: datetime | None = None) -> dict[str, Grant]:
    """owner -> grant, for the grants that let `reader` read now."""
    now = now or clock.now()
    return {g.owner: g for g in list_grants(brain) if g.reader == reader and g.active(now)}


def _check_actor(owner: str, verb: str) -> str:
    session_kernel = os.environ.get("NIKA_KERNEL_ID")
    if session_kernel and session_kernel != owner:
        raise Refused(f"refused: a session of kernel {session_kernel} cannot {verb} access to "
                      f"kernel {owner}'s records (only {owner} or a person outside a kernel session can)")
    return session_kernel or os.environ.get("USER") or "cli"


def grant(brain: Brain, owner: str, reader: str, *, levels: list[str] | tuple[str, ...] = (),
          until: str | None = None, now: datetime | None = None) -> Grant:
    check_kernel(owner), check_kernel(reader)
    if owner == reader:
        raise BrainError(f"kernel {owner} reads its own records already; a grant needs two kernels")
    for level in levels:
        check_level(level)
    now = now or clock.now()
    if until is not None:
        end = clock.parse(until, what="--until")
        if end <= now:
            raise BrainError(f"--until {until} is not in the future")
        until = clock.iso(end)
    by = _check_actor(owner, "grant")
    g = Grant(owner, reader, tuple(dict.fromkeys(levels)), until, by, clock.iso(now))
    data = {"owner": g.owner, "reader": g.reader, "levels": list(g.levels), "until": g.until,
            "by": g.by, "at": g.at}
    with brain.mutex("grants"):
        brain.write(grant_path(brain, owner, reader), dumps(data))
    signals.emit(brain, "VAULT_GRANT", reason=f"{reader} may read {owner}'s vault records",
                 payload=data, now=now, publish=False)
    return g


def revoke(brain: Brain, owner: str, reader: str, *, now: datetime | None = None) -> bool:
    path = grant_path(brain, owner, reader)
    by = _check_actor(owner, "revoke")
    with brain.mutex("grants"):
        if not path.exists():
            return False
        path.unlink()
    signals.emit(brain, "VAULT_REVOKE", reason=f"{reader} may no longer read {owner}'s vault records",
                 payload={"owner": owner, "reader": reader, "by": by}, now=now, publish=False)
    return True


def drop_kernel(brain: Brain, kernel_id: str) -> int:
    """Remove every grant naming `kernel_id` (rag purge); returns how many went."""
    n = 0
    with brain.mutex("grants"):
        for g in list_grants(brain):
            if kernel_id in (g.owner, g.reader):
                grant_path(brain, g.owner, g.reader).unlink(missing_ok=True)
                n += 1
    return n
