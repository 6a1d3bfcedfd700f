"""The vault's collections and embedder, opened once per process for a brain."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nika_brain.federation import chroma
from nika_brain.federation.vault.records import SUMMARIES, VAULT

if TYPE_CHECKING:  # pragma: no cover
    import numpy

    from nika_brain.brain import Brain


def store(brain: Brain) -> chroma.VectorStore:
    return chroma.open_store(brain)


def vault(brain: Brain) -> Any:
    return store(brain).collection(VAULT)


def summaries(brain: Brain) -> Any:
    return store(brain).collection(SUMMARIES)


def embed(brain: Brain, texts: list[str], kind: str) -> numpy.ndarray:
    from nika_brain.federation.embedding import open_embedder
    return open_embedder(brain).embed(texts, kind=kind)  # type: ignore[arg-type]


def get_all(col: Any, where: dict, include: list[str], *, page: int = 5000) -> dict[str, list]:
    """col.get in pages (Chroma caps a single get), concatenated."""
    out: dict[str, list] = {"ids": []}
    for key in include:
        out[key] = []
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
