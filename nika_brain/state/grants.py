"""Vault grants: `grants/<owner>--<reader>.yml` says that kernel <reader> may read kernel <owner>'s
vault records, for some levels (all when the list is empty) and until some time (forever when null).

The record only; granting, revoking and journaling are nika_brain.federation.vault.grants.
A grant is the operator's decision: `rag grant` signs the record with the operator's key (kind
"grant", over every field but the signature), and a grant is in force only when `authentic()` says
so. A file written by hand (or by an agent's script) is ignored where grants are applied (the vault's
reads) and reported by `rag grants` and `validate`.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.state.kernels import check_id as check_kernel
from nika_brain.support import clock
from nika_brain.support.schema import F, fields, str_list
from nika_brain.support.yamlsafe import load_doc

# The vault's hierarchy, strategy -> atomic (a parent's level is strictly above its child's).
LEVELS = ("strategy", "project", "job", "task", "atomic")


@dataclass(frozen=True)
class Grant:
    owner: str                   # whose records
    reader: str                  # who may read them
    levels: tuple[str, ...] = ()  # empty = every level
    until: str | None = None     # ISO time; None = no end
    by: str = ""
    at: str = ""
    signature: str | None = None

    def fields(self) -> dict:
        """What the operator signs (every field but the signature)."""
        return {"owner": self.owner, "reader": self.reader, "levels": list(self.levels),
                "until": self.until, "by": self.by, "at": self.at}

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
    "signature": F(str),
}

SIGNED_KIND = "grant"


def authentic(brain: Brain, g: Grant) -> str | None:
    """Why this grant is not in force as the operator's decision, or None when it is."""
    from nika_brain.state import authority
    if authority.verify(brain, SIGNED_KIND, g.fields(), g.signature):
        return None
    if not g.signature:
        return "not signed by the operator (written by hand?); ignored"
    return "its signature is not the operator's over this grant (forged, or edited after it); ignored"


def grants_dir(brain: Brain) -> Path:
    return brain.grants_dir


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
    return Grant(owner=v["owner"], reader=v["reader"], levels=tuple(v["levels"]), until=v["until"],
                 by=v["by"], at=v["at"], signature=v["signature"])


def list_grants(brain: Brain) -> list[Grant]:
    return brain.load_all(grants_dir(brain), load_path)

