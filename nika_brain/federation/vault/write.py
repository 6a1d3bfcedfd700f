"""Writing records: the one path into `nika_vault`, with deduplication at write.

`add()` takes chunks already embedded (ingest embeds them; tests build vectors directly). Within one
writer hold (see chroma.VectorStore.writer), it
1. skips chunks whose id exists already (same kernel, same text: a resumed ingest),
2. drops a chunk whose cosine similarity to an earlier chunk of the same batch, or to an existing
   record of the same kernel, is above the threshold (strictly: 0.95 keeps 0.95) AND that says the
   same thing (facts.same_thing: same numbers, dates, names and words), and counts the drop on the
   record it duplicates (`dups`, how frequent that record is: super-chunks start there),
3. adds the rest; a kept chunk close to an existing record that says something else is an update:
   its `updates` names that record, and a query ranks the newer first when both score alike.
Only the kernel's own records are compared: a kernel never learns, by a dropped chunk, what another
kernel holds.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nika_brain.errors import BrainError
from nika_brain.federation.vault import facts
from nika_brain.federation.vault import settings as vsettings
from nika_brain.federation.vault import store as vstore
from nika_brain.federation.vault.records import (
    DEFAULT_LEVEL,
    Record,
    check_kernel,
    check_level,
    kernel_of,
    rank,
    record_id,
)
from nika_brain.support import clock

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain

CANDIDATES = 5   # the closest records a new chunk is checked against (cosine, then facts)


@dataclass
class AddResult:
    added: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    dropped: list[tuple[int, str, float]] = field(default_factory=list)  # (input index, kept id, cosine)

    def merge(self, other: AddResult, offset: int = 0) -> None:
        self.added += other.added
        self.already += other.already
        self.dropped += [(i + offset, rid, s) for i, rid, s in other.dropped]


@dataclass(frozen=True)
class Chunk:
    text: str
    source: str = ""
    chunk: int = 0


def check_parent(brain: Brain, kernel_id: str, level: str, parent: str) -> None:
    if not parent:
        return
    if kernel_of(parent) != kernel_id:
        raise BrainError(f"parent {parent} is not a record of kernel {kernel_id}")
    meta = None
    with vstore.store(brain).errors():
        for role in vstore.ROLES:
            col = vstore.collection(brain, kernel_id, role, create=False)
            res = col.get(ids=[parent], include=["metadatas"]) if col is not None else {"ids": []}
            if res["ids"]:
                meta = res["metadatas"][0]
                break
    if meta is None or meta.get("kernel_id") != kernel_id:
        raise BrainError(f"no such parent record in kernel {kernel_id}: {parent}")
    plevel = str(meta.get("level", DEFAULT_LEVEL))
    if rank(plevel) >= rank(level):
        raise BrainError(f"a {level} record cannot have a {plevel} parent (strategy → project → job "
                         "→ task → atomic: the parent must be higher)")


def existing_ids(brain: Brain, kernel_id: str, ids: Sequence[str]) -> set[str]:
    """The ids among `ids` stored for the kernel, live or merged into a super-chunk."""
    if not ids:
        return set()
    found: set[str] = set()
    with vstore.store(brain).errors():
        for role in vstore.ROLES:
            col = vstore.collection(brain, kernel_id, role, create=False)
            if col is not None:
                found |= set(col.get(ids=list(dict.fromkeys(ids)), include=[])["ids"])
    return found


_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_clients: dict[str, Any] = {}


@contextlib.contextmanager
def shared_writer(brain: Brain, kernel_id: str, mode: str, *, wait: float = 120.0,
                  ttl: float = 60.0) -> Iterator[None]:
    """One writer per kernel collection across machines (issue 22, item 6). A Chroma server is shared
    by several machines, and dedup is a read (query the near neighbours) then a write (add): two
    machines ingesting the same chunk at once would both read "absent" and both add. With a Redis
    (`federation.redis_url`, the machines' common one), the read-then-write holds a Redis lock per
    kernel (SET NX PX, released only by its token; its TTL frees it if this process dies). The
    embedded store has its own file lock (one machine); a server without a Redis: one machine only."""
    url = (brain.config.federation or {}).get("redis_url")
    if mode != "server" or not url:
        yield
        return
    import os
    import time
    import uuid

    import redis
    r = _clients.get(url)
    if r is None:
        r = _clients[url] = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
    key = f"{(brain.config.federation or {}).get('lease_prefix', 'nika:lease:')}vault:{kernel_id}"
    token = f"{os.getpid()}-{uuid.uuid4().hex}"
    deadline = time.monotonic() + wait
    try:
        while not r.set(key, token, nx=True, px=int(ttl * 1000)):
            if time.monotonic() >= deadline:
                raise BrainError(f"vault: kernel {kernel_id}'s collection stayed busy {wait:g}s "
                                 "(another machine ingesting); try again")
            time.sleep(0.02)
    except redis.RedisError as exc:
        raise BrainError(f"vault: cannot take the write lock on redis ({exc}); nothing was added") from exc
    try:
        yield
    finally:
        try:
            r.eval(_UNLOCK, 1, key, token)
        except redis.RedisError:
            pass  # its TTL frees it


BLOCK = 256   # batch rows compared at once with the chunks kept before them (one matrix product)


def _kept_in_batch(chunks: Sequence[Chunk], vecs: Any, keep: list[int], ids: list[str], threshold: float,
                   result: AddResult) -> list[int]:
    """The positions of `keep` that are no near-duplicate of an earlier kept chunk of the batch; the
    others are recorded as dropped with their twin. A chunk is checked against its CANDIDATES closest
    earlier kept chunks above the threshold, closest first (the earliest among equals). The cosines
    with the chunks kept before a block of BLOCK rows come from one matrix product, those within the
    block one row at a time: a batch of n chunks costs one pass over the n x n cosines, not the copy
    of every kept vector for every chunk (5,000 one-line notes took 28 s)."""
    import numpy as np

    kept: list[int] = []
    for start in range(0, len(keep), BLOCK):
        rows = keep[start:start + BLOCK]
        base = np.asarray(kept, dtype=np.intp)
        before = vecs[rows] @ vecs[base].T if len(base) else np.empty((len(rows), 0), dtype=vecs.dtype)
        for r, i in enumerate(rows):
            within = kept[len(base):]
            sims = np.concatenate([before[r], vecs[within] @ vecs[i]]) if within else before[r]
            above = np.flatnonzero(sims > threshold)
            twin = None
            if above.size:
                order = above[np.argsort(-sims[above], kind="stable")][:CANDIDATES]
                twin = next((int(j) for j in order
                             if facts.same_thing(chunks[kept[int(j)]].text, chunks[i].text)), None)
            if twin is not None:
                result.dropped.append((i, ids[kept[twin]], float(sims[twin])))
                continue
            kept.append(i)
    return kept


def add(brain: Brain, kernel_id: str, chunks: Sequence[Chunk], embeddings: Any, *,
        level: str = DEFAULT_LEVEL, parent: str = "", now: datetime | None = None,
        threshold: float | None = None, extra_meta: dict | None = None) -> AddResult:
    import numpy as np

    check_kernel(kernel_id)
    check_level(level)
    vecs = np.asarray(embeddings, dtype=np.float32)
    if vecs.ndim != 2 or vecs.shape[0] != len(chunks):
        raise BrainError(f"{len(chunks)} chunks but embeddings of shape {vecs.shape}")
    if threshold is None:
        threshold = vsettings.load(brain).dedup_threshold
    now = now or clock.now()
    st = vstore.store(brain)
    result = AddResult()
    with st.errors(), st.writer(), shared_writer(brain, kernel_id, st.mode):
        col = vstore.collection(brain, kernel_id)
        if parent:
            check_parent(brain, kernel_id, level, parent)
        ids = [record_id(kernel_id, c.text) for c in chunks]
        have = existing_ids(brain, kernel_id, ids)
        keep: list[int] = []
        seen: set[str] = set()
        for i, rid in enumerate(ids):
            if rid in have or rid in seen:
                result.already.append(rid)
            else:
                seen.add(rid)
                keep.append(i)
        # 1. near-duplicates within the batch (earlier wins), closest candidates first
        kept = _kept_in_batch(chunks, vecs, keep, ids, threshold, result)
        # 2. near-duplicates of the kernel's existing records
        bumps: dict[str, int] = {}
        updates: dict[int, list[str]] = {}
        final: list[int] = []
        if kept:
            res = col.query(query_embeddings=vecs[kept], n_results=CANDIDATES,
                            include=["distances", "documents"])
            for pos, i in enumerate(kept):
                twin = None
                for hid, dist, doc in zip(res["ids"][pos], res["distances"][pos], res["documents"][pos]):
                    sim = 1.0 - float(dist)
                    if sim <= threshold or kernel_of(hid) != kernel_id:
                        continue
                    if facts.same_thing(doc or "", chunks[i].text):
                        twin = (hid, sim)
                        break
                    updates.setdefault(i, []).append(hid)
                if twin is not None:
                    result.dropped.append((i, twin[0], twin[1]))
                    bumps[twin[0]] = bumps.get(twin[0], 0) + 1
                    continue
                final.append(i)
        if final:
            day = clock.iso(now)[:10]
            drops_in_batch: dict[str, int] = {}  # in-batch drops count on their kept twin
            for _i, rid, _s in result.dropped:
                if rid not in bumps:
                    drops_in_batch[rid] = drops_in_batch.get(rid, 0) + 1
            records = [Record(id=ids[i], kernel_id=kernel_id, text=chunks[i].text, level=level,
                              parent=parent, source=chunks[i].source, chunk=chunks[i].chunk,
                              added=clock.iso(now), day=day, dups=drops_in_batch.get(ids[i], 0),
                              updates=tuple(updates.get(i, ())))
                       for i in final]
            metas = [dict(r.meta(), **(extra_meta or {})) for r in records]
            col.add(ids=[r.id for r in records], embeddings=vecs[final],
                    documents=[r.text for r in records], metadatas=metas)
            result.added = [r.id for r in records]
        if bumps:
            got = col.get(ids=list(bumps), include=["metadatas"])
            metas = [dict(m, dups=int(m.get("dups", 0) or 0) + bumps[rid])
                     for rid, m in zip(got["ids"], got["metadatas"])]
            col.update(ids=got["ids"], metadatas=metas)
    return result


def delete(brain: Brain, kernel_id: str, ids: Sequence[str]) -> list[str]:
    """Delete some of a kernel's own records; ids of other kernels are ignored (not found)."""
    from nika_brain.federation.vault.query import caller_kernel
    kernel = caller_kernel(kernel_id)
    own = [i for i in dict.fromkeys(ids) if kernel_of(i) == kernel]
    if not own:
        return []
    gone: list[str] = []
    st = vstore.store(brain)
    with st.errors("vault delete"), st.writer():
        for role in vstore.ROLES:
            col = vstore.collection(brain, kernel, role, create=False)
            if col is None:
                continue
            found = col.get(ids=own, include=[])["ids"]
            if found:
                col.delete(ids=found)
                gone += found
    return gone
