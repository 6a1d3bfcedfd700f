"""Super-chunks: a group of frequent near-duplicates of one kernel merged into one record.

A group forms around a record (the most frequent first: `dups` counts the duplicates dropped against
it at write) from the kernel's other live chunks at least `merge_threshold` similar to it; it is
merged when its weight (members plus their dropped duplicates) reaches `merge_min`. The super-chunk
is extractive by default (the seed's text, then the sentences the others add), or the output of
`superchunk_command` (argv; the members' texts on stdin, separated by lines of `---`). It keeps the
links both ways: `replaces` on the super-chunk, `superseded_by` on each member; the members move to
the kernel's `merged` collection, which default queries skip (`--all` includes it). Only one kernel's records
are ever read for its super-chunks.
"""
from __future__ import annotations

import hashlib
import re
import subprocess
from collections import Counter
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nika_brain.errors import BrainError
from nika_brain.federation.vault import settings as vsettings
from nika_brain.federation.vault import store as vstore
from nika_brain.federation.vault.query import caller_kernel
from nika_brain.federation.vault.records import LEVELS, Record, rank
from nika_brain.support import clock

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain

_SENT = re.compile(r"(?<=[.!?…])\s+|\n+")
COMMAND_TIMEOUT = 300


def _extractive(texts: list[str], limit: int) -> str:
    out: list[str] = []
    seen: set[str] = set()
    for text in texts:
        for sent in _SENT.split(text):
            s = sent.strip()
            key = " ".join(s.lower().split())
            if not s or key in seen:
                continue
            if sum(len(x) + 1 for x in out) + len(s) > limit and out:
                return "\n".join(out)
            seen.add(key)
            out.append(s)
    return "\n".join(out)


def _command(argv: tuple[str, ...], texts: list[str]) -> str:
    try:
        proc = subprocess.run(list(argv), input="\n---\n".join(texts), capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrainError(f"superchunk_command {argv[0]} failed: {exc}",
                         key="federation.vault.superchunk_command") from exc
    if proc.returncode != 0 or not proc.stdout.strip():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BrainError(f"superchunk_command {argv[0]} exited {proc.returncode}: {tail}",
                         key="federation.vault.superchunk_command")
    return proc.stdout.strip()


def _neighbours(vecs: Any, threshold: float, block: int = 512) -> list[Any]:
    """For each row, the rows at least `threshold` similar (itself included), in blocks of rows so
    that 10,000 records never need a 10,000 × 10,000 matrix at once."""
    import numpy as np
    out: list[Any] = []
    for start in range(0, len(vecs), block):
        sims = vecs[start:start + block] @ vecs.T
        out += [np.nonzero(row >= threshold)[0] for row in sims]
    return out


def _groups(vecs: Any, weights: list[int], threshold: float, minimum: int) -> list[list[int]]:
    import numpy as np
    n = len(weights)
    near = _neighbours(vecs, threshold)
    order = sorted(range(n), key=lambda i: (-weights[i], i))
    taken = np.zeros(n, dtype=bool)
    groups = []
    for i in order:
        if taken[i]:
            continue
        members = [int(j) for j in near[i] if not taken[j]]
        if i not in members:
            members.append(i)
        if len(members) >= 2 and sum(weights[j] for j in members) >= minimum:
            members.sort(key=lambda j: (j != i, -weights[j], j))
            taken[members] = True
            groups.append(members)
    return groups


def merge(brain: Brain, kernel_id: str, *, now: datetime | None = None) -> list[Record]:
    """Merge the kernel's groups of frequent near-duplicates; returns the super-chunks made."""
    import numpy as np
    kernel = caller_kernel(kernel_id)
    cfg = vsettings.load(brain)
    now = now or clock.now()
    st = vstore.store(brain)
    made: list[Record] = []
    with st.errors("vault merge"), st.writer():
        live = vstore.collection(brain, kernel, create=False)
        every = vstore.get_all(live, None, ["documents", "metadatas", "embeddings"])
        keep = [i for i, m in enumerate(every["metadatas"])
                if m.get("kind", "chunk") == "chunk" and m.get("kernel_id") == kernel]
        got = {key: [every[key][i] for i in keep] for key in every}
        if len(got["ids"]) < 2:
            return []
        merged = vstore.collection(brain, kernel, "merged")
        vecs = np.asarray(got["embeddings"], dtype=np.float32)
        weights = [1 + int(m.get("dups", 0) or 0) for m in got["metadatas"]]
        for members in _groups(vecs, weights, cfg.merge_threshold, cfg.merge_min):
            texts = [got["documents"][j] for j in members]
            text = (_command(cfg.superchunk_command, texts) if cfg.superchunk_command
                    else _extractive(texts, int(cfg.chunk_chars * 1.5)))
            metas = [got["metadatas"][j] for j in members]
            levels = [str(m.get("level", "atomic")) for m in metas]
            level = min((lv for lv in levels if lv in LEVELS), key=rank, default="atomic")
            parents = {str(m.get("parent", "")) for m in metas}
            ids = [got["ids"][j] for j in members]
            digest = hashlib.sha256(("\0".join(sorted(ids)) + "\0" + text).encode()).hexdigest()[:24]
            sup = Record(id=f"{kernel}:super-{digest}", kernel_id=kernel, text=text, level=level,
                         parent=parents.pop() if len(parents) == 1 else "", source="super-chunk",
                         added=clock.iso(now), day=clock.iso(now)[:10],
                         dups=sum(weights[j] for j in members) - 1, kind="super", replaces=tuple(ids))
            emb = vstore.embed(brain, [text], "passage")
            live.add(ids=[sup.id], embeddings=emb, documents=[text], metadatas=[sup.meta()])
            # the members move to the kernel's merged collection, linked to their super-chunk
            merged.upsert(ids=ids, embeddings=vecs[members], documents=texts,
                          metadatas=[dict(m, superseded_by=sup.id) for m in metas])
            live.delete(ids=ids)
            made.append(sup)
    return made


def levels_count(records: list[Record]) -> dict[str, int]:
    return dict(Counter(r.level for r in records))
