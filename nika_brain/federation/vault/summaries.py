"""`nika_federation_summaries`: one compact summary per kernel and key (the day, by default).

`put()` is the one write path (the daily `summarize`, and the handover of issue 14 with its own keys):
the id is `<kernel>:<key>`, so a rerun replaces the summary instead of adding a second one.
`summarize()` builds the day's summary of one kernel, extractively, from that kernel's own records of
the day (the most central, not redundant ones), its journal signals and its claims, and never from
another kernel's data. Summaries are readable by every kernel: they are how kernels learn what the
others do without reading their transcripts. So a record is quoted only when its data class is the
least sensitive one with no region rule (`federation.triage.data_classes`, least sensitive first: the
record's class is the strictest of its kernel's `data_class` and of the classes whose patterns match
its text); any other record is counted by class, never quoted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from nika_brain.engine import signals
from nika_brain.errors import BrainError
from nika_brain.federation.vault import store as vstore
from nika_brain.federation.vault.query import caller_kernel
from nika_brain.federation.vault.records import check_kernel
from nika_brain.support import clock

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain

MAX_CHARS = 2000
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Summary:
    id: str
    kernel_id: str
    key: str
    text: str
    meta: dict[str, Any]

    def to_json(self) -> dict:
        return {"id": self.id, "kernel_id": self.kernel_id, "key": self.key, "text": self.text,
                "meta": self.meta}


def _clean_meta(meta: dict | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in (meta or {}).items():
        if k in ("kernel_id", "key"):
            continue
        if isinstance(v, (str, int, float, bool)):
            out[str(k)] = v
        elif v is not None:
            out[str(k)] = str(v)
    return out


def put(brain: Brain, kernel_id: str, key: str, text: str, meta: dict | None = None, *,
        now: datetime | None = None) -> Summary:
    """Write (or replace) kernel_id's summary under `key`. A kernel session writes only its own."""
    kernel = caller_kernel(kernel_id)
    if not key or not isinstance(key, str) or len(key) > 200:
        raise BrainError("a summary key must be a non-empty string of at most 200 characters")
    if not text.strip():
        raise BrainError("empty summary text")
    sid = f"{kernel}:{key}"
    m = dict(_clean_meta(meta), kernel_id=kernel, key=key, written=clock.iso(now or clock.now()))
    vec = vstore.embed(brain, [text], "passage")
    st = vstore.store(brain)
    with st.errors("summaries"), st.writer():
        vstore.summaries(brain).upsert(ids=[sid], embeddings=vec, documents=[text], metadatas=[m])
    return Summary(sid, kernel, key, text, m)


def get(brain: Brain, kernel_id: str, key: str) -> Summary | None:
    check_kernel(kernel_id)
    with vstore.store(brain).errors("summaries"):
        col = vstore.summaries(brain, create=False)
        res = col.get(ids=[f"{kernel_id}:{key}"], include=["documents", "metadatas"]) if col else {"ids": []}
    if not res["ids"]:
        return None
    return Summary(res["ids"][0], kernel_id, key, res["documents"][0], dict(res["metadatas"][0]))


def list_summaries(brain: Brain, *, kernel_id: str | None = None, day: str | None = None) -> list[Summary]:
    conds: list[dict] = []
    if kernel_id:
        conds.append({"kernel_id": check_kernel(kernel_id)})
    if day:
        conds.append({"day": day})
    where: dict | None = conds[0] if len(conds) == 1 else ({"$and": conds} if conds else None)
    with vstore.store(brain).errors("summaries"):
        col = vstore.summaries(brain, create=False)
        if col is None:
            return []   # none written yet
        res = col.get(where=where, include=["documents", "metadatas"])
    out = [Summary(i, str(m.get("kernel_id")), str(m.get("key")), d, dict(m))
           for i, d, m in zip(res["ids"], res["documents"], res["metadatas"])]
    return sorted(out, key=lambda s: (s.kernel_id, s.key))


def day_key(day: str) -> str:
    return f"day:{day}"


def check_day(day: str | None, now: datetime | None = None) -> str:
    if day is None:
        return clock.iso(now or clock.now())[:10]
    if not _DAY.match(day):
        raise BrainError(f"--day must be YYYY-MM-DD, got {day!r}")
    return day


def _first_sentences(text: str, limit: int = 240) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit]
    stop = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "))
    return cut[:stop + 1] if stop > limit // 3 else cut.rstrip() + "…"


def _classes(brain: Brain) -> list[tuple[str, list[str], bool]]:
    """(name, patterns, has a region rule) of the configured data classes, least sensitive first (the
    triage validates them; the defaults are public, internal, sensitive)."""
    raw = ((brain.config.federation.get("triage") or {}).get("data_classes")
           if isinstance(brain.config.federation.get("triage"), dict) else None)
    if not isinstance(raw, list) or not raw:
        return [("public", [], False), ("internal", [], False), ("sensitive", [], False)]
    out = []
    for item in raw:
        d = {"name": item} if isinstance(item, str) else item if isinstance(item, dict) else {}
        pats = d.get("patterns") if isinstance(d.get("patterns"), list) else []
        out.append((str(d.get("name")), [p for p in pats if isinstance(p, str)], d.get("regions") is not None))
    return out


def classifier(brain: Brain, kernel_id: str) -> Callable[[str], tuple[str, bool]]:
    """text -> (the record's data class, whether a summary may quote it), for one kernel's records."""
    from nika_brain.state import kernels
    classes = _classes(brain)
    names = [c[0] for c in classes]
    try:
        own = kernels.load_kernel(brain, kernel_id).data_class
    except BrainError:
        own = None
    floor = 0 if own is None else names.index(own) if own in names else len(names)

    def classify(text: str) -> tuple[str, bool]:
        rank = floor
        for i, (_, pats, _) in enumerate(classes):
            for p in pats:
                try:
                    if re.search(p, text):
                        rank = max(rank, i)
                except re.error:
                    rank = len(names)
        if rank >= len(names):
            return (own or "unknown"), False
        return names[rank], rank == 0 and not classes[0][2]
    return classify


def _central(ids: list[str], docs: list[str], vecs: Any, n: int) -> list[str]:
    """Up to n texts, most central first, skipping ones too close to those already taken."""
    import numpy as np
    if not ids:
        return []
    v = np.asarray(vecs, dtype=np.float32)
    centre = v.mean(axis=0)
    order = np.argsort(-(v @ centre), kind="stable")
    picked: list[int] = []
    for i in order:
        if all(float(v[i] @ v[j]) < 0.9 for j in picked):
            picked.append(int(i))
        if len(picked) == n:
            break
    return [docs[i] for i in picked]


def summarize(brain: Brain, kernel_id: str, day: str | None = None, *,
              now: datetime | None = None) -> Summary | None:
    """The day's extractive summary of one kernel (None when the kernel did nothing that day)."""
    kernel = caller_kernel(kernel_id)
    day = check_day(day, now)
    with vstore.store(brain).errors("summaries"):
        got = vstore.get_all(vstore.collection(brain, kernel, create=False), {"day": day},
                             ["documents", "embeddings", "metadatas"])
    ids = [i for i in got["ids"] if i.startswith(f"{kernel}:")]
    keep = [got["ids"].index(i) for i in ids]
    docs = [got["documents"][i] for i in keep]
    vecs = [got["embeddings"][i] for i in keep]
    lines: list[str] = []
    held: dict[str, int] = {}
    classify = classifier(brain, kernel)
    for text in _central(ids, docs, vecs, min(len(docs), 200)):
        cls, quotable = classify(text)
        if not quotable:
            held[cls] = held.get(cls, 0) + 1
        elif len(lines) < 5:
            lines.append(f"- {_first_sentences(text)}")
    if held:
        lines.append("- not quoted (records of a restricted data class): "
                     + ", ".join(f"{n} {c}" for c, n in sorted(held.items())))
    sigs = [s for s in signals.read(brain) if str(s.get("time", ""))[:10] == day
            and _about(s, kernel)]
    claims = _claims_of_day(brain, kernel, day)
    if not lines and not sigs and not claims:
        return None
    head = (f"Kernel {kernel}, {day}: {len(ids)} new vault record(s), {len(sigs)} signal(s), "
            f"{len(claims)} claim(s).")
    parts = [head]
    if lines:
        parts.append("Records:\n" + "\n".join(lines))
    if sigs:
        types: dict[str, int] = {}
        for s in sigs:
            types[str(s.get("type"))] = types.get(str(s.get("type")), 0) + 1
        parts.append("Signals: " + ", ".join(f"{t} ×{n}" for t, n in sorted(types.items())))
    if claims:
        parts.append("Claims:\n" + "\n".join(claims[:5]))
    text = "\n".join(parts)[:MAX_CHARS]
    return put(brain, kernel, day_key(day), text, {"day": day, "records": len(ids),
                                                   "signals": len(sigs), "claims": len(claims)},
               now=now)


def _about(sig: dict, kernel: str) -> bool:
    raw = sig.get("payload")
    payload: dict = raw if isinstance(raw, dict) else {}
    return kernel in (sig.get("kernel"), sig.get("kernel_id"), payload.get("kernel"),
                      payload.get("kernel_id"))


def _claims_of_day(brain: Brain, kernel: str, day: str) -> list[str]:
    """Claims opened that day by a session bound to the kernel (claims name their session)."""
    from nika_brain.state import claims, sessions
    mine = {s.id for s in sessions.list_sessions(brain) if s.kernel == kernel}
    out = []
    for c in claims.list_claims(brain):
        if c.session in mine and clock.iso(c.opened)[:10] == day:
            out.append(f"- {c.id} ({c.workflow} step {c.step}): {c.status}")
    return out


def purge(brain: Brain, kernel_id: str) -> int:
    check_kernel(kernel_id)
    st = vstore.store(brain)
    with st.errors("summaries"), st.writer():
        col = vstore.summaries(brain)
        ids = col.get(where={"kernel_id": kernel_id}, include=[])["ids"]
        if ids:
            col.delete(ids=ids)
    return len(ids)
