"""Triage: route a prompt to the kernel whose /goal it serves, or to the generalist, or split it.

The decision, for a prompt and the goals index (goals.py, router.py):
1. Policy: the prompt's data class is the most sensitive configured class whose patterns match it
   (or the one the caller states); a kernel may receive it only if its own `data_class` is at least
   as sensitive and, when the class lists regions, its `region` is one of them. Kernels the policy
   excludes are shown with the reason and never chosen.
2. Route: the nearest allowed kernel (sub-topic centroids) takes the prompt when its confidence
   passes its calibrated threshold ("above threshold"); otherwise the default generalist kernel
   takes it ("fallback"); when the nearest kernel *is* the generalist (its own examples), the same.
3. Split: only when the prompt carries several requests (clauses joined by "et", "and", "puis",
   "then", ";", a sentence break...) and at least two clauses route, each above its threshold, to
   different non-generalist kernels. Adjacent clauses for one kernel stay together; a single
   request is never split, and a clause no kernel takes confidently cancels the split, and so does
   a clause routed elsewhere less surely (score minus threshold) than the whole prompt is routed:
   follow-ups like "... and change it" are part of the request before them.

Deterministic for the same index: no sampling, stable sorts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nika_brain.errors import BrainError, Invalid
from nika_brain.federation.triage.goals import EMBED_KIND, DataClass, Index, Settings

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain
    from nika_brain.federation.embedding import Embedder

MAX_PROMPT = 20_000  # characters embedded (the model truncates long inputs anyway)
MIN_CLAUSE_WORDS = 3
MAX_CLAUSES = 6      # more "requests" than that is a document or a brief: routed whole
_SEPARATORS = re.compile(
    r"\s*(?:;|\n+|(?<=[.!?])\s+|,?\s+(?:et(?:\s+(?:aussi|ensuite|puis))?|puis|ensuite|"
    r"and(?:\s+(?:also|then))?|then|also|as well as|plus)\s+)\s*", re.IGNORECASE)
_LEADING = re.compile(r"^(?:(?:et|and|then|puis|ensuite|also|aussi|plus)\s+)+", re.IGNORECASE)


@dataclass(frozen=True)
class Score:
    kernel: str
    score: float
    threshold: float
    allowed: bool
    why_not: str | None = None

    def as_dict(self) -> dict[str, Any]:
        d = {"kernel": self.kernel, "score": round(self.score, 4), "threshold": round(self.threshold, 4),
             "allowed": self.allowed}
        if self.why_not:
            d["why_not"] = self.why_not
        return d


@dataclass(frozen=True)
class Part:
    text: str
    kernel: str
    score: float
    threshold: float


@dataclass(frozen=True)
class Decision:
    prompt: str
    decision: str                   # "kernel" | "fallback" | "split"
    kernels: tuple[str, ...]        # where it goes (one, or one per part)
    reason: str
    scores: tuple[Score, ...]       # nearest first
    parts: tuple[Part, ...] = ()
    data_class: str | None = None
    context: str | None = None      # the kernel the prompt was typed in, if any
    wrong_kernel: bool = False      # typed in `context`, but it belongs to another kernel
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt, "decision": self.decision, "kernels": list(self.kernels),
            "reason": self.reason, "scores": [s.as_dict() for s in self.scores],
            "parts": [{"text": p.text, "kernel": p.kernel, "score": round(p.score, 4),
                       "threshold": round(p.threshold, 4)} for p in self.parts],
            "data_class": self.data_class, "context": self.context, "wrong_kernel": self.wrong_kernel,
        }


def clauses(prompt: str) -> list[str]:
    """The prompt cut at request boundaries; fragments too short to be a request stay with their
    neighbour, in the prompt's own words."""
    text = prompt.strip()
    cuts = [(m.start(), m.end()) for m in _SEPARATORS.finditer(text) if m.end() > m.start()]
    spans, start = [], 0
    for a, b in cuts:
        spans.append((start, a))
        start = b
    spans.append((start, len(text)))

    def size(span: tuple[int, int]) -> int:
        return len(text[span[0]:span[1]].split())
    merged: list[tuple[int, int]] = []
    for span in spans:
        if merged and (size(span) < MIN_CLAUSE_WORDS or size(merged[-1]) < MIN_CLAUSE_WORDS):
            merged[-1] = (merged[-1][0], span[1])
        else:
            merged.append(span)
    out = [_LEADING.sub("", text[a:b].strip(" ,.;\n")) for a, b in merged]
    return [c for c in out if c]


def data_class_of(prompt: str, classes: tuple[DataClass, ...], stated: str | None = None) -> DataClass:
    names = [c.name for c in classes]
    if stated is not None:
        if stated not in names:
            raise Invalid(f"unknown data class {stated!r} (configured: {', '.join(names)})")
        return classes[names.index(stated)]
    found = classes[0]
    for c in classes:
        if any(re.search(p, prompt) for p in c.patterns):
            found = c  # classes are listed least sensitive first: the last match is the strictest
    return found


def allowed(index: Index, kernel: str, dc: DataClass, classes: tuple[DataClass, ...]) -> str | None:
    """None when the kernel may receive a prompt of class `dc`, else why not."""
    e = index.entry(kernel)
    if e is None:
        return "not in the goals index"
    names = [c.name for c in classes]
    if e.data_class is not None:
        mine = names.index(e.data_class) if e.data_class in names else None
        if mine is None and e.data_class != dc.name:
            return f"takes only {e.data_class} data"
        if mine is not None and mine < names.index(dc.name):
            return f"cleared for {e.data_class} data, the prompt is {dc.name}"
    if dc.regions is not None and e.region not in dc.regions:
        return f"region {e.region or 'unset'} is not allowed for {dc.name} data ({', '.join(dc.regions)})"
    return None


class Triage:
    """A router over one goals index and one embedder (both hot in a long-lived process)."""

    def __init__(self, index: Index, embedder: Embedder, st: Settings):
        if embedder.model_id != index.model_id:
            raise BrainError(f"the goals index was built with {index.model_id}, the embedder is "
                             f"{embedder.model_id}: run `nika-brain triage calibrate`")
        self.index, self.embedder, self.settings = index, embedder, st

    def _route_one(self, vec, text: str, dc: DataClass):
        order, conf = self.index.model.score(vec[None, :], [text])
        order, conf = order[0], conf[0]
        kernels = self.index.model.kernels
        th = self.index.model.thresholds
        scores = []
        chosen = None
        for k in order:
            kid = kernels[k]
            why = None if kid == self.index.default else allowed(self.index, kid, dc, self.settings.data_classes)
            scores.append(Score(kid, float(conf[k]), float(th[k]), why is None, why))
            if chosen is None and why is None:
                chosen = scores[-1]
        return chosen, scores

    def decide(self, prompt: str, *, context: str | None = None, data_class: str | None = None) -> Decision:
        if not isinstance(prompt, str) or not prompt.strip():
            raise Invalid("an empty prompt cannot be routed")
        prompt = prompt.strip()
        text = prompt[:MAX_PROMPT]
        default = self.index.default
        dc = data_class_of(text, self.settings.data_classes, data_class)
        if not self.index.model.kernels:
            return Decision(prompt, "fallback", (default,), "no kernel has a goal yet", (),
                            data_class=dc.name, context=context)
        parts = clauses(text) if self.settings.split else [text]
        if len(parts) > MAX_CLAUSES:
            parts = [text]
        texts = [text] + (parts if len(parts) > 1 else [])
        vecs = self.embedder.embed(texts, kind=EMBED_KIND)
        chosen, scores = self._route_one(vecs[0], text, dc)

        whole = chosen if chosen is not None and chosen.score >= chosen.threshold else None
        split = self._split(parts, vecs[1:], dc, whole, scores) if len(parts) > 1 else None
        if split:
            ks = tuple(dict.fromkeys(p.kernel for p in split))
            reason = "split: " + "; ".join(f"{p.kernel} {p.score:.3f} >= {p.threshold:.3f}" for p in split)
            return self._finish(Decision(prompt, "split", ks, reason, tuple(scores), tuple(split),
                                         dc.name, context))
        if chosen is None:
            d = Decision(prompt, "fallback", (default,), f"no kernel may receive {dc.name} data",
                         tuple(scores), (), dc.name, context)
        elif chosen.kernel == default:
            d = Decision(prompt, "fallback", (default,),
                         f"closest to the generalist's own examples ({chosen.score:.3f})",
                         tuple(scores), (), dc.name, context)
        elif chosen.score >= chosen.threshold:
            d = Decision(prompt, "kernel", (chosen.kernel,),
                         f"above threshold: {chosen.kernel} {chosen.score:.3f} >= {chosen.threshold:.3f}",
                         tuple(scores), (), dc.name, context)
        else:
            d = Decision(prompt, "fallback", (default,),
                         f"fallback: nearest {chosen.kernel} {chosen.score:.3f} < {chosen.threshold:.3f}",
                         tuple(scores), (), dc.name, context)
        return self._finish(d)

    def _split(self, parts: list[str], vecs, dc: DataClass, whole: Score | None,
               whole_scores: list[Score]) -> list[Part] | None:
        routed: list[Part] = []
        accepted_whole = {s.kernel for s in whole_scores if s.score >= s.threshold}
        for text, vec in zip(parts, vecs):
            chosen, scores = self._route_one(vec, text, dc)
            if chosen is None or chosen.kernel == self.index.default or chosen.score < chosen.threshold:
                return None  # a clause nobody takes: not a set of requests for kernels
            if whole is not None and whole.kernel != chosen.kernel:
                mine = next(s for s in scores if s.kernel == whole.kernel)
                if mine.score >= mine.threshold:
                    chosen = mine  # the whole prompt's kernel takes this clause too: keep it there
                elif (chosen.kernel not in accepted_whole
                      and chosen.score - chosen.threshold <= whole.score - whole.threshold):
                    # a request of its own shows in the whole prompt already (its kernel accepts the
                    # whole) or is clearer alone than the whole is; otherwise it is a follow-up
                    # of the request before it ("... and how do I change it")
                    return None
            if routed and routed[-1].kernel == chosen.kernel:
                last = routed[-1]
                routed[-1] = Part(f"{last.text}, {text}", last.kernel, max(last.score, chosen.score),
                                  last.threshold)
            else:
                routed.append(Part(text, chosen.kernel, chosen.score, chosen.threshold))
        if len({p.kernel for p in routed}) < 2:
            return None
        return routed

    def _finish(self, d: Decision) -> Decision:
        if d.context is None:
            return d
        own = next((s for s in d.scores if s.kernel == d.context), None)
        # wrong kernel: it clearly belongs elsewhere and the kernel it was typed in would not take it
        wrong = (d.decision == "kernel" and d.kernels[0] != d.context
                 and (own is None or own.score < own.threshold))
        if d.decision == "split":
            wrong = d.context not in d.kernels and (own is None or own.score < own.threshold)
        return Decision(d.prompt, d.decision, d.kernels, d.reason, d.scores, d.parts, d.data_class,
                        d.context, wrong)


def open_triage(brain: Brain, *, rebuild: bool = True) -> Triage:
    from nika_brain.federation.embedding import open_embedder
    from nika_brain.federation.triage import goals
    index = goals.current(brain, rebuild=rebuild)
    emb = open_embedder(brain)
    # the cache serves goals and examples; prompts are one-offs, embedded directly
    return Triage(index, getattr(emb, "inner", emb), goals.settings(brain))


def triage(brain: Brain, prompt: str, *, context: str | None = None,
           data_class: str | None = None) -> Decision:
    if context is not None:
        from nika_brain.state.kernels import check_id
        check_id(context)
    return open_triage(brain).decide(prompt, context=context, data_class=data_class)
