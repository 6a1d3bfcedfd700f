"""The vault's collections and embedder, opened once per process for a brain.

The vault is one Chroma store (embedded or server) with two collections per kernel: its live
records (`nika_vault.<kernel>.live`) and the chunks merged into super-chunks
(`nika_vault.<kernel>.merged`), each tagged with its kernel in the collection's metadata. A kernel's
query searches its own collection only, so the kernel scope costs nothing at query time: local Chroma
has no index on metadata, and a `where` on kernel_id over one shared collection costs time in
proportion to the kernel's records (measured: 115-370 ms over 100,000 records, against 5 ms
unfiltered). Records still carry their kernel_id, and every read checks it again.
"""
from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from nika_brain.federation.vault import chroma
from nika_brain.federation.vault.records import SUMMARIES, VAULT

if TYPE_CHECKING:  # pragma: no cover
    import numpy

    from nika_brain.brain import Brain

ROLES = ("live", "merged")


def store(brain: Brain) -> chroma.VectorStore:
    return chroma.open_store(brain)


def name(kernel: str, role: str = "live") -> str:
    # Chroma names: [A-Za-z0-9._-], no "..", alphanumeric at both ends; kernel ids are nearly that.
    part = kernel if ".." not in kernel else "h" + hashlib.sha256(kernel.encode()).hexdigest()[:16]
    return f"{VAULT}.{part}.{role}"


def collection(brain: Brain, kernel: str, role: str = "live", *, create: bool = True) -> Any:
    """A kernel's live or merged collection; None when it does not exist and create is False."""
    return store(brain).collection(name(kernel, role), create=create,
                                   metadata={"kernel_id": kernel, "role": role})


def kernels(brain: Brain) -> list[str]:
    """Kernels that have vault collections."""
    out = {str(meta.get("kernel_id")) for n, meta in store(brain).listing()
           if n.startswith(f"{VAULT}.") and meta.get("kernel_id")}
    return sorted(out)


def drop_all(brain: Brain) -> None:
    st = store(brain)
    for n in st.names():
        if n.startswith(f"{VAULT}.") or n == SUMMARIES:
            st.drop(n)


def summaries(brain: Brain, *, create: bool = True) -> Any:
    """The summaries collection; with create=False, None until one is written (a read never creates:
    creating takes the writer's lock, whose client refresh races the console's other threads)."""
    return store(brain).collection(SUMMARIES, create=create)


def embed(brain: Brain, texts: list[str], kind: str) -> numpy.ndarray:
    from nika_brain.federation.embedding import open_embedder
    return open_embedder(brain).embed(texts, kind=kind)  # type: ignore[arg-type]


def get_all(col: Any, where: dict | None, include: list[str], *, page: int = 5000) -> dict[str, list]:
    """col.get in pages (Chroma caps a single get), concatenated; empty for a missing collection."""
    out: dict[str, list] = {"ids": []}
    for key in include:
        out[key] = []
    if col is None:
        return out
    offset = 0
    while True:
        res = col.get(where=where, include=include, limit=page, offset=offset)
        ids = res["ids"]
        out["ids"].extend(ids)
        for key in include:
            value = res.get(key)
            out[key].extend(list(value) if value is not None else [None] * len(ids))
        if len(ids) < page:
            return out
        offset += page
