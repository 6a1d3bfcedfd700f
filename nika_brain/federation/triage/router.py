"""The routing model: which kernel a prompt belongs to, and whether it belongs to any.

Pure numpy, fitted from the kernels' canonical prompts alone (no out-of-scope data):

1. Centering. Every vector has the mean of all canonical vectors removed and is re-normalised: e5's
   embeddings share a large common component that squeezes all cosines into 0.7-0.95; without it
   the scores spread out and separate better.
2. Which kernel: sub-topic centroids. Each kernel's examples are grouped by spherical k-means (one
   sub-topic per ~20 examples); the prompt goes to the kernel owning the nearest sub-topic centroid
   under a Mahalanobis distance with one shared, shrunk covariance (a linear discriminant: it weighs
   the directions that tell sub-topics apart). At runtime that is one (n_subtopics x dim) product.
3. Whether it belongs: a confidence per kernel = mean cosine of the prompt to its 3 nearest examples
   of that kernel + w x lexical coverage (the IDF-weighted share of the prompt's words that occur in
   the kernel's examples: out-of-scope prompts bring words no kernel uses). The weight w is learned by
   a small logistic regression on pseudo-labels built from the canonical prompts themselves: each
   example against its own kernel with itself left out (in scope), and against the best other kernel
   as if its own kernel did not exist (out of scope).
4. Thresholds, per kernel: the kernel's median leave-one-out confidence, shifted by the pooled
   `miss_rate` quantile of (confidence - own median) over all kernels. Per-kernel location, pooled tail:
   a 3 % quantile of 20 examples alone would be noise. `miss_rate` is the share of in-scope prompts
   one accepts to send to the generalist; it is a product setting, not a fitted constant. A threshold
   is then raised, if needed, to the 90th percentile of the other kernels' canonical prompts scored
   on this kernel: with few, far-apart examples, leave-one-out underestimates how close a real
   request comes to its kernel, and the other kernels' requests are the out-of-scope data we have.
"""
from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

TOPK = 3               # nearest examples averaged into a kernel's confidence
SUBTOPIC_SIZE = 20     # examples per sub-topic centroid
SHRINK = 0.8           # covariance shrinkage toward a multiple of the identity
MISS_RATE = 0.03       # share of in-scope prompts allowed below threshold (calibration target)
NEG_QUANTILE = 0.9     # a threshold stays above this quantile of other kernels' prompts on it
DEFAULT_LEX_WEIGHT = 0.1   # when there are no pseudo-negatives to learn it from (one kernel)
UNCALIBRATED = 0.5     # confidence threshold when no kernel has two examples to calibrate on

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
svp est-ce""".split())


def words(text: str) -> list[str]:
    """Lower-case, accent-free content words (stop words dropped)."""
    folded = unicodedata.normalize("NFKD", text.lower())
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return [w for w in _WORD.findall(folded) if w not in STOPWORDS and len(w) > 1]


@dataclass
class Model:
    """Arrays and small tables; saved as one .npz + one JSON by goals.py."""
    kernels: list[str]
    mean: np.ndarray          # (d,) centering vector
    examples: np.ndarray      # (N, d) centred, normalised
    owner: np.ndarray         # (N,) kernel index of each example
    pmu: np.ndarray           # (C, d) sub-topic centroids times the precision matrix
    pconst: np.ndarray        # (C,) mu P mu of each centroid
    sub_owner: np.ndarray     # (C,) kernel index of each sub-topic
    thresholds: np.ndarray    # (K,)
    medians: np.ndarray       # (K,) median leave-one-out confidence (nan: no examples)
    vocab: list[frozenset]    # per kernel: its examples' words
    idf: dict[str, float]
    unknown_idf: float
    lex_weight: float
    miss_rate: float
    calibrated: bool

    # -- scoring -----------------------------------------------------------------------------

    def center(self, vectors: np.ndarray) -> np.ndarray:
        import numpy as np
        x = np.asarray(vectors, dtype=np.float32) - self.mean
        n = np.linalg.norm(x, axis=1, keepdims=True)
        n[n == 0] = 1.0
        return x / n

    def coverage(self, text: str, k: int) -> float:
        ws = set(words(text))
        if not ws:
            return 0.0
        total = sum(self.idf.get(w, self.unknown_idf) for w in ws)
        got = sum(self.idf.get(w, self.unknown_idf) for w in ws if w in self.vocab[k])
        return got / total

    def knn(self, centred: np.ndarray) -> np.ndarray:
        """(m, K) mean cosine to each kernel's TOPK nearest examples."""
        import numpy as np
        sims = centred @ self.examples.T
        out = np.full((len(centred), len(self.kernels)), -1.0, dtype=np.float32)
        for k in range(len(self.kernels)):
            sub = sims[:, self.owner == k]
            if sub.shape[1] == 0:
                continue
            t = min(TOPK, sub.shape[1])
            out[:, k] = (-np.partition(-sub, t - 1, axis=1)[:, :t]).mean(axis=1)
        return out

    def rank(self, centred: np.ndarray) -> np.ndarray:
        """(m, K) kernel indices, nearest sub-topic first (each kernel once)."""
        import numpy as np
        dist = self.pconst[None, :] - 2.0 * centred @ self.pmu.T   # + q P q, the same for all
        best = np.full((len(centred), len(self.kernels)), np.inf, dtype=np.float64)
        for k in range(len(self.kernels)):
            cols = self.sub_owner == k
            if cols.any():
                best[:, k] = dist[:, cols].min(axis=1)
        return np.argsort(best, axis=1, kind="stable")

    def score(self, vectors: np.ndarray, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(order (m, K) nearest kernels first, confidence (m, K)) for raw embeddings."""
        c = self.center(vectors)
        conf = self.knn(c)
        for i, t in enumerate(texts):
            for k in range(len(self.kernels)):
                conf[i, k] += self.lex_weight * self.coverage(t, k)
        return self.rank(c), conf


# ---- fitting --------------------------------------------------------------------------------------

def _kmeans(x: np.ndarray, n: int) -> np.ndarray:
    """Spherical k-means, deterministic (farthest-point start from the first example)."""
    import numpy as np
    if n <= 1 or len(x) <= n:
        return np.zeros(len(x), dtype=int) if n <= 1 else np.arange(len(x))
    cent = [x[0]]
    for _ in range(n - 1):
        cent.append(x[np.max(x @ np.array(cent).T, axis=1).argmin()])
    c = np.array(cent)
    assign = np.zeros(len(x), dtype=int)
    for _ in range(25):
        new = (x @ c.T).argmax(axis=1)
        if _ and (new == assign).all():
            break
        assign = new
        for j in range(n):
            if (assign == j).any():
                m = x[assign == j].mean(axis=0)
                c[j] = m / (np.linalg.norm(m) or 1.0)
    _, assign = np.unique(assign, return_inverse=True)
    return assign


def _logistic_ratio(pos: np.ndarray, neg: np.ndarray) -> float:
    """Weight of feature 2 relative to feature 1 (raw units) separating pos from neg."""
    import numpy as np
    x = np.vstack([pos, neg]).astype(np.float64)
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    sw = np.r_[np.full(len(pos), 0.5 / len(pos)), np.full(len(neg), 0.5 / len(neg))]
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-9
    xn = (x - mu) / sd
    w, b = np.zeros(2), 0.0
    for _ in range(400):
        p = 1.0 / (1.0 + np.exp(-(xn @ w + b)))
        g = (p - y) * sw
        w -= 2.0 * (xn.T @ g)
        b -= 2.0 * g.sum()
    if w[0] <= 0:
        return DEFAULT_LEX_WEIGHT
    return float(min(max((w[1] / sd[1]) / (w[0] / sd[0]), 0.0), 0.5))


def fit(kernels: list[str], vectors: np.ndarray, owner: np.ndarray, texts: list[str],
        calibrate: np.ndarray, *, miss_rate: float = MISS_RATE) -> tuple[Model, dict[str, Any]]:
    """Fit from raw embeddings of every kernel text; `calibrate[i]` marks canonical examples
    (goal lines are indexed but not used as leave-one-out positives). Returns (model, report)."""
    import numpy as np
    K = len(kernels)
    vectors = np.asarray(vectors, dtype=np.float32)
    owner = np.asarray(owner, dtype=int)
    mean = vectors.mean(axis=0) if len(vectors) else np.zeros(vectors.shape[1], np.float32)
    model = Model(kernels, mean.astype(np.float32), np.zeros((0, vectors.shape[1]), np.float32),
                  owner, np.zeros((0, vectors.shape[1]), np.float32), np.zeros(0), np.zeros(0, int),
                  np.zeros(K), np.full(K, np.nan), [frozenset()] * K, {}, 1.0, DEFAULT_LEX_WEIGHT,
                  miss_rate, False)
    x = model.center(vectors) if len(vectors) else vectors
    model.examples = x.astype(np.float32)

    # sub-topics and the shared covariance
    labels = np.zeros(len(x), dtype=int)
    sub_owner: list[int] = []
    for k in range(K):
        idx = np.where(owner == k)[0]
        if len(idx) == 0:
            continue
        lab = _kmeans(x[idx], max(1, len(idx) // SUBTOPIC_SIZE))
        labels[idx] = lab + len(sub_owner)
        sub_owner.extend([k] * (lab.max() + 1))
    mu = np.stack([x[labels == c].mean(axis=0) for c in range(len(sub_owner))]) if sub_owner \
        else np.zeros((0, x.shape[1]))
    d = x.shape[1]
    if len(x) > len(sub_owner):
        resid = x - mu[labels]
        cov = resid.T @ resid / len(x)
        cov = (1 - SHRINK) * cov + SHRINK * (np.trace(cov) / d) * np.eye(d)
        prec = np.linalg.inv(cov)
    else:
        prec = np.eye(d)
    model.pmu = (mu @ prec).astype(np.float32)
    model.pconst = np.einsum("ij,ij->i", model.pmu, mu).astype(np.float64)
    model.sub_owner = np.array(sub_owner, dtype=int)

    # lexical tables
    tok = [set(words(t)) for t in texts]
    df: dict[str, int] = {}
    for ws in tok:
        for w in ws:
            df[w] = df.get(w, 0) + 1
    n = max(len(texts), 1)
    model.idf = {w: math.log((n + 1) / (c + 1)) + 1.0 for w, c in df.items()}
    model.unknown_idf = math.log(n + 1) + 1.0
    counts: list[dict[str, int]] = [{} for _ in range(K)]
    for ws, k in zip(tok, owner):
        for w in ws:
            counts[k][w] = counts[k].get(w, 0) + 1
    model.vocab = [frozenset(c) for c in counts]

    # leave-one-out confidences of the canonical examples
    report: dict[str, Any] = {"kernels": {}, "miss_rate": miss_rate}
    cal = np.where(np.asarray(calibrate, dtype=bool))[0]
    if len(cal) == 0 or len(x) < 2:
        model.thresholds = np.full(K, UNCALIBRATED)
        report["calibrated"] = False
        return model, report
    sims = x[cal] @ x.T
    sims[np.arange(len(cal)), cal] = -np.inf   # leave the example itself out
    knn = np.full((len(cal), K), -1.0)
    for k in range(K):
        sub = sims[:, owner == k]
        if sub.shape[1] == 0:
            continue
        t = min(TOPK, sub.shape[1])
        top = -np.partition(-sub, t - 1, axis=1)[:, :t]
        top = np.where(np.isfinite(top), top, np.nan)
        knn[:, k] = np.nan_to_num(np.nanmean(top, axis=1), nan=-1.0) if top.size else -1.0

    def loo_cov(i: int, k: int) -> float:
        ws = tok[i]
        if not ws:
            return 0.0
        total = sum(model.idf.get(w, model.unknown_idf) for w in ws)
        got = sum(model.idf[w] for w in ws
                  if counts[k].get(w, 0) - (1 if owner[i] == k else 0) > 0)
        return got / total

    own = owner[cal]
    pos = np.array([[knn[j, own[j]], loo_cov(i, own[j])] for j, i in enumerate(cal)])
    other = knn.copy()
    other[np.arange(len(cal)), own] = -np.inf
    neg_k = other.argmax(axis=1)
    has_neg = np.isfinite(other.max(axis=1)) & (other.max(axis=1) > -1.0)
    if K > 1 and has_neg.sum() >= 2:
        neg = np.array([[knn[j, neg_k[j]], loo_cov(i, neg_k[j])]
                        for j, i in enumerate(cal) if has_neg[j]])
        model.lex_weight = _logistic_ratio(pos, neg)
    conf = pos[:, 0] + model.lex_weight * pos[:, 1]
    # a kernel with a single example has no leave-one-out neighbour of its own: its score is -1
    usable = pos[:, 0] > -1.0
    if not usable.any():
        model.thresholds = np.full(K, UNCALIBRATED)
        report["calibrated"] = False
        return model, report
    for k in range(K):
        mine = conf[(own == k) & usable]
        if len(mine):
            model.medians[k] = float(np.median(mine))
    shift = float(np.quantile(conf[usable] - model.medians[own[usable]], miss_rate))
    pooled = float(np.quantile(conf[usable], miss_rate))
    model.thresholds = np.where(np.isnan(model.medians), pooled, model.medians + shift)
    # ... and never below what other kernels' requests score on this kernel: at most NEG_QUANTILE of
    # them would pass if their own kernel vanished (matters when examples are few and far apart,
    # where leave-one-out underestimates how close a real request comes to its kernel's examples)
    for k in range(K):
        others = np.where((own != k) & usable)[0]
        if len(others) >= 2:
            negc = [knn[j, k] + model.lex_weight * loo_cov(cal[j], k) for j in others]
            model.thresholds[k] = max(model.thresholds[k], float(np.quantile(negc, NEG_QUANTILE)))
    model.calibrated = True
    loo_acc = float((knn[usable].argmax(axis=1) == own[usable]).mean())
    report.update(calibrated=True, lex_weight=model.lex_weight, shift=shift,
                  loo_accuracy=loo_acc, examples=len(cal))
    for k, kid in enumerate(kernels):
        mine = conf[(own == k) & usable]
        report["kernels"][kid] = {
            "examples": int(((own == k) & usable).sum()),
            "subtopics": int((model.sub_owner == k).sum()),
            "median": None if np.isnan(model.medians[k]) else round(float(model.medians[k]), 4),
            "threshold": round(float(model.thresholds[k]), 4),
            "accepted": None if not len(mine) else round(float((mine >= model.thresholds[k]).mean()), 3),
        }
    return model, report


def refine(model: Model, order: np.ndarray, conf: np.ndarray, expected: list[int | None]) -> float:
    """Move every threshold by one common offset chosen on a labelled file (in-scope accuracy +
    out-of-scope recall, ties to the smaller move); returns the offset."""
    import numpy as np
    top = order[:, 0]
    best_c = conf[np.arange(len(top)), top]
    margin = best_c - model.thresholds[top]
    exp = np.array([-1 if e is None else e for e in expected])
    ins, oos = exp >= 0, exp < 0
    if not ins.any() and not oos.any():
        return 0.0
    candidates = np.unique(np.r_[0.0, -margin, -margin + 1e-6])
    best, best_off = -1.0, 0.0
    for off in sorted(candidates, key=abs):
        accept = margin + off >= 0
        acc = ((top == exp) & accept)[ins].mean() if ins.any() else 0.0
        rec = (~accept)[oos].mean() if oos.any() else 0.0
        val = acc + rec
        if val > best + 1e-12:
            best, best_off = val, float(off)
    model.thresholds = model.thresholds - best_off
    return -best_off
