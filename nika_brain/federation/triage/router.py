"""The routing model: which kernel a prompt belongs to, and whether it belongs to any.

Pure numpy, one scale for every kernel (issue 21):

1. Centering. Every vector has the mean of the *everyday background* removed and is re-normalised
   (everyday.txt, shipped with the package: requests in French and English that belong to no work
   kernel). e5's embeddings share a large common component; removing a fixed mean spreads the scores
   without making them depend on which other kernels exist.
2. A kernel's raw similarity to a prompt: the mean cosine to its TOPK nearest texts (goal line,
   domains, canonical prompts) blended with the cosine to its nearest sub-topic centroid (the
   kernel's texts grouped by k-means, one sub-topic per SUBTOPIC_SIZE texts: a small kernel is one
   centroid, a kernel with 300 examples on fifteen themes is scored by the theme nearest the prompt;
   half and half up to 120 texts, less beyond), plus LEX_WEIGHT x the share of the prompt's word
   stems that occur in the kernel's texts, its shipped vocabulary's words included: a word the
   kernel names decides between two kernels the embedding places close.
3. Calibration against the background: the same raw similarity is computed for every everyday
   request; a kernel's *calibrated score* is (raw - background mean) / background std, the number of
   standard deviations above everyday chatter. Hundreds of background requests make the location and
   scale stable with 3 examples as with 300, and they depend only on the kernel's own texts: a
   kernel spawned or killed elsewhere moves nothing. Background requests within OWN_RADIUS of one
   of the kernel's own texts are left out of that kernel's statistics: a kernel whose examples are
   everyday requests (alarms, weather) must not be measured against its own kind of prompt.
4. One shared threshold THRESHOLD on that scale. A kernel with at least SELF_CALIBRATION examples may
   set its own (between MIN_THRESHOLD and MAX_THRESHOLD) to the `miss_rate` quantile of its examples'
   leave-one-out scores: with that many examples the data supports a threshold of its own (a kernel
   whose domain is everyday life itself, e.g. weather or small talk, sits close to the background;
   one whose examples stand far above it can afford a stricter bar against everyday chatter).
5. The everyday background also competes: a prompt is an everyday request when it is clearly
   nearer to the background than to the own texts of the kernel it scores highest on (the mean
   cosine to that kernel's TOPK nearest texts below the mean cosine to the EVERYDAY_TOPK nearest
   everyday requests minus EVERYDAY_MARGIN; the everyday requests within OWN_RADIUS of the kernel's
   own texts left out, as in 3). A threshold alone measures how unusual a prompt is for chatter; this
   asks which of the two it resembles more ("écris une lettre de motivation" scores above the
   threshold of the client-mail kernel, and is nearer still to the everyday letters). On the four
   development sets of bench/triage_fr/fewshot: everyday requests rejected 87.5 -> 94.3 %, in-scope
   89.3 -> 88.9 %.
6. The routed kernel is the highest calibrated score that passes its threshold: decide.py takes it
   from here (policy, corrections, the everyday rule, splits).
7. Operator corrections (corrections.py): a corrected prompt becomes an example of its kernel, and a
   prompt within CORRECTION_RADIUS (cosine, centred space) of a corrected prompt routes as corrected.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

TOPK = 2               # nearest examples averaged into the neighbour part of the raw similarity
CENTROID_TEXTS = 60.0  # the sub-topic centroids' weight is min(0.5, CENTROID_TEXTS / texts of the kernel)
SUBTOPIC_SIZE = 20     # texts per sub-topic centroid (k-means within one kernel)
OWN_RADIUS = 0.5       # background requests this close (cosine, centred) to a kernel's own text are
                       # left out of that kernel's background statistics
LEX_WEIGHT = 0.2       # weight of the lexical coverage in the raw similarity
THRESHOLD = 2.5        # shared: background standard deviations a prompt must clear
MIN_THRESHOLD = 1.0    # a self-calibrated threshold never goes below this
MAX_THRESHOLD = 3.0    # ... nor above this
SELF_CALIBRATION = 20  # examples a kernel needs before its own data may lower its threshold
MISS_RATE = 0.1        # share of a self-calibrated kernel's examples allowed below its threshold
EVERYDAY_MARGIN = 0.1  # cosine (centred) by which the everyday neighbours may lead a kernel's own ones
EVERYDAY_TOPK = 2      # nearest everyday requests averaged
CORRECTION_RADIUS = 0.9   # cosine (centred) within which a correction decides
MIN_BACKGROUND = 50    # fewer background requests left than this: the kernel keeps them all
STEM = 5               # characters of a word kept as its stem (French and English inflections)

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
STOPWORDS = frozenset("""a an the i my me mine you your yours he she it its we our us they them their this
that these those
to of in on for at by with from about into over under up down out off as is are was were be been
being am do does did doing have has had can could would should will shall may might must what how
when where who whom which why please tell and or but if then so than too very just also there here
any some all no not yes hey hi okay ok le la les l un une des du de d au aux et ou mais donc or ni
car que qu qui quoi dont ou est sont je j tu il elle on nous vous ils elles me m te t se s mon ma
mes ton ta tes son sa ses notre nos votre vos leur leurs ce cet cette ces c en y a dans sur sous
pour par avec sans chez vers pas ne n plus moins tres bien peux peut pouvez veux voudrais merci stp
svp est-ce fais fait faire don doesn didn isn aren wasn weren won wouldn couldn shouldn haven hasn
hadn""".split())
ELISIONS = frozenset("l d j m n s t c qu jusqu lorsqu puisqu quoiqu presqu".split())  # l'état, qu'il


def fold(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in folded if not unicodedata.combining(ch))


def words(text: str) -> list[str]:
    """Lower-case, accent-free content words (stop words dropped). An apostrophe, typed straight or
    curly, ends a French elision ("l'état" is "état") or an English contraction ("client's" is
    "client", "what's" is "what")."""
    out = []
    for w in _WORD.findall(fold(text).replace("\u2019", "'")):
        head, _, tail = w.partition("'")
        w = tail if tail and head in ELISIONS else head
        if w not in STOPWORDS and len(w) > 1:
            out.append(w)
    return out


def stems(text: str) -> set[str]:
    return {w[:STEM] for w in words(text)}


@lru_cache(maxsize=1)
def everyday_stems() -> frozenset[str]:
    """The word stems of the everyday requests: words any request may use, no kernel's own."""
    return frozenset(s for t in background() for s in stems(t))


@lru_cache(maxsize=1)
def background() -> tuple[str, ...]:
    """The everyday requests shipped with the package (everyday.txt)."""
    raw = resources.files("nika_brain.federation.triage").joinpath("everyday.txt").read_text("utf-8")
    return tuple(line.strip() for line in raw.splitlines() if line.strip() and not line.startswith("#"))


@dataclass
class Model:
    """Arrays and small tables; saved as one .npz + one JSON by goals.py."""
    kernels: list[str]
    mean: np.ndarray          # (d,) centering vector: the background's mean
    examples: np.ndarray      # (N, d) centred, normalised
    owner: np.ndarray         # (N,) kernel index of each example
    centroids: np.ndarray     # (K, d) centred, normalised
    subs: np.ndarray          # (C, d) sub-topic centroids, centred, normalised
    sub_owner: np.ndarray     # (C,) kernel index of each sub-topic
    loc: np.ndarray           # (K,) background mean of the raw similarity
    scale: np.ndarray         # (K,) background std of the raw similarity
    thresholds: np.ndarray    # (K,) on the calibrated scale
    vocab: list[frozenset]    # per kernel: its texts' word stems
    corrections: np.ndarray   # (M, d) centred corrected prompts
    corr_owner: np.ndarray    # (M,) kernel index, -1 for "no kernel"
    everyday: np.ndarray      # (B, d) the background, centred, normalised
    everyday_mask: np.ndarray  # (K, B) the background requests each kernel competes with (OWN_RADIUS)
    corr_ids: list[str] = field(default_factory=list)
    miss_rate: float = MISS_RATE
    calibrated: bool = True

    def center(self, vectors: np.ndarray) -> np.ndarray:
        return center(vectors, self.mean)

    def raw(self, centred: np.ndarray, texts: list[str]) -> np.ndarray:
        """(m, K) raw similarity of centred prompts to every kernel."""
        return raw_similarity(centred, texts, self.examples, self.owner, self.subs, self.sub_owner,
                              len(self.kernels), self.vocab)

    def score(self, vectors: np.ndarray, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(calibrated scores (m, K), centred vectors) for raw embeddings."""
        c = self.center(vectors)
        return (self.raw(c, texts) - self.loc) / self.scale, c

    def nearness(self, centred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """((m, K) mean cosine to each kernel's TOPK nearest texts, (m, K) mean cosine to the
        EVERYDAY_TOPK nearest everyday requests that kernel competes with)."""
        import numpy as np
        K = len(self.kernels)
        own = np.full((len(centred), K), -1.0, dtype=np.float32)
        bg = np.full((len(centred), K), -1.0, dtype=np.float32)
        sims = centred @ self.examples.T
        bsims = centred @ self.everyday.T if len(self.everyday) else np.zeros((len(centred), 0), np.float32)
        for k in range(K):
            sub = sims[:, self.owner == k]
            if sub.shape[1]:
                own[:, k] = top_mean(sub, TOPK)
            b = bsims[:, self.everyday_mask[k]] if len(self.everyday_mask) else bsims
            if b.shape[1]:
                bg[:, k] = top_mean(b, EVERYDAY_TOPK)
        return own, bg

    def correction(self, centred_one: np.ndarray) -> tuple[int, float] | None:
        """(index into corrections, similarity) of the nearest correction within the radius."""
        if not len(self.corrections):
            return None
        sims = self.corrections @ centred_one
        j = int(sims.argmax())
        return (j, float(sims[j])) if sims[j] >= CORRECTION_RADIUS else None


def center(vectors: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Vectors less `mean` (the background's), normalised: the space every similarity is taken in."""
    import numpy as np
    x = np.asarray(vectors, dtype=np.float32) - mean
    n = np.linalg.norm(x, axis=1, keepdims=True)
    n[n == 0] = 1.0
    return x / n


def top_mean(sims: np.ndarray, t: int) -> np.ndarray:
    """(m,) mean of each row's t highest values (t at most the row's length)."""
    import numpy as np
    t = min(t, sims.shape[1])
    return (-np.partition(-sims, t - 1, axis=1)[:, :t]).mean(axis=1)


def centroid_weight(n: int) -> float:
    """Share of the centroid in the raw similarity: half for a kernel described in a dozen texts,
    less as examples grow (one centroid cannot summarise fifteen sub-topics; neighbours can)."""
    return min(0.5, CENTROID_TEXTS / max(n, 1))


def raw_similarity(centred, texts, examples, owner, subs, sub_owner, K, vocab) -> np.ndarray:
    import numpy as np
    sims = centred @ examples.T
    out = np.zeros((len(centred), K), dtype=np.float32)
    sub_sims = centred @ subs.T
    q_stems = [stems(t) for t in texts]
    for k in range(K):
        sub = sims[:, owner == k]
        if sub.shape[1] == 0:
            out[:, k] = -1.0
            continue
        near = top_mean(sub, TOPK)
        lex = np.array([len(s & vocab[k]) / len(s) if s else 0.0 for s in q_stems], dtype=np.float32)
        w = centroid_weight(sub.shape[1])
        cent = sub_sims[:, sub_owner == k].max(axis=1)
        out[:, k] = (1 - w) * near + w * cent + LEX_WEIGHT * lex
    return out


def _kmeans(x: np.ndarray, n: int) -> np.ndarray:
    """Spherical k-means, deterministic (farthest-point start from the first text); labels."""
    import numpy as np
    if n <= 1 or len(x) <= n:
        return np.zeros(len(x), dtype=int) if n <= 1 else np.arange(len(x))
    cent = [x[0]]
    for _ in range(n - 1):
        cent.append(x[np.max(x @ np.array(cent).T, axis=1).argmin()])
    c = np.array(cent)
    assign = np.zeros(len(x), dtype=int)
    for it in range(25):
        new = (x @ c.T).argmax(axis=1)
        if it and (new == assign).all():
            break
        assign = new
        for j in range(n):
            if (assign == j).any():
                m = x[assign == j].mean(axis=0)
                c[j] = m / (np.linalg.norm(m) or 1.0)
    _, assign = np.unique(assign, return_inverse=True)
    return assign


def subtopics(x: np.ndarray, owner: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sub-topic centroids (C, d), their kernel (C,), each text's sub-topic (N,)): a kernel's texts
    grouped by k-means, one sub-topic per SUBTOPIC_SIZE texts (a small kernel is one sub-topic)."""
    import numpy as np
    labels = np.full(len(x), -1, dtype=int)   # -1: in no sub-topic (owner -1)
    sub_owner: list[int] = []
    for k in range(K):
        idx = np.where(owner == k)[0]
        if not len(idx):
            continue
        lab = _kmeans(x[idx], max(1, len(idx) // SUBTOPIC_SIZE))
        labels[idx] = lab + len(sub_owner)
        sub_owner.extend([k] * (int(lab.max()) + 1))
    subs = _centroids(x, labels, len(sub_owner)) if sub_owner else np.zeros((0, x.shape[1]), np.float32)
    return subs, np.array(sub_owner, dtype=int), labels


def _centroids(x: np.ndarray, owner: np.ndarray, K: int) -> np.ndarray:
    import numpy as np
    out = np.zeros((K, x.shape[1]), dtype=np.float32)
    for k in range(K):
        if (owner == k).any():
            m = x[owner == k].mean(axis=0)
            out[k] = m / (np.linalg.norm(m) or 1.0)
    return out


def fit(kernels: list[str], vectors: np.ndarray, owner: np.ndarray, texts: list[str],
        calibrate: np.ndarray, background_vectors: np.ndarray, *, miss_rate: float = MISS_RATE,
        corrections: np.ndarray | None = None, corr_owner: list[int] | None = None,
        corr_ids: list[str] | None = None, shipped: np.ndarray | None = None) -> tuple[Model, dict[str, Any]]:
    """Fit from raw embeddings of every kernel text (`calibrate[i]` marks canonical prompts, the
    ones a leave-one-out score is computed for) and of the background. Returns (model, report).
    `shipped[i]` marks a word of the shipped vocabulary (vocabulary.py): a neighbour and a stem like
    the kernel's own texts, but no part of its sub-topics nor of the everyday requests it is excused
    from (OWN_RADIUS), which stay its own texts' alone."""
    import numpy as np
    K = len(kernels)
    vectors = np.asarray(vectors, dtype=np.float32)
    owner = np.asarray(owner, dtype=int)
    bgv = np.asarray(background_vectors, dtype=np.float32)
    d = bgv.shape[1]
    mean = bgv.mean(axis=0).astype(np.float32)
    empty = np.zeros((0, d), np.float32)
    model = Model(list(kernels), mean, empty, owner, np.zeros((K, d), np.float32), empty, np.zeros(0, int),
                  np.zeros(K),
                  np.ones(K), np.full(K, THRESHOLD), [frozenset()] * K, empty, np.zeros(0, int),
                  empty, np.zeros((K, 0), dtype=bool), list(corr_ids or []), miss_rate, True)
    x = model.center(vectors) if len(vectors) else empty
    model.examples = x.astype(np.float32)
    model.centroids = _centroids(x, owner, K)
    own = np.ones(len(owner), dtype=bool) if shipped is None else ~np.asarray(shipped, dtype=bool)
    model.subs, model.sub_owner, labels = subtopics(x, np.where(own, owner, -1), K)
    model.vocab = [frozenset(s for t, o in zip(texts, owner) if o == k for s in stems(t)) for k in range(K)]
    if corrections is not None and len(corrections):
        model.corrections = model.center(corrections)
        model.corr_owner = np.asarray(corr_owner, dtype=int)
    bg_texts = list(background())
    bgc = model.center(bgv)
    bg = model.raw(bgc, bg_texts)
    model.loc, model.scale = np.zeros(K), np.ones(K)
    model.everyday = bgc.astype(np.float32)
    model.everyday_mask = np.ones((K, len(bg)), dtype=bool)
    used = np.zeros(K, dtype=int)
    for k in range(K):
        keep = np.ones(len(bg), dtype=bool)
        if (own & (owner == k)).any():
            keep = (bgc @ x[own & (owner == k)].T).max(axis=1) < OWN_RADIUS
        if keep.sum() >= MIN_BACKGROUND:
            model.everyday_mask[k] = keep
        col = bg[keep, k] if keep.sum() >= MIN_BACKGROUND else bg[:, k]
        used[k] = len(col)
        model.loc[k] = float(col.mean())
        model.scale[k] = max(float(col.std()), 1e-3)

    # leave-one-out calibrated scores of each canonical prompt on its own kernel
    report: dict[str, Any] = {"kernels": {}, "miss_rate": miss_rate, "threshold": THRESHOLD,
                              "background": len(bg_texts), "calibrated": True}
    cal = np.where(np.asarray(calibrate, dtype=bool))[0]
    loo = np.full(len(cal), np.nan)
    text_stems = [stems(t) for t in texts]
    for k in range(K):
        idx = np.where(owner == k)[0]
        mine_cal = [j for j, i in enumerate(cal) if owner[i] == k]
        if len(idx) < 2 or not mine_cal:
            continue
        sub_total = {int(c): x[labels == c].sum(axis=0) for c in set(labels[idx].tolist())}
        sub_ids = np.where(model.sub_owner == k)[0]
        counts: dict[str, int] = {}
        for i in idx:
            for s in text_stems[i]:
                counts[s] = counts.get(s, 0) + 1
        sims = x[cal[mine_cal]] @ x[idx].T
        for row, j in enumerate(mine_cal):
            i = cal[j]
            others = sims[row, idx != i]
            t = min(TOPK, len(others))
            near = float(np.sort(others)[-t:].mean())
            cent = -1.0
            for c in sub_ids:
                v = sub_total[int(c)] - (x[i] if labels[i] == c else 0.0)
                nv = float(np.linalg.norm(v))
                if nv > 0:
                    cent = max(cent, float(x[i] @ v) / nv)
            ws = text_stems[i]
            lex = sum(counts.get(s, 0) > 1 for s in ws) / len(ws) if ws else 0.0
            w = centroid_weight(len(idx) - 1)
            r = (1 - w) * near + w * cent + LEX_WEIGHT * lex
            loo[j] = (r - model.loc[k]) / model.scale[k]
    for k, kid in enumerate(kernels):
        mine = loo[(owner[cal] == k) & np.isfinite(loo)]
        if len(mine) >= SELF_CALIBRATION:
            model.thresholds[k] = max(MIN_THRESHOLD, min(MAX_THRESHOLD, float(np.quantile(mine, miss_rate))))
        report["kernels"][kid] = {
            "examples": int(((owner == k) & np.asarray(calibrate, dtype=bool)).sum()),
            "texts": int((owner == k).sum()),
            "threshold": round(float(model.thresholds[k]), 4),
            "self_calibrated": bool(len(mine) >= SELF_CALIBRATION),
            "background_mean": round(float(model.loc[k]), 4),
            "background_std": round(float(model.scale[k]), 4),
            "background_used": int(used[k]),
            "subtopics": int((model.sub_owner == k).sum()),
            "loo_median": None if not len(mine) else round(float(np.median(mine)), 3),
            "accepted": None if not len(mine) else round(float((mine >= model.thresholds[k]).mean()), 3),
        }
    ok = np.isfinite(loo)
    if ok.any():
        report["loo_accepted"] = round(float((loo[ok] >= model.thresholds[owner[cal][ok]]).mean()), 3)
    return model, report


def offsets(z: np.ndarray, thresholds: np.ndarray, expected: list[int | None]) -> list[tuple[float, float, float]]:
    """(offset, in-scope accuracy, out-of-scope recall) when every threshold moves down by one common
    offset: no move, then each move that changes whether a prompt passes, the smaller moves first.
    The routed kernel is the highest calibrated score that passes; `expected[i]` is the kernel index,
    None for out of scope."""
    import numpy as np
    margin = z - thresholds
    exp = np.array([-1 if e is None else e for e in expected])
    ins, oos = exp >= 0, exp < 0
    out = []
    for off in sorted({0.0} | {float(-v) for v in margin.max(axis=1)}, key=abs):
        passing = np.where(margin + off + (1e-6 if off else 0.0) >= 0, z, -np.inf)
        accept = np.isfinite(passing.max(axis=1))
        acc = float(((passing.argmax(axis=1) == exp) & accept)[ins].mean()) if ins.any() else 0.0
        rec = float((~accept)[oos].mean()) if oos.any() else 0.0
        out.append((off, acc, rec))
    return out


def refine(model: Model, z: np.ndarray, expected: list[int | None]) -> float:
    """Move every threshold by one common offset chosen on a labelled file (in-scope accuracy +
    out-of-scope recall, ties to the smaller move); returns the offset."""
    if not len(expected):
        return 0.0
    best, best_off = -1.0, 0.0
    for off, acc, rec in offsets(z, model.thresholds, expected):
        if acc + rec > best + 1e-12:
            best, best_off = acc + rec, off
    model.thresholds = model.thresholds - best_off
    return -best_off
