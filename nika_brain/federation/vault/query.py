"""Reading the vault, scoped: the kernel filter is applied here, never left to callers.

`search()` answers for one kernel (the caller's): its own records, plus those of the kernels that
granted it access (grants.py) when asked for with `owners`. A session started for a kernel
(NIKA_KERNEL_ID) can only search as that kernel. Each kernel's records live in their own collections
(store.py), and only the allowed owners' collections are searched; the caller's optional `where` is
applied inside them, so it can narrow but never widen the scope; results are checked again against
the allowed owners and levels after Chroma answers (defence in depth), and embeddings are never
returned.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nika_brain.errors import BrainError, Refused
from nika_brain.federation.vault import grants as vgrants
from nika_brain.federation.vault import store as vstore
from nika_brain.federation.vault.records import (
    LEVELS,
    Record,
    check_kernel,
    check_level,
    from_chroma,
)
from nika_brain.support import clock

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain

MAX_K = 100


def caller_kernel(kernel_id: str | None) -> str:
    """The kernel a read is made as: the session's own, or the one asked for outside a session."""
    session_kernel = os.environ.get("NIKA_KERNEL_ID") or None
    if session_kernel and kernel_id and kernel_id != session_kernel:
        raise Refused(f"refused: this session belongs to kernel {session_kernel}; it cannot read "
                         f"as kernel {kernel_id}")
    kernel = kernel_id or session_kernel
    if not kernel:
        raise BrainError("which kernel? give --kernel <id> (or run inside a kernel session)")
    return check_kernel(kernel)


def scope(brain: Brain, kernel: str, owners: Sequence[str] = (), *,
          now: datetime | None = None) -> dict[str, tuple[str, ...]]:
    """owner -> levels readable by `kernel` (() = all); refuses an owner without an active grant."""
    allowed: dict[str, tuple[str, ...]] = {kernel: ()}
    if owners:
        active = vgrants.active_for(brain, kernel, now=now)
        for owner in owners:
            check_kernel(owner)
            if owner == kernel:
                continue
            g = active.get(owner)
            if g is None:
                raise Refused(f"refused: kernel {kernel} has no grant to read kernel {owner}'s "
                                 f"records (nika-brain rag grant {owner} {kernel})")
            allowed[owner] = g.levels
    return allowed


def _where(owner_levels: tuple[str, ...], levels: Sequence[str], extra: dict | None) -> dict | None:
    """The filter inside one owner's collection: the grant's levels, the asked levels, and the
    caller's own filter, AND-ed (the kernel scope is the collection itself)."""
    parts: list[dict] = []
    if owner_levels:
        parts.append({"level": {"$in": list(owner_levels)}})
    if levels:
        parts.append({"level": {"$in": list(levels)}})
    if extra:
        if not isinstance(extra, dict):
            raise BrainError("where must be a mapping of metadata filters")
        parts.append(extra)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"$and": parts}


def _allowed(rec: Record, allowed: dict[str, tuple[str, ...]]) -> bool:
    levels = allowed.get(rec.kernel_id)
    return levels is not None and (not levels or rec.level in levels) and rec.id.startswith(
        f"{rec.kernel_id}:")


def _roles(include_superseded: bool) -> tuple[str, ...]:
    return vstore.ROLES if include_superseded else ("live",)


def search(brain: Brain, text: str | None = None, *, kernel: str | None = None, k: int = 5,
           levels: Sequence[str] = (), owners: Sequence[str] = (), where: dict | None = None,
           include_superseded: bool = False, embedding: Any = None,
           now: datetime | None = None) -> list[Record]:
    """The k records nearest to `text` (or to a given `embedding`) that `kernel` may read."""
    kernel = caller_kernel(kernel)
    if not 1 <= k <= MAX_K:
        raise BrainError(f"--k must be between 1 and {MAX_K}, got {k}")
    for level in levels:
        check_level(level)
    if where is not None and not isinstance(where, dict):
        raise BrainError("where must be a mapping of metadata filters")
    allowed = scope(brain, kernel, owners, now=now or clock.now())
    if embedding is None:
        if not text or not text.strip():
            raise BrainError("empty query text")
        embedding = vstore.embed(brain, [text], "query")[0]
    found: list[Record] = []
    with vstore.store(brain).errors("vault query"):
        for owner, owner_levels in allowed.items():
            for role in _roles(include_superseded):
                col = vstore.collection(brain, owner, role, create=False)
                if col is None:
                    continue
                res = col.query(query_embeddings=[embedding], n_results=k,
                                where=_where(owner_levels, levels, where),
                                include=["documents", "metadatas", "distances"])
                for rid, doc, meta, dist in zip(res["ids"][0], res["documents"][0],
                                                res["metadatas"][0], res["distances"][0]):
                    rec = from_chroma(rid, doc, meta, 1.0 - float(dist))
                    if _allowed(rec, allowed):
                        found.append(rec)
    found.sort(key=lambda r: (-(r.score or 0.0), r.id))
    return newer_first(found)[:k]


UPDATE_TIE = 0.03   # scores this close: an update and the record it updates answer alike


def newer_first(found: list[Record]) -> list[Record]:
    """A factual update ranks above the record it updates when both answer the query alike."""
    out = list(found)
    for i, rec in enumerate(out):
        for j in range(i):
            old = out[j]
            if old.id in rec.updates and (old.score or 0.0) - (rec.score or 0.0) <= UPDATE_TIE:
                out.insert(j, out.pop(i))
                break
    return out


def _by_owner(ids: Sequence[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i in dict.fromkeys(ids):
        out.setdefault(i.split(":", 1)[0], []).append(i)
    return out


def get(brain: Brain, ids: Sequence[str], *, kernel: str | None = None,
        owners: Sequence[str] = ()) -> list[Record]:
    """Records by id (live or merged), only those `kernel` may read (others are not found)."""
    kernel = caller_kernel(kernel)
    allowed = scope(brain, kernel, owners)
    recs: list[Record] = []
    with vstore.store(brain).errors("vault get"):
        for owner, owner_ids in _by_owner(ids).items():
            if owner not in allowed:
                continue
            for role in vstore.ROLES:
                col = vstore.collection(brain, owner, role, create=False)
                if col is None:
                    continue
                res = col.get(ids=owner_ids, include=["documents", "metadatas"])
                recs += [from_chroma(i, d, m) for i, d, m in
                         zip(res["ids"], res["documents"], res["metadatas"])]
    return [r for r in recs if _allowed(r, allowed)]


def records(brain: Brain, kernel_id: str, *, include_superseded: bool = False,
            levels: Sequence[str] = ()) -> tuple[list[str], Any]:
    """(ids, (n, dim) float32 embeddings) of one kernel's records: for topic clustering (issue 14).
    A kernel session can only list its own."""
    import numpy as np
    kernel = caller_kernel(kernel_id)
    ids: list[str] = []
    vecs: list[Any] = []
    with vstore.store(brain).errors("vault records"):
        for role in _roles(include_superseded):
            got = vstore.get_all(vstore.collection(brain, kernel, role, create=False),
                                 _where((), levels, None), ["embeddings"])
            ids += got["ids"]
            vecs += got["embeddings"]
    return ids, (np.asarray(vecs, dtype=np.float32) if ids else np.zeros((0, 0), np.float32))


def tree(brain: Brain, record: str, *, kernel: str | None = None) -> dict:
    """A record's ancestors (root first) and its children, as far as `kernel` may read them."""
    kernel = caller_kernel(kernel)
    owner = record.split(":", 1)[0]
    owners = (owner,) if owner != kernel else ()
    found = get(brain, [record], kernel=kernel, owners=owners)
    if not found:
        raise BrainError(f"no such record (or not readable by kernel {kernel}): {record}")
    rec = found[0]
    ancestors: list[Record] = []
    cur = rec
    while cur.parent and len(ancestors) < len(LEVELS):
        up = get(brain, [cur.parent], kernel=kernel, owners=owners)
        if not up:
            break
        cur = up[0]
        ancestors.insert(0, cur)
    allowed = scope(brain, kernel, owners)
    children: list[Record] = []
    with vstore.store(brain).errors("vault tree"):
        for role in vstore.ROLES:   # a parent and its children belong to one kernel
            res = vstore.get_all(vstore.collection(brain, rec.kernel_id, role, create=False),
                                 {"parent": rec.id}, ["documents", "metadatas"])
            children += [from_chroma(i, d, m) for i, d, m in
                         zip(res["ids"], res["documents"], res["metadatas"])]
    children = [c for c in children if _allowed(c, allowed)]
    return {"record": rec, "ancestors": ancestors,
            "children": sorted(children, key=lambda r: (r.source, r.chunk))}
