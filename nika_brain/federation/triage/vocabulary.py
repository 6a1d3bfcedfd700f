"""The work domains' vocabulary (vocabulary.txt, shipped with the package; its vectors in vocabulary.npz).

A kernel is declared in a handful of words: a goal, a few domains, 3-10 canonical prompts. The prompts
users then type speak the domain's jargon, which those words never name ("la perplexité remonte après
le warmup" for a lab kernel whose texts say "benchmarks de modèles"). The package ships, for some
twenty work domains, the words people use for that work, in French and English. At calibration each
kernel takes the vocabulary of the domains its own texts vote for:

- each of the kernel's texts (goal, domains, canonical prompts) votes for the domain of its nearest
  term (cosine, centred on the everyday background), if that term is at least VOTE_SIMILARITY near;
- a domain is the kernel's when at least VOTES of its texts, and at least VOTE_SHARE of them, vote for it.

The vote reads the kernel's own texts and this file alone, never another kernel: a kernel's vocabulary
(and so its calibration) does not move when another kernel comes or goes. The words join the kernel's
texts as its domains do (not as canonical prompts: they neither set its threshold nor its sub-topics),
for the embeddings and the lexical score alike. `federation.triage.vocabulary: false` turns it off;
`nika-brain triage calibrate` shows each kernel's domains.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

SOURCE = "vocabulary.txt"
SHIPPED = "vocabulary.npz"
VOTE_SIMILARITY = 0.39  # a text votes only when a term is this near (cosine, centred); not 0.4: the
                        # terse routes' "sWELU activation" is 0.39989 to its machine-learning term
                        # on one CPU and above 0.4 on another (the engine's floats differ by CPU), and
                        # the lab kernel's domain would depend on the machine
VOTES = 2               # a domain needs at least this many of the kernel's texts ...
VOTE_SHARE = 0.15       # ... and this share of them


@dataclass(frozen=True)
class Domain:
    name: str
    terms: tuple[str, ...]


@lru_cache(maxsize=1)
def domains() -> tuple[Domain, ...]:
    """vocabulary.txt: one domain per "## name" line, then its terms, comma-separated; a term may
    wrap onto the next line ("fonction" / "d'activation" is one term, "fonction d'activation")."""
    raw = resources.files("nika_brain.federation.triage").joinpath(SOURCE).read_text("utf-8")
    out: list[tuple[str, list[str]]] = []
    for line in raw.splitlines():
        if line.startswith("## "):
            out.append((line[3:].strip(), []))
        elif line.strip() and not line.startswith("#") and out:
            out[-1][1].append(line.strip())
    return tuple(Domain(name, tuple(dict.fromkeys(t.strip() for t in " ".join(lines).split(",") if t.strip())))
                 for name, lines in out if lines)


def terms() -> list[str]:
    """Every domain's terms, domain after domain (the rows of vocabulary.npz)."""
    return [t for d in domains() for t in d.terms]


@lru_cache(maxsize=1)
def digest() -> str:
    """The file's bytes, hashed (every goals lookup reads it: no parse)."""
    return hashlib.sha256(resources.files("nika_brain.federation.triage").joinpath(SOURCE).read_bytes()).hexdigest()


def attach(own: np.ndarray, term_vecs: np.ndarray) -> tuple[list[int], list[int]]:
    """(the domains a kernel's texts vote for, the rows of terms() they bring) for `own` (n, d) and
    the vectors of terms() (T, d), both centred and normalised."""
    import numpy as np
    sizes = [len(d.terms) for d in domains()]
    picked = vote(own, term_vecs, np.repeat(np.arange(len(sizes)), sizes), len(sizes))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    return picked, [t for j in picked for t in range(int(starts[j]), int(starts[j + 1]))]


def vote(own: np.ndarray, term_vecs: np.ndarray, term_domain: np.ndarray, n_domains: int) -> list[int]:
    """The domains a kernel's texts vote for: `own` (n, d) and `term_vecs` (T, d) centred and
    normalised, `term_domain` (T,) each term's domain."""
    import numpy as np
    if not len(own) or not len(term_vecs):
        return []
    sims = own @ term_vecs.T                                   # (n, T)
    best = np.full((len(own), n_domains), -1.0, dtype=np.float32)
    for j in range(n_domains):
        cols = term_domain == j
        if cols.any():
            best[:, j] = sims[:, cols].max(axis=1)
    choice, near = best.argmax(axis=1), best.max(axis=1)
    counts = np.bincount(choice[near >= VOTE_SIMILARITY], minlength=n_domains)
    need = max(VOTES, VOTE_SHARE * len(own))
    return [int(j) for j in np.flatnonzero(counts >= need)]
