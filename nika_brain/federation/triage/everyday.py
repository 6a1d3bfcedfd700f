"""The everyday background's vectors, shipped with the package (everyday.npz next to everyday.txt).

Every goals index is calibrated against the ~375 everyday requests of everyday.txt (router.py). Embedding
them with the default model costs ~8 s of CPU, which a brain's first `kernel spawn` (and every new
brain, every clone: the content cache lives in the brain's .nika/) paid again. The package ships them
embedded by the default model: used only when the file was made by the very model in use, for the very
texts of everyday.txt and the very embedding kind (a digest of all three); any other model, an edited
everyday.txt or a missing file embeds them as before. The file lives in the installed package, never in
a brain: nothing an agent writes decides a route (issue 24, hole 5).

`python -m nika_brain.federation.triage.everyday` rewrites everyday.npz and vocabulary.npz (the work
domains' vocabulary, vocabulary.py) with the default model (after an edit of everyday.txt or
vocabulary.txt, or a model upgrade; tests/federation/test_triage.py says when either is stale).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from nika_brain.federation.embedding import Embedder

SHIPPED = "everyday.npz"
EMBED_KIND = "query"  # prompts and examples embedded alike: measured best for routing (bench_triage); goals'
_MEMO: dict[str, Any] = {}   # digest -> the shipped vectors (read once per process)


def digest(model_id: str, kind: str, texts: list[str]) -> str:
    return hashlib.sha256(json.dumps([model_id, kind, texts], ensure_ascii=False).encode()).hexdigest()


def shipped(model_id: str, kind: str, texts: list[str], dim: int, name: str = SHIPPED) -> np.ndarray | None:
    """The shipped vectors of `texts` when the package file `name` (everyday.npz, vocabulary.npz) was
    made by this model for these texts."""
    from importlib import resources

    import numpy as np
    want = digest(model_id, kind, texts)
    if want in _MEMO:
        return _MEMO[want]
    try:
        with resources.files("nika_brain.federation.triage").joinpath(name).open("rb") as fh, \
                np.load(fh, allow_pickle=False) as z:
            if str(z["digest"]) != want:
                return None
            vecs = np.array(z["vectors"], dtype=np.float32)
    except (OSError, ValueError, KeyError):
        return None   # no file, or not one of ours: embedded as before
    if vecs.shape != (len(texts), dim):
        return None
    vecs.setflags(write=False)
    _MEMO[want] = vecs
    return vecs


def vectors(embedder: Embedder, kind: str, texts: list[str] | None = None, name: str = SHIPPED) -> np.ndarray:
    """The vectors of `texts` (the background's by default) for this embedder: the shipped ones of
    the package file `name` when they are this model's."""
    from nika_brain.federation.triage import router
    texts = list(router.background()) if texts is None else texts
    found = shipped(embedder.model_id, kind, texts, embedder.dim, name)
    if found is not None:
        return found
    return embedder.embed(texts, kind=kind)  # type: ignore[arg-type]


def write(path: Path, embedder: Embedder, kind: str, texts: list[str] | None = None) -> None:
    import numpy as np

    from nika_brain.federation.triage import router
    texts = list(router.background()) if texts is None else texts
    vecs = np.asarray(embedder.embed(texts, kind=kind), dtype=np.float32)  # type: ignore[arg-type]
    with open(path, "wb") as fh:
        np.savez_compressed(fh, vectors=vecs, digest=np.array(digest(embedder.model_id, kind, texts)),
                            model_id=np.array(embedder.model_id))


def main() -> None:
    from nika_brain.federation.embedding import E5Embedder
    from nika_brain.federation.triage import router, vocabulary
    emb = E5Embedder()
    for name, texts in ((SHIPPED, list(router.background())), (vocabulary.SHIPPED, vocabulary.terms())):
        path = Path(__file__).with_name(name)
        write(path, emb, EMBED_KIND, texts)
        print(f"{path}: {len(texts)} vectors of {emb.model_id}")


if __name__ == "__main__":
    main()
