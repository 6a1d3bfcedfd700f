"""The seed's four spawn triggers. Each measures, and past its threshold writes a spawn proposal
(proposals.py) that waits for a human; none spawns anything.

- saturation: mean context use of the kernel's sessions over the last 24 h above 70 %. Samples are
  appended by the Stop/PreCompact hook (handover.on_checkpoint) to
  `.nika/federation/<kernel>/context.jsonl`; at least `min_samples` are needed. Signature: the mean
  in 5-point steps.
- diversity: more than 5 disjoint topic clusters among the kernel's vault records. Records are
  centred on a reference (the mean embedding of everyday sentences, REFERENCE) and grouped by
  average linkage while the groups' mean cosine is at least `link` (0.3); groups holding at least
  `min_share` (5 %) of the records count as clusters (smaller ones are noise, not a topic). Above 64
  records the grouping runs over k-means centroids (k = 64, seeded: the same records give the same
  answer) weighted by their members. An approximate measure (e5-small separates short texts of
  neighbouring subjects poorly); thresholds are configurable. Signature: the cluster count.
- doctrine: two active doctrines of the kernel assert different values for one invariant. A
  doctrine is `doctrines/<id>.yml`: {id, title, status: active|inactive, kernels: [ids] or ["*"],
  invariants: {name: value}}; the kernel's own `doctrine:` field may name one. Signature: the
  conflicting pairs and the doctrines' contents.
- explicit: `/kernel new <goal>` typed in a session (UserPromptSubmit; the prompt is erased and the
  proposal's id shown) or `nika-brain kernel propose <goal>`. Signature: the goal.

Thresholds: `federation.triggers` in nika-brain.yml: saturation_pct (70), saturation_min_samples (3),
diversity_clusters (5), diversity_link (0.3), diversity_min_share (0.05).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from nika_brain.brain import Brain
from nika_brain.errors import BrainError, MissingExtra

DEFAULTS = {
    "saturation_pct": 70.0,
    "saturation_min_samples": 3,
    "diversity_clusters": 5,
    "diversity_link": 0.3,
    "diversity_min_share": 0.05,
}
# Everyday sentences on unrelated subjects, French and English: their mean embedding is what "no
# topic in particular" looks like to the model. Records are centred on it before clustering, because
# e5's raw similarities all sit near 0.8 whatever the subject (and centring on the records' own mean
# would make one topic look like several).
REFERENCE = (
    "the weather will be sunny tomorrow afternoon",
    "il pleut souvent en Bretagne en automne",
    "the train to Paris leaves at eight",
    "le conseil municipal vote le budget",
    "a new smartphone was released today",
    "les élèves passent le baccalauréat en juin",
    "the hospital opened a new emergency ward",
    "la banque a relevé ses taux",
    "the museum shows paintings of the renaissance",
    "le chat dort sur le canapé",
    "stock markets fell sharply on monday",
    "la recette demande trois oeufs",
    "the river flooded the village",
    "le logiciel plante au démarrage",
    "elections will be held next spring",
    "le match de rugby est reporté",
    "the company hired fifty engineers",
    "la voiture électrique consomme peu",
    "a concert of classical music in the cathedral",
    "le médecin prescrit des antibiotiques",
    "the library lends books for three weeks",
    "les vacances commencent samedi",
    "an earthquake struck the coast",
    "le restaurant ferme le lundi",
    "the satellite was launched into orbit",
    "la facture d'électricité augmente",
    "children play in the park",
    "le contrat de travail est signé",
    "a bug in the payment system",
    "les abeilles disparaissent",
)
DAY = 86400.0
SAMPLES_MAX = 256 * 1024  # bytes of context samples before the file is cut to the last 24 h
CENTROIDS = 64


def settings(brain: Brain) -> dict:
    raw = (brain.config.federation or {}).get("triggers") or {}
    if not isinstance(raw, dict):
        raise BrainError("nika-brain.yml: federation.triggers must be a mapping")
    out = dict(DEFAULTS)
    for key, value in raw.items():
        if key not in DEFAULTS:
            raise BrainError(
                f"nika-brain.yml: federation.triggers.{key} is not a setting (known: {', '.join(DEFAULTS)})"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise BrainError(f"nika-brain.yml: federation.triggers.{key} must be a positive number")
        out[key] = value
    return out


# ---- saturation -------------------------------------------------------------------------------


def _samples_path(brain: Brain, kernel_id: str) -> Path:
    return brain.state_dir / "federation" / kernel_id / "context.jsonl"


def record_context(brain: Brain, kernel_id: str, session_id: str, pct: float, t: float | None = None) -> None:
    path = _samples_path(brain, kernel_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"t": t if t is not None else time.time(), "pct": pct, "session": session_id})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
        big = os.fstat(fd).st_size > SAMPLES_MAX
    finally:
        os.close(fd)
    if big:  # keep the file to what the 24 h mean needs
        with brain.mutex(f"context-samples-{kernel_id}"):
            now = time.time()
            keep = []
            with open(path, "rb") as fh:
                for raw in fh:
                    try:
                        if now - float(json.loads(raw).get("t", 0)) <= DAY:
                            keep.append(raw if raw.endswith(b"\n") else raw + b"\n")
                    except (ValueError, AttributeError):
                        continue
            brain.write(path, b"".join(keep).decode())


def saturation(brain: Brain, kernel_id: str, now: float | None = None) -> dict:
    """{mean, samples} of the last 24 h (mean None without samples)."""
    now = now if now is not None else time.time()
    vals = []
    try:
        with open(_samples_path(brain, kernel_id), "rb") as fh:
            for raw in fh:
                try:
                    s = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(s, dict) and now - float(s.get("t", 0)) <= DAY:
                    vals.append(float(s.get("pct", 0)))
    except OSError:
        pass
    return {"mean": round(sum(vals) / len(vals), 1) if vals else None, "samples": len(vals)}


def check_saturation(brain: Brain, kernel_id: str, now: float | None = None) -> dict | None:
    from nika_brain.federation.spawning import proposals

    cfg = settings(brain)
    m = saturation(brain, kernel_id, now)
    if (
        m["mean"] is None
        or m["samples"] < cfg["saturation_min_samples"]
        or m["mean"] <= cfg["saturation_pct"]
    ):
        return None
    k = _kernel(brain, kernel_id)
    return proposals.propose(
        brain,
        "saturation",
        kernel=kernel_id,
        goal=k.goal,
        scope=k.scope,
        why=f"mean context use of {kernel_id} over 24 h is {m['mean']}% (> {cfg['saturation_pct']:g}%, "
        f"{m['samples']} samples): a second kernel with the same goal would share the load",
        measures={**m, "threshold": cfg["saturation_pct"]},
        sig=proposals.signature(int(m["mean"] // 5)),
    )


def _kernel(brain: Brain, kernel_id: str) -> Any:
    from nika_brain.state import kernels

    return kernels.load_kernel(brain, kernel_id)


# ---- topic diversity ----------------------------------------------------------------------------


def _kmeans(x: Any, k: int, seed: int = 0, iters: int = 10) -> tuple[Any, Any]:
    """Spherical k-means, k-means++ seeded with a fixed generator; (centroids, labels)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = x.shape[0]
    centres = [int(rng.integers(n))]
    dist = 1.0 - x @ x[centres[0]]
    for _ in range(1, k):
        p = np.clip(dist, 0, None) ** 2
        total = p.sum()
        nxt = int(rng.choice(n, p=p / total)) if total > 0 else int(rng.integers(n))
        centres.append(nxt)
        dist = np.minimum(dist, 1.0 - x @ x[nxt])
    c = x[centres].copy()
    labels = np.zeros(n, dtype=int)
    for _ in range(iters):
        labels = np.argmax(x @ c.T, axis=1)
        for j in range(k):
            members = x[labels == j]
            if len(members):
                v = members.sum(axis=0)
                c[j] = v / (np.linalg.norm(v) or 1.0)
    return c, labels


def _average_linkage(items: Any, weights: Any, link: float) -> Any:
    """Merge the two closest groups while their weighted mean similarity is at least `link`;
    returns a group label per item."""
    import numpy as np

    m = len(items)
    sim = (items @ items.T).astype(np.float64)
    np.fill_diagonal(sim, -np.inf)
    w = np.asarray(weights, dtype=np.float64).copy()
    alive = np.ones(m, dtype=bool)
    label = np.arange(m)
    while alive.sum() > 1:
        masked = np.where(alive[:, None] & alive[None, :], sim, -np.inf)
        flat = int(np.argmax(masked))
        a, b = divmod(flat, m)
        if masked[a, b] < link:
            break
        # group b joins a: a's similarity to every other group becomes the weighted mean
        row = (sim[a] * w[a] + sim[b] * w[b]) / (w[a] + w[b])
        sim[a, :], sim[:, a] = row, row
        sim[a, a] = -np.inf
        w[a] += w[b]
        alive[b] = False
        label[label == b] = a
    return label


def reference_mean(embedder: Any) -> Any:
    return embedder.embed(list(REFERENCE), kind="passage").mean(axis=0)


def topic_clusters(
    vectors: Any,
    reference: Any,
    *,
    link: float = DEFAULTS["diversity_link"],
    min_share: float = DEFAULTS["diversity_min_share"],
    seed: int = 0,
) -> dict:
    """{clusters, sizes, records, method}: disjoint topic clusters among the vectors.

    The vectors are centred on `reference` (reference_mean: REFERENCE's mean embedding) and
    renormalised, grouped by average linkage at `link` (over k-means centroids weighted by their
    members when there are more than CENTROIDS records), and groups holding at least `min_share` of
    the records are counted.
    """
    import numpy as np

    x = np.asarray(vectors, dtype=np.float32)
    n = len(x)
    if n == 0 or x.ndim != 2:
        return {"clusters": 0, "sizes": [], "records": 0, "method": "none"}
    x = x - np.asarray(reference, dtype=np.float32)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    if n <= CENTROIDS:
        items, weights, method = x, np.ones(n), "exact"
    else:
        items, member = _kmeans(x, CENTROIDS, seed)
        weights = np.bincount(member, minlength=len(items)).astype(float)
        method = f"k-means({len(items)})"
    labels = _average_linkage(items, weights, link)
    sizes: dict[int, float] = {}
    for lab, wt in zip(labels.tolist(), weights.tolist()):
        sizes[lab] = sizes.get(lab, 0) + wt
    big = sorted((int(v) for v in sizes.values() if v >= min_share * n), reverse=True)
    return {"clusters": len(big), "sizes": big, "records": n, "method": method}


def kernel_vectors(brain: Brain, kernel_id: str) -> Any:
    """The embeddings of the kernel's records in the shared vault (issue 13's `query.records`)."""
    try:
        from nika_brain.federation.vault import query as vault_query
    except ImportError as exc:
        raise MissingExtra("the topic-diversity trigger needs the shared vault (federation.vault)") from exc
    _, vecs = vault_query.records(brain, kernel_id)
    return vecs


def check_diversity(brain: Brain, kernel_id: str, vectors: Any = None) -> dict | None:
    from nika_brain.federation.spawning import proposals

    cfg = settings(brain)
    from nika_brain.federation.stealing.aptitude import open_embedder

    vecs = kernel_vectors(brain, kernel_id) if vectors is None else vectors
    m = topic_clusters(
        vecs,
        reference_mean(open_embedder(brain)),
        link=cfg["diversity_link"],
        min_share=cfg["diversity_min_share"],
    )
    if m["clusters"] <= cfg["diversity_clusters"]:
        return None
    k = _kernel(brain, kernel_id)
    return proposals.propose(
        brain,
        "diversity",
        kernel=kernel_id,
        goal=f"{k.goal} (split: one of its {m['clusters']} topics)",
        scope=k.scope,
        why=f"{m['clusters']} disjoint topic clusters in {kernel_id}'s {m['records']} vault records "
        f"(> {cfg['diversity_clusters']}): a kernel per topic family would keep its RAG actionable",
        measures={**m, "threshold": cfg["diversity_clusters"]},
        sig=proposals.signature(m["clusters"]),
    )


# ---- doctrine conflicts ------------------------------------------------------------------------


def doctrines(brain: Brain) -> list[dict]:
    """Every doctrine file of `doctrines/` (the kernels room reads them too: kernels/doctrine.py)."""
    from nika_brain.federation.kernels.doctrine import load_all
    return load_all(brain)


def conflicts(brain: Brain, kernel_id: str) -> list[dict]:
    """Pairs of the kernel's active doctrines that assert different values for one invariant."""
    k = _kernel(brain, kernel_id)
    mine = [
        d
        for d in doctrines(brain)
        if d.get("status", "active") == "active"
        and (kernel_id in d.get("kernels", []) or "*" in d.get("kernels", []) or d["id"] == k.doctrine)
    ]
    out = []
    for a_i, a in enumerate(mine):
        for b in mine[a_i + 1 :]:
            for key in sorted(set(a["invariants"]) & set(b["invariants"])):
                if a["invariants"][key] != b["invariants"][key]:
                    out.append(
                        {
                            "a": a["id"],
                            "b": b["id"],
                            "invariant": key,
                            "values": [a["invariants"][key], b["invariants"][key]],
                        }
                    )
    return out


def check_doctrine(brain: Brain, kernel_id: str) -> dict | None:
    from nika_brain.federation.spawning import proposals

    found = conflicts(brain, kernel_id)
    if not found:
        return None
    k = _kernel(brain, kernel_id)
    first = found[0]
    docs = {d["id"]: d for d in doctrines(brain)}
    sig = proposals.signature(
        [(c["a"], c["b"], c["invariant"]) for c in found]
        + [
            repr(sorted(docs[x]["invariants"].items()))
            for x in sorted({c["a"] for c in found} | {c["b"] for c in found})
        ]
    )
    return proposals.propose(
        brain,
        "doctrine",
        kernel=kernel_id,
        goal=f"{k.goal} (under doctrine {first['b']})",
        scope=k.scope,
        why=f"doctrines {first['a']} and {first['b']} of {kernel_id} contradict each other on "
        f"{first['invariant']} ({first['values'][0]!r} vs {first['values'][1]!r}): one kernel "
        "cannot honour both",
        measures={"conflicts": found},
        sig=sig,
    )


# ---- explicit -----------------------------------------------------------------------------------


def explicit(brain: Brain, goal: str, *, kernel: str | None = None, by: str = "cli") -> dict | None:
    from nika_brain.federation.spawning import proposals

    return proposals.propose(
        brain,
        "explicit",
        kernel=kernel,
        goal=goal,
        why=f"asked explicitly ({by})",
        measures={"requested_by": by},
        sig=proposals.signature(" ".join(goal.lower().split())),
    )


def run_all(brain: Brain, kernel_ids: list[str] | None = None) -> list[dict]:
    """Evaluate saturation, diversity and doctrine for live kernels; the proposals written."""
    from nika_brain.state import kernels

    ids = kernel_ids or [k.id for k in kernels.list_kernels(brain) if k.live]
    out = []
    for kid in ids:
        for check in (check_saturation, check_doctrine, check_diversity):
            try:
                p = check(brain, kid)
            except MissingExtra:
                if check is check_diversity:
                    continue
                raise
            if p:
                out.append(p)
    return out


# ---- hook: /kernel new <goal> -----------------------------------------------------------------


def on_prompt(hook: Any) -> Any:
    """UserPromptSubmit: `/kernel new <goal>` writes an explicit proposal; the prompt is erased."""
    prompt = hook.data.get("prompt")
    if hook.brain is None or not isinstance(prompt, str):
        return None
    text = prompt.strip()
    if not text.startswith("/kernel new"):
        return None
    from nika_brain.federation.kernels import health

    reply = _kernel_new(hook, text[len("/kernel new") :].strip())
    health.record_consumed(hook, reply["block"])
    return reply


def _kernel_new(hook: Any, goal: str) -> dict:
    if not goal:
        return {"block": "usage: /kernel new <goal>"}
    try:
        p = explicit(hook.brain, goal, kernel=hook.kernel(), by=f"session {hook.session_id}")
    except BrainError as exc:
        return {"block": f"no spawn proposal: {exc}"}
    except OSError as exc:
        # inside a kernel's sandbox proposals/ and gates/ are read-only (kernels/sandbox.READ_ONLY):
        # the prompt is still consumed, never sent on to the model as if it were a task
        return {"block": f"no spawn proposal: cannot write it here ({exc.strerror}: {exc.filename}); "
                "ask the operator: nika-brain kernel propose <goal>"}
    if p is None:
        return {"block": "a proposal for this request is already pending or was rejected"}
    return {
        "block": f"spawn proposal {p['id']} written (goal: {p['goal']}); it waits for a human: "
        f"nika-brain kernel approve {p['id']} (or reject). Nothing was spawned."
    }
