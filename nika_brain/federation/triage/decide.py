"""Triage: route a prompt to the kernel whose /goal it serves, or to the generalist, or split it.

The decision, for a prompt and the goals index (goals.py, router.py), one model from end to end:
1. Policy: the prompt's data class is the most sensitive configured class whose patterns match it
   (or the one the caller states); a kernel may receive it only if its own `data_class` is at least
   as sensitive and, when the class lists regions, its `region` is one of them. The rule holds for
   every route, the generalist's fallback included: a prompt no allowed kernel can take is
   "refused", and says why. Excluded kernels are shown with the reason and never chosen.
2. Corrections: a prompt within router.CORRECTION_RADIUS of a prompt the operator corrected routes
   as corrected (the reason names the correction), policy permitting.
3. Everyday: when the prompt is nearer to the everyday background than to the own texts of the
   kernel it scores highest on (among those that pass their threshold; router.py, 5), it is an
   everyday request: the generalist's ("fallback"), never split, and the reason gives both numbers.
4. Route: the kernel with the highest calibrated score among those that pass their threshold and
   that the policy allows. When a kernel with a higher score was passed over, the reason says why
   (below its own threshold, or the policy). Nothing passes: the default generalist ("fallback").
5. Split, when the prompt carries requests for several kernels:
   - clauses (connectives, "avant de", "donc", sentence breaks, commas, gerund clauses "en y
     intégrant ...", enumerations "1) ... 2) ...", bullets) that each clearly pass a different
     kernel (score >= threshold + CLAUSE_MARGIN) and have MIN_CLAUSE_CONTENT content words of their
     own; clauses no kernel takes ("dis-moi pourquoi", "tell me what's on it") or that open on a
     preposition ("..., with the action items": a complement, not a request) stay with their
     neighbour, adjacent clauses for one kernel stay together. Split in two, the whole prompt must
     pass the threshold of both kernels: in "l'examinateur refuse la revendication 3 du brevet KTW,
     aide-moi à lui répondre" the second clause alone reads as the client-mail kernel's, the whole
     prompt does not (context, not a second request). In a list of three requests or more each is
     a small share of the prompt, and the whole prompt's scores say little of any one;
   - two aspects, when no clause split was found (one clause, "génère un plan technique ISO pour
     le client X", or clauses that do not each clearly belong to one kernel, "check le boamp pour
     les AO IoT et répond au mail du client"): the whole prompt's two best kernels each clearly
     pass (>= threshold + ASPECT_MARGIN), and cut before
     "pour/for/avec/with/sur/..." (not "about": a subject, not a second request) its head and its
     tail each belong clearly to a different one of them;
     or, with no such cut ("le firewall bloque la passerelle edge qui n'envoie plus rien"), the two
     are both far above their thresholds (>= threshold + TIE_MARGIN) and tied (within TIE_GAP),
     or each of the two names OWN_WORDS words of its own: words of its texts (vocabulary included)
     that the other's texts lack and that no everyday request uses ("prépare", "réponse" are any
     request's; "firmware", "boamp" are one kernel's aspect).
     Each part then carries the whole prompt.
   A part that cannot stand alone (a dependent clause) carries the whole prompt too.
6. Long prompts: the embedder sees a bounded, representative part (symbols such as emoji dropped,
   then the head and the tail, then at most LONG_TOKENS of the embedder's tokens), embedded once (a
   prompt that long is a brief, routed whole, never split): latency does not grow with the prompt.

Deterministic for the same index: no sampling, stable sorts.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nika_brain.errors import BrainError, Invalid
from nika_brain.federation.triage.goals import EMBED_KIND, DataClass, Index, Settings
from nika_brain.federation.triage.router import EVERYDAY_MARGIN, everyday_stems, stems

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain
    from nika_brain.federation.embedding import Embedder

MIN_WORD_CHARS = 2   # "x" or "?" says nothing a kernel could take: the generalist's
MAX_PROMPT = 20_000  # characters looked at for the data class; longer prompts are cut first
HEAD, TAIL = 200, 100  # characters of a long prompt the embedder sees (head ... tail): 55-100 tokens ...
LONG_TOKENS = 48     # ... then cut, word by word, to this many tokens (prefix and special ones included)
CHARS_PER_TOKEN = 3  # the token count's estimate for an embedder without a tokenizer of its own
MIN_CLAUSE_WORDS = 3
MIN_CLAUSE_CONTENT = 2  # content words a clause needs to split off to a kernel of its own ("tell me what's
                        # on it", "but i have no idea why" only continue the clause before them)
MAX_CLAUSES = 6      # more "requests" than that is a document or a brief: routed whole
CLAUSE_MARGIN = 1.0  # a clause splits off only when it clearly passes its kernel's threshold ...
CLAUSE_LEAD = 0.5    # ... and no other kernel comes within this of it (and, split in two, the whole
                     # prompt passes the threshold of both kernels)
ASPECT_MARGIN = 1.5  # two-aspect hybrid: the two kernels this far above their thresholds ...
ASPECT_LEAD = 1.5    # ... and each aspect this far ahead of any other kernel
TIE_MARGIN = 4.0     # two-aspect hybrid with no cut: the two kernels this far above their thresholds ...
TIE_GAP = 0.35       # ... and this close to each other (a prompt of one kernel rarely scores a
                     # second one as high: 3.7 above was the highest seen on the dev sets)
OWN_WORDS = 2        # two-aspect hybrid with no cut: words of its own each of the two kernels names
WRONG_GAP = 2.0      # the wrong-kernel hint: the context kernel this far behind the routed one
ASPECT_WORDS = 30    # longer prompts are not looked at for aspects (bounded latency)
_GERUND = r"en\s+(?:y\s+|les?\s+|la\s+)?\w+ant\b"   # "en y intégrant ...": a clause of its own
_MARKER = r"\(?\d{1,2}[).]|[•*-]"                    # an item of a list: "1) ... 2) ...", "- ...", "• ..."
_PREPOSITION = r"(?:pour|avec|sans|using|with|including|by)\b"
_SEPARATORS = re.compile(
    r"\s*(?:;|\n+|(?<=[.!?])\s+|"
    r",?\s+(?:et(?:\s+(?:aussi|ensuite|puis|en\s+parall[eè]le))?|puis|ensuite|apr[eè]s\s+(?:[cç]a|cela)|"
    r"au\s+passage|en\s+parall[eè]le|and(?:\s+(?:also|then))?|then|also|as\s+well\s+as|"
    r"after\s+that|meanwhile|avant\s+de|donc)\s+|"
    r",\s+|\s+(?=" + _GERUND + r")|\s+(?=(?:" + _MARKER + r")\s))\s*", re.IGNORECASE)
_LEADING = re.compile(r"^(?:(?:et|and|then|puis|ensuite|also|aussi|après|apres|after|" + _MARKER + r")\s+)+",
                      re.IGNORECASE)
# "about"/"concernant" only name the subject of one kernel's request ("find tenders on the BOAMP about
# data centers" is the tenders kernel's): no cut there; "sur" also names where the work is done
# ("déploie le firmware sur les contrôleurs") and stays one
_ASPECT = re.compile(r"\s+(?=(?:pour|for|avec|with|sur|de\s+(?:son|sa|ses|leur|leurs|notre|nos))\s)",
                     re.IGNORECASE)
# a clause that opens on a preposition is a complement of the request before it ("..., with the action
# items"), never a request of its own: the two-aspect rule, with its stricter margins, looks at those
_COMPLEMENT = re.compile("^" + _PREPOSITION, re.IGNORECASE)
_DEPENDENT = re.compile(f"^(?:{_GERUND}|{_PREPOSITION})", re.IGNORECASE)


@dataclass(frozen=True)
class Score:
    kernel: str
    score: float          # calibrated: background standard deviations (router.py)
    threshold: float
    allowed: bool
    why_not: str | None = None
    raw: float = 0.0      # the raw similarity the calibrated score came from
    near: float = 1.0     # mean cosine to the kernel's nearest texts ...
    everyday: float = -1.0  # ... and to the nearest everyday requests (router.py, 5)

    @property
    def everyday_like(self) -> bool:
        """The prompt resembles everyday requests more than this kernel's own texts."""
        return self.near < self.everyday - EVERYDAY_MARGIN

    @property
    def passes(self) -> bool:
        return self.score >= self.threshold

    def as_dict(self) -> dict[str, Any]:
        d = {"kernel": self.kernel, "score": round(self.score, 4), "threshold": round(self.threshold, 4),
             "passes": self.passes, "allowed": self.allowed, "raw": round(self.raw, 4),
             "near": round(self.near, 4), "everyday": round(self.everyday, 4)}
        if self.why_not:
            d["why_not"] = self.why_not
        return d


@dataclass(frozen=True)
class Part:
    text: str
    kernel: str
    score: float
    threshold: float
    clause: str = ""      # the words of the prompt this part stands for
    because: str = ""     # why a part carries the whole prompt when nothing cut it (a tie, words of its own)


@dataclass(frozen=True)
class Decision:
    prompt: str
    decision: str                   # "kernel" | "fallback" | "split" | "refused"
    kernels: tuple[str, ...]        # where it goes (one, or one per part; none when refused)
    reason: str
    scores: tuple[Score, ...]       # highest calibrated score first
    parts: tuple[Part, ...] = ()
    data_class: str | None = None
    context: str | None = None      # the kernel the prompt was typed in, if any
    wrong_kernel: bool = False      # typed in `context`, but it belongs to another kernel
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt, "decision": self.decision, "kernels": list(self.kernels),
            "reason": self.reason, "scores": [s.as_dict() for s in self.scores],
            "parts": [{"text": p.text, "clause": p.clause, "kernel": p.kernel, "score": round(p.score, 4),
                       "threshold": round(p.threshold, 4)} for p in self.parts],
            "data_class": self.data_class, "context": self.context, "wrong_kernel": self.wrong_kernel,
            **self.extra,
        }


def represent(text: str) -> tuple[str, bool]:
    """(what the embedder sees of a prompt, whether it was cut): symbols (emoji, pictographs, control
    characters) dropped, whitespace collapsed, and a long prompt cut to its head and tail at word
    boundaries."""
    def clean(s: str) -> str:
        kept = "".join(ch if unicodedata.category(ch)[0] in "LMNPZ" else " " for ch in s)
        return " ".join(kept.split())
    if len(text) <= 4 * (HEAD + TAIL):
        t = clean(text)
        if len(t) <= HEAD + TAIL:
            return t, False
        return t[:HEAD].rsplit(" ", 1)[0] + " ... " + t[-TAIL:].split(" ", 1)[-1], True
    h, t = clean(text[:4 * HEAD]), clean(text[-4 * TAIL:])
    return h[:HEAD].rsplit(" ", 1)[0] + " ... " + t[-TAIL:].split(" ", 1)[-1], True


def representative(text: str) -> str:
    return represent(text)[0]


def bound_tokens(text: str, count: Callable[[str], int] | None, limit: int | None = None) -> str:
    """A cut prompt's part ("head ... tail", represent()) shortened to the most words, head and tail
    in the proportion HEAD : TAIL, that hold at most `limit` (LONG_TOKENS) tokens. The forward pass
    costs per token (~1.5 ms of CPU each for e5-small here), and the same characters are 55 to 100
    tokens depending on the words: a bound in characters alone does not bound the latency.

    `count` is the embedder's tokenizer, asked word by word (a word alone costs microseconds to count,
    a 300-character text ~1 ms), the result checked once; without one, CHARS_PER_TOKEN estimates it."""
    limit = LONG_TOKENS if limit is None else limit

    def estimate(s: str) -> int:
        return 4 + len(s) // CHARS_PER_TOKEN
    tokens = count or estimate
    head, sep, tail = text.partition(" ... ")
    h, t = head.split(), tail.split()

    def keep(k: int) -> tuple[list[str], list[str]]:   # k words: the head's first, the tail's last
        tk = min(len(t), k * TAIL // (HEAD + TAIL))
        hk = min(len(h), k - tk)
        tk = min(len(t), k - hk)
        return h[:hk], t[len(t) - tk:]

    def joined(k: int) -> str:
        a, b = keep(k)
        return " ".join(a) + (f" ... {' '.join(b)}" if sep else "")
    n = len(h) + len(t)
    if n <= 1:
        return text
    # the prefix's trailing "▁" joins the first word: a word alone counts one token less than inside
    base = tokens("") - 1
    cost = {w: max(1, tokens(w) - base) for w in {*h, *t}}
    glue = tokens("...") - base if sep else 0

    def size(k: int) -> int:
        a, b = keep(k)
        return base + glue + sum(cost[w] for w in a) + sum(cost[w] for w in b)
    k = n
    while k > 1 and size(k) > limit:
        k -= 1
    while k > 1 and tokens(joined(k)) > limit:   # words joined may count a little apart
        k -= 1
    from nika_brain.federation.embedding import cut_to_tokens
    return cut_to_tokens(joined(k), limit, tokens)   # one word over the bound (no blank: Chinese, "é" * 1000)


def content_words(clause: str) -> int:
    """Content words of a clause (stop words left out, "what's" among them; "l'état" counts)."""
    from nika_brain.federation.triage.router import words
    return len(words(clause))


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
        m = index.model
        # kernels that can be scored at all (the generalist without examples of its own cannot)
        self._scored = [k for k in range(len(m.kernels)) if (m.owner == k).any()]

    # -- policy ------------------------------------------------------------------------------

    def _why_not(self, kernel: str, dc: DataClass) -> str | None:
        if kernel == self.index.default and self.index.entry(kernel) is None:
            if dc.regions is not None:
                return (f"the generalist has no region; {dc.name} data may go only to "
                        f"{', '.join(dc.regions)}")
            return None
        return allowed(self.index, kernel, dc, self.settings.data_classes)

    # -- one text ----------------------------------------------------------------------------

    def _scores(self, z, raw_row, dc: DataClass, near=None, everyday=None) -> list[Score]:
        m = self.index.model
        out = []
        for k in sorted(self._scored, key=lambda k: (-float(z[k]), k)):
            kid = m.kernels[k]
            why = self._why_not(kid, dc)
            nearness = {} if near is None else {"near": float(near[k]), "everyday": float(everyday[k])}
            out.append(Score(kid, float(z[k]), float(m.thresholds[k]), why is None, why, float(raw_row[k]),
                             **nearness))
        return out

    @staticmethod
    def _pick(scores: list[Score], default: str) -> Score | None:
        return next((s for s in scores if s.allowed and s.passes and s.kernel != default), None)

    def _route_reason(self, chosen: Score, scores: list[Score]) -> str:
        said = f"{chosen.kernel} {chosen.score:.2f} >= threshold {chosen.threshold:.2f}"
        above = [s for s in scores if s.score > chosen.score and s.kernel != self.index.default]
        if not above:
            return f"highest calibrated score: {said}"
        why = "; ".join(f"{s.kernel} {s.score:.2f} " + (f"not allowed ({s.why_not})" if not s.allowed
                                                      else f"below its threshold {s.threshold:.2f}")
                        for s in above)
        return f"{said}; passed over: {why}"

    # -- the decision ------------------------------------------------------------------------

    def decide(self, prompt: str, *, context: str | None = None, data_class: str | None = None,
               aspects: bool = True) -> Decision:
        """`aspects=False`: no two-aspect split (its second embedding), for the
        wrong-kernel hint, which asks only where the prompt belongs, on the hook's path."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise Invalid("an empty prompt cannot be routed")
        prompt = prompt.strip()
        dc = data_class_of(prompt[:MAX_PROMPT], self.settings.data_classes, data_class)
        text, cut = represent(prompt)
        if cut:
            count = getattr(getattr(self.embedder, "inner", self.embedder), "token_count", None)
            text = bound_tokens(text, None if count is None else lambda s: count(s, kind=EMBED_KIND))
        if not self._scored or len(re.findall(r"\w", text)) < MIN_WORD_CHARS:
            why = "no kernel has a goal yet" if not self._scored else "nothing in the prompt to route on"
            return self._finish(self._fallback(prompt, why, [], dc, context))
        # a long prompt is a brief or a document: routed whole, one embedding (bounded latency)
        parts = clauses(text) if self.settings.split and not cut else [text]
        if len(parts) > MAX_CLAUSES:
            parts = [text]
        texts = [text] + (parts if len(parts) > 1 else [])
        m = self.index.model
        vecs = self.embedder.embed(texts, kind=EMBED_KIND)
        z, centred = m.score(vecs, texts)
        raw = z * m.scale + m.loc
        near, everyday = m.nearness(centred[:1])
        scores = self._scores(z[0], raw[0], dc, near[0], everyday[0])
        extra: dict[str, Any] = {"representative": text} if text != prompt else {}

        fix = m.correction(centred[0])
        if fix is not None:
            j, sim = fix
            cid, k = m.corr_ids[j], int(m.corr_owner[j])
            if k < 0:
                return self._finish(self._fallback(
                    prompt, f"operator correction {cid} (similarity {sim:.2f}): no kernel", scores, dc,
                    context, extra))
            kid = m.kernels[k]
            blocked = self._why_not(kid, dc)
            if blocked is None:
                mine = next((s for s in scores if s.kernel == kid), None)
                return self._finish(Decision(
                    prompt, "kernel", (kid,), f"operator correction {cid} (similarity {sim:.2f}): {kid}",
                    tuple(scores), (), dc.name, context, extra=extra | {"correction": cid,
                                                                         "score": None if mine is None
                                                                         else round(mine.score, 4)}))
            extra = extra | {"correction_overruled": f"{cid} names {kid}, not allowed: {blocked}"}

        top = next((s for s in scores if s.passes and s.kernel != self.index.default), None)
        if top is not None and top.everyday_like:
            return self._finish(self._fallback(prompt, (
                f"an everyday request: nearer to the everyday background ({top.everyday:.2f}) than to the "
                f"own texts ({top.near:.2f}) of {top.kernel}, its highest score ({top.score:.2f} >= "
                f"{top.threshold:.2f})"), scores, dc, context, extra))
        split = None
        if len(parts) > 1:
            split = self._clause_split(parts, z[1:], raw[1:], dc, prompt, scores)
        if split is None and aspects and not cut:   # no clause split: two aspects? (a cut prompt is a brief)
            split = self._aspects(text, scores, dc, prompt)
        if split:
            ks = tuple(dict.fromkeys(p.kernel for p in split))
            reason = "split: " + "; ".join(f"{p.kernel} {p.score:.2f} >= {p.threshold:.2f}" for p in split)
            if split[0].because:   # nothing cut the prompt: why each kernel takes it whole
                reason += f" (nothing to cut at: {split[0].because})"
            return self._finish(Decision(prompt, "split", ks, reason, tuple(scores), tuple(split),
                                         dc.name, context, extra=extra))
        chosen = self._pick(scores, self.index.default)
        if chosen is not None:
            return self._finish(Decision(prompt, "kernel", (chosen.kernel,), self._route_reason(chosen, scores),
                                         tuple(scores), (), dc.name, context, extra=extra))
        best = scores[0]
        if not best.passes:
            why = f"no kernel passes its threshold (highest: {best.kernel} {best.score:.2f} < {best.threshold:.2f})"
        elif best.kernel == self.index.default:
            why = f"closest to the generalist's own examples ({best.score:.2f})"
        else:
            passing = [s for s in scores if s.passes and s.kernel != self.index.default]
            why = "the kernels that pass may not receive it: " + "; ".join(
                f"{s.kernel} ({s.why_not})" for s in passing)
        return self._finish(self._fallback(prompt, why, scores, dc, context, extra))

    def _fallback(self, prompt: str, why: str, scores: list[Score], dc: DataClass, context: str | None,
                  extra: dict[str, Any] | None = None) -> Decision:
        default = self.index.default
        refused = self._why_not(default, dc)
        if refused is not None:
            return Decision(prompt, "refused", (), f"no allowed kernel can take it: {why}; "
                            f"generalist {default}: {refused}", tuple(scores), (), dc.name, context,
                            extra=extra or {})
        return Decision(prompt, "fallback", (default,), f"fallback: {why}", tuple(scores), (), dc.name,
                        context, extra=extra or {})

    def _clause_split(self, parts: list[str], z, raw, dc: DataClass, prompt: str,
                      whole: list[Score]) -> list[Part] | None:
        groups: list[tuple[list[str], Score | None]] = []
        for text, zr, rr in zip(parts, z, raw):
            sc = [s for s in self._scores(zr, rr, dc) if s.kernel != self.index.default]
            chosen = next((s for s in sc if s.allowed), None)
            if chosen is not None and (chosen.score < chosen.threshold + CLAUSE_MARGIN or any(
                    s.score > chosen.score - CLAUSE_LEAD for s in sc if s is not chosen)
                    or content_words(text) < MIN_CLAUSE_CONTENT
                    or _COMPLEMENT.match(text)):
                chosen = None  # not clearly one kernel's: stays with its neighbour
            if chosen is None or (groups and groups[-1][1] is not None and groups[-1][1].kernel == chosen.kernel):
                if groups:
                    groups[-1][0].append(text)   # no kernel of its own, or the same: stays with the one before
                    continue
            groups.append(([text], chosen))
        # a leading clause nobody takes joins the next one
        if len(groups) > 1 and groups[0][1] is None:
            first = groups.pop(0)
            groups[0] = (first[0] + groups[0][0], groups[0][1])
        routed = [(g, s) for g, s in groups if s is not None]
        if len({s.kernel for _, s in routed}) < 2 or len(routed) != len(groups):
            return None
        on_whole = {s.kernel: s for s in whole}
        if len(routed) == 2 and not all(on_whole[s.kernel].passes for _, s in routed):
            return None   # a kernel the whole prompt does not reach: that clause is context, not a request
        out = []
        for texts, s in routed:
            clause = ", ".join(texts)
            stand = prompt if _DEPENDENT.match(clause) else clause
            out.append(Part(stand, s.kernel, s.score, s.threshold, clause))
        return out

    def _aspects(self, text: str, scores: list[Score], dc: DataClass, prompt: str) -> list[Part] | None:
        """Two aspects where no clause split was found ("génère un plan technique ISO pour le client X",
        "check le boamp pour les AO IoT et répond au mail du client"): the whole prompt's
        two best kernels both clearly pass, and cut before "pour/for/avec/with/sur/..." the prompt has
        a head and a tail that each clearly belong to a different one of them. Each part carries the whole
        prompt (an aspect cut does not leave a request that stands alone)."""
        top = [s for s in scores if s.allowed and s.kernel != self.index.default][:2]
        if len(top) < 2 or any(s.score < s.threshold + ASPECT_MARGIN for s in top):
            return None
        pair = {s.kernel for s in top}
        if len(text.split()) > ASPECT_WORDS:
            return None  # a long prompt is a brief, not a two-aspect request
        cuts = [m.start() for m in _ASPECT.finditer(text)][:3]
        spans = [(text[:c].strip(), text[c:].strip()) for c in cuts]
        spans = [(h, t) for h, t in spans if len(h.split()) >= 2 and len(t.split()) >= 2]
        if not spans:
            return self._uncut(top, text, prompt)
        flat = [x for pair in spans for x in pair]
        vecs = self.embedder.embed(flat, kind=EMBED_KIND)
        m = self.index.model
        z, _ = m.score(vecs, flat)
        raw = z * m.scale + m.loc
        for i in range(len(spans)):
            picks: list[Score] = []
            for row in (2 * i, 2 * i + 1):
                sc = [s for s in self._scores(z[row], raw[row], dc) if s.kernel != self.index.default]
                clear = (sc[0].kernel in pair and sc[0].score >= sc[0].threshold + ASPECT_MARGIN
                         and sc[0].score >= sc[1].score + ASPECT_LEAD)
                if not clear:
                    break
                picks.append(sc[0])
            if len(picks) == 2 and picks[0].kernel != picks[1].kernel:
                return [Part(prompt, s.kernel, s.score, s.threshold, clause)
                        for s, clause in zip(picks, spans[i])]
        return self._uncut(top, text, prompt)

    def _uncut(self, top: list[Score], text: str, prompt: str) -> list[Part] | None:
        """Two aspects no cut divides, the two kernels both clearly passing: a tie, or words of
        each one's own."""
        return self._tie(top, prompt) or self._own_words(top, text, prompt)

    @staticmethod
    def _tie(top: list[Score], prompt: str) -> list[Part] | None:
        """A single clause no cut divides, two kernels both far above their thresholds and tied
        ("le firewall bloque la passerelle edge qui n'envoie plus rien": IT and IoT): one aspect
        each, both parts carry the whole prompt."""
        if all(s.score >= s.threshold + TIE_MARGIN for s in top) and top[0].score - top[1].score < TIE_GAP:
            why = f"the two kernels tie within {TIE_GAP}"
            return [Part(prompt, s.kernel, s.score, s.threshold, prompt, why) for s in top]
        return None

    def _own_words(self, top: list[Score], text: str, prompt: str) -> list[Part] | None:
        """Each of the two kernels names OWN_WORDS words of the prompt that the other's texts lack
        and that no everyday request uses ("envoie au client le rapport de télémétrie des capteurs
        de son usine": "télémétrie", "capteurs" are the IoT kernel's, "client", "rapport" the client
        kernel's): one aspect each, both parts carry the whole prompt."""
        m = self.index.model
        a, b = (m.kernels.index(s.kernel) for s in top)
        common = everyday_stems()
        # a word as typed ("pare-feu" is one), by the stems of its parts
        typed = {w.strip(".,;:!?()\"'«»"): stems(w) - common for w in text.split()}
        only = (m.vocab[a] - m.vocab[b], m.vocab[b] - m.vocab[a])   # each kernel's stems the other lacks
        own = [[w for w, st in typed.items() if st & mine] for mine in only]
        if any(len(o) < OWN_WORDS for o in own):
            return None
        why = "each names words of its own: " + "; ".join(
            f"{s.kernel} {', '.join(o)}" for s, o in zip(top, own))
        return [Part(prompt, s.kernel, s.score, s.threshold, prompt, why) for s in top]

    def _finish(self, d: Decision) -> Decision:
        if d.context is None:
            return d
        own = next((s for s in d.scores if s.kernel == d.context), None)
        top = d.scores[0].score if d.scores else 0.0
        # wrong kernel: it clearly belongs elsewhere, and the kernel it was typed in would not take
        # it or is far behind (WRONG_GAP) the kernel it belongs to
        far = own is None or not own.passes or own.score < top - WRONG_GAP
        wrong = d.decision == "kernel" and d.kernels[0] != d.context and far
        if d.decision == "split":
            wrong = d.context not in d.kernels and far
        return Decision(d.prompt, d.decision, d.kernels, d.reason, d.scores, d.parts, d.data_class,
                        d.context, wrong, d.extra)


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
