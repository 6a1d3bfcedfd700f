"""`nika-brain triage bench`: the benchmark contract other tools call (keep it stable).

ROUTES.yml:   {default: <kernel_id>, kernels: [{id, goal, domains: [...], examples: [...],
               region?, data_class?}]}
QUERIES.jsonl: one {"text": ..., "expected": <kernel_id> | null | [<kernel_id>, ...]} a line;
               null (or the default's id) is out of scope, a list of two or more is a hybrid prompt.
CAL.jsonl:    optional, the same shape (hybrids ignored): labelled prompts refining the thresholds.

A throw-away federation is built in a temporary folder from ROUTES.yml alone (thresholds calibrated
from the examples, refined by CAL.jsonl when given), every query is routed, and one JSON object is
returned: in_scope_accuracy, oos_recall, oos_precision, split_accuracy, p50_ms, p95_ms, n,
predictions (plus model_id, the default kernel and the calibrated thresholds, for people reading it).
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from nika_brain.errors import Invalid
from nika_brain.federation.triage.queries import read_queries


def _str_list(doc, value, *path) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise doc.error("expected a list of non-empty strings", *path)
    return tuple(value)


def read_routes(path: Path):
    """(default id, [goals.Entry]) from ROUTES.yml; one clear error naming file, line and key."""
    from nika_brain.federation.triage.goals import Entry
    from nika_brain.support.schema import name
    from nika_brain.support.yamlsafe import load_doc
    if not Path(path).is_file():
        raise Invalid(f"{path}: no such routes file")
    doc = load_doc(path)
    data = doc.data
    if not isinstance(data, dict):
        raise doc.error("expected a mapping {default: <kernel id>, kernels: [...]}")
    for key in data:
        if key not in ("default", "kernels"):
            raise doc.error("unknown key (expected default, kernels)", key)
    default = data.get("default")
    if not isinstance(default, str) or name(default) is not None:
        raise doc.error("missing or invalid default kernel id", "default")
    kernels = data.get("kernels")
    if not isinstance(kernels, list) or not kernels:
        raise doc.error("expected a non-empty list of kernels", "kernels")
    entries, seen = [], set()
    allowed = ("id", "goal", "domains", "examples", "region", "data_class")
    for i, k in enumerate(kernels):
        if not isinstance(k, dict):
            raise doc.error("expected a mapping {id, goal, domains, examples}", "kernels", i)
        for key in k:
            if key not in allowed:
                raise doc.error(f"unknown key (expected one of: {', '.join(allowed)})", "kernels", i, key)
        kid = k.get("id")
        if not isinstance(kid, str) or name(kid) is not None:
            raise doc.error("missing or invalid kernel id", "kernels", i, "id")
        if kid in seen:
            raise doc.error(f"duplicate kernel id {kid!r}", "kernels", i, "id")
        seen.add(kid)
        goal = k.get("goal")
        if not isinstance(goal, str) or not goal.strip():
            raise doc.error("missing goal", "kernels", i, "goal")
        for key in ("region", "data_class"):
            if k.get(key) is not None and not isinstance(k[key], str):
                raise doc.error("expected a string", "kernels", i, key)
        entries.append(Entry(kid, goal.strip(), _str_list(doc, k.get("domains"), "kernels", i, "domains"),
                             _str_list(doc, k.get("examples"), "kernels", i, "examples"),
                             k.get("region"), k.get("data_class")))
    return default, entries


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, round(q * (len(s) - 1)))], 3)


PEERS = ("kNN (max cosine)", "top-5 mean", "centroid")


def peer_scores(index, embedder, texts: list[str]) -> dict[str, Any]:
    """Calibrated scores of the peer methods: the same centring, the same background, the same
    shared threshold as the triage; only the raw similarity differs (max cosine to a kernel's
    examples, mean of its 5 nearest, cosine to its centroid). Returns {name: (z (m, K), thresholds)}."""
    import numpy as np

    from nika_brain.federation.triage import everyday, router
    from nika_brain.federation.triage.goals import EMBED_KIND
    m = index.model
    bgv = everyday.vectors(embedder, EMBED_KIND)
    vecs = embedder.embed(list(texts), kind=EMBED_KIND) if texts else np.zeros((0, embedder.dim), np.float32)
    c = m.center(np.vstack([vecs, bgv]))
    sims = c @ m.examples.T
    K = len(m.kernels)
    out: dict[str, Any] = {}
    for name in PEERS:
        raw = np.full((len(c), K), -1.0)
        for k in range(K):
            sub = sims[:, m.owner == k]
            if sub.shape[1] == 0:
                continue
            if name.startswith("kNN"):
                raw[:, k] = sub.max(axis=1)
            elif name == "top-5 mean":
                raw[:, k] = router.top_mean(sub, 5)
            else:
                raw[:, k] = c @ m.centroids[k]
        q, b = raw[:len(texts)], raw[len(texts):]
        z = (q - b.mean(axis=0)) / np.maximum(b.std(axis=0), 1e-3)
        out[name] = (z, np.full(K, router.THRESHOLD))
    return out


def peer_figures(index, embedder, texts: list[str], expected: list[str | None]) -> dict[str, dict[str, Any]]:
    """In-scope accuracy and out-of-scope recall of each peer (expected None: out of scope)."""
    import numpy as np
    kernels = index.model.kernels
    res = {}
    for name, (z, th) in peer_scores(index, embedder, texts).items():
        passing = np.where(z >= th, z, -np.inf)
        for k, kid in enumerate(kernels):
            if kid == index.default:
                passing[:, k] = -np.inf
        top = passing.argmax(axis=1)
        ok = np.isfinite(passing.max(axis=1))
        pred = [kernels[t] if o else None for t, o in zip(top, ok)]
        ins = [p == e for p, e in zip(pred, expected) if e is not None]
        oos = [p is None for p, e in zip(pred, expected) if e is None]
        res[name] = {"in_scope_accuracy": round(sum(ins) / len(ins), 4) if ins else None,
                     "oos_recall": round(sum(oos) / len(oos), 4) if oos else None}
    return res


def run(routes: Path, queries: Path, calibration: Path | None = None, *,
        embedder=None, miss_rate: float | None = None, vocabulary: bool = True) -> dict[str, Any]:
    from nika_brain.federation.embedding import open_embedder
    from nika_brain.federation.triage import goals
    from nika_brain.federation.triage.decide import Triage
    default, entries = read_routes(routes)
    known = {e.id for e in entries} | {default}
    qs = read_queries(queries, known)
    labelled = None
    if calibration is not None:
        labelled = [(q.text, None if q.expected is None or q.expected == (default,) else q.expected[0])
                    for q in read_queries(calibration, known)
                    if q.expected is None or len(q.expected) == 1]
    emb = embedder or open_embedder(None)
    st = goals.Settings(default=default, miss_rate=goals.MISS_RATE if miss_rate is None else miss_rate,
                        vocabulary=vocabulary)
    with tempfile.TemporaryDirectory(prefix="nika-triage-bench-") as tmp:
        index = goals.build(entries, emb, st, labelled=labelled, digest_="bench")
        goals.save(index, Path(tmp) / goals.INDEX_NAME)        # the throw-away federation
        loaded = goals.load(Path(tmp) / goals.INDEX_NAME)
        assert loaded is not None
        index = loaded
        tri = Triage(index, getattr(emb, "inner", emb), st)  # prompts are embedded, never cached
        tri.decide(qs[0].text if qs else "warm up")            # warm: model and caches loaded
        preds, times = [], []
        for q in qs:
            t0 = time.perf_counter()
            d = tri.decide(q.text)
            times.append((time.perf_counter() - t0) * 1000)
            preds.append((q, d))
    ins = [(q, d) for q, d in preds if q.expected and len(q.expected) == 1 and q.expected[0] != default]
    oos = [(q, d) for q, d in preds if q.expected is None or q.expected == (default,)]
    hyb = [(q, d) for q, d in preds if q.expected and len(q.expected) > 1]
    to_default = [(q, d) for q, d in preds if d.decision in ("fallback", "refused")]

    single = [(q.text, None if q.expected is None or q.expected == (default,) else q.expected[0])
              for q in qs if q.expected is None or len(q.expected) == 1]
    peers = peer_figures(index, emb, [t for t, _ in single], [e for _, e in single]) if single else {}

    def ratio(good: int, total: int) -> float | None:
        return round(good / total, 4) if total else None
    return {
        "in_scope_accuracy": ratio(sum(d.decision == "kernel" and d.kernels == q.expected for q, d in ins), len(ins)),
        "oos_recall": ratio(sum(d.decision in ("fallback", "refused") for _, d in oos), len(oos)),
        "oos_precision": ratio(sum(q.expected is None or q.expected == (default,) for q, _ in to_default),
                               len(to_default)),
        "split_accuracy": ratio(sum(d.decision == "split" and set(d.kernels) == set(q.expected or ())
                                    for q, d in hyb), len(hyb)),
        "p50_ms": _pct(times, 0.5), "p95_ms": _pct(times, 0.95), "n": len(qs), "peers": peers,
        "model_id": emb.model_id, "default": default,
        "thresholds": {k: round(float(t), 4) for k, t in zip(index.model.kernels, index.model.thresholds)},
        "predictions": [{
            "text": q.text, "line": q.line,
            "expected": None if q.expected is None else (q.expected[0] if len(q.expected) == 1 else list(q.expected)),
            "routed": list(d.kernels), "decision": d.decision, "reason": d.reason,
            "scores": {s.kernel: round(s.score, 4) for s in d.scores},
        } for q, d in preds],
    }
