"""`nika-brain triage bench`: the benchmark contract other tools call (keep it stable).

ROUTES.yml:   {default: <kernel_id>, kernels: [{id, goal, domains: [...], examples: [...],
               region?, data_class?}]}
QUERIES.jsonl: one {"text": ..., "expected": <kernel_id> | null | [<kernel_id>, ...]} a line;
               null (or the default's id) is out of scope, a list of two or more is a hybrid prompt.
CAL.jsonl:    optional, the same shape (hybrids ignored): labelled prompts refining the thresholds.

A throw-away federation is built in a temporary folder from ROUTES.yml alone (thresholds calibrated
from the examples, refined by CAL.jsonl when given), every query is routed, and one JSON object is
returned: in_scope_accuracy, oos_recall, oos_precision, split_accuracy, p50_ms, p95_ms, n,
predictions (plus model_id and the calibrated thresholds, for people reading it).
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


def run(routes: Path, queries: Path, calibration: Path | None = None, *,
        embedder=None, miss_rate: float | None = None) -> dict[str, Any]:
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
    st = goals.Settings(default=default, miss_rate=goals.MISS_RATE if miss_rate is None else miss_rate)
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
    to_default = [(q, d) for q, d in preds if d.decision == "fallback"]

    def ratio(good: int, total: int) -> float | None:
        return round(good / total, 4) if total else None
    return {
        "in_scope_accuracy": ratio(sum(d.decision == "kernel" and d.kernels == q.expected for q, d in ins), len(ins)),
        "oos_recall": ratio(sum(d.decision == "fallback" for _, d in oos), len(oos)),
        "oos_precision": ratio(sum(q.expected is None or q.expected == (default,) for q, _ in to_default),
                               len(to_default)),
        "split_accuracy": ratio(sum(d.decision == "split" and set(d.kernels) == set(q.expected or ())
                                    for q, d in hyb), len(hyb)),
        "p50_ms": _pct(times, 0.5), "p95_ms": _pct(times, 0.95), "n": len(qs),
        "model_id": emb.model_id,
        "thresholds": {k: round(float(t), 4) for k, t in zip(index.model.kernels, index.model.thresholds)},
        "predictions": [{
            "text": q.text, "line": q.line,
            "expected": None if q.expected is None else (q.expected[0] if len(q.expected) == 1 else list(q.expected)),
            "routed": list(d.kernels), "decision": d.decision, "reason": d.reason,
            "scores": {s.kernel: round(s.score, 4) for s in d.scores},
        } for q, d in preds],
    }
