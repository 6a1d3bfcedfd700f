"""Vault records: what one chunk of a kernel's memory carries, and the strategy → atomic levels.

A record lives in the Chroma collection `nika_vault` with its embedding, its text as the document, and
flat metadata (Chroma accepts only str/int/float/bool values, so "none" is the empty string). Its id
is derived from the kernel and the text, so the same chunk ingested twice (a resumed burst) lands on
the same id and is skipped, never duplicated.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from nika_brain.errors import BrainError
from nika_brain.state.grants import LEVELS
from nika_brain.support.schema import name

VAULT = "nika_vault"
SUMMARIES = "nika_federation_summaries"
DEFAULT_LEVEL = "atomic"


def check_kernel(kernel_id: str) -> str:
    if not isinstance(kernel_id, str) or name(kernel_id) is not None:
        raise BrainError(f"not a valid kernel id: {kernel_id!r}")
    return kernel_id


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise BrainError(f"unknown level {level!r} (one of: {', '.join(LEVELS)})")
    return level


def rank(level: str) -> int:
    """0 for strategy ... 4 for atomic: a parent's rank is strictly lower than its child's."""
    return LEVELS.index(check_level(level))


def record_id(kernel_id: str, text: str) -> str:
    digest = hashlib.sha256(f"{kernel_id}\0{text}".encode()).hexdigest()[:24]
    return f"{kernel_id}:{digest}"


def kernel_of(record_id_: str) -> str:
    return record_id_.split(":", 1)[0]


@dataclass(frozen=True)
class Record:
    id: str
    kernel_id: str
    text: str
    level: str = DEFAULT_LEVEL
    parent: str = ""            # record id of the parent, "" for a root
    source: str = ""            # file (as given) and chunk position
    chunk: int = 0
    added: str = ""             # ISO time of the write
    day: str = ""               # YYYY-MM-DD of the write (summaries select on it)
    dups: int = 0               # near-duplicates dropped against it (how "frequent" it is)
    kind: str = "chunk"         # chunk | super
    replaces: tuple[str, ...] = ()   # a super-chunk: the ids it merged
    superseded_by: str = ""     # a chunk merged into a super-chunk
    updates: tuple[str, ...] = ()   # older records it is close to but contradicts (a factual update)
    score: float | None = None  # cosine similarity, on query results only
    extra: dict[str, Any] = field(default_factory=dict)

    def meta(self) -> dict[str, Any]:
        return {"kernel_id": self.kernel_id, "level": self.level, "parent": self.parent,
                "source": self.source, "chunk": self.chunk, "added": self.added, "day": self.day,
                "dups": self.dups, "kind": self.kind, "replaces": ",".join(self.replaces),
                "superseded_by": self.superseded_by, "updates": ",".join(self.updates)}

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.meta().items()}
        out["replaces"] = list(self.replaces)
        out["updates"] = list(self.updates)
        out.update(id=self.id, text=self.text)
        if self.score is not None:
            out["score"] = round(self.score, 4)
        return out


def from_chroma(rid: str, doc: str | None, meta: dict | None, score: float | None = None) -> Record:
    m = dict(meta or {})
    replaces = tuple(x for x in str(m.get("replaces", "")).split(",") if x)
    return Record(id=rid, kernel_id=str(m.get("kernel_id", "")), text=doc or "",
                  level=str(m.get("level", DEFAULT_LEVEL)), parent=str(m.get("parent", "")),
                  source=str(m.get("source", "")), chunk=int(m.get("chunk", 0) or 0),
                  added=str(m.get("added", "")), day=str(m.get("day", "")),
                  dups=int(m.get("dups", 0) or 0), kind=str(m.get("kind", "chunk")),
                  replaces=replaces, superseded_by=str(m.get("superseded_by", "")), score=score,
                  updates=tuple(x for x in str(m.get("updates", "")).split(",") if x))
