"""The registry of active /goals: the `nika_federation_goals` collection and the compact goals index.

One entry per kernel: its /goal, its domains (kernel.yml `tags`), its canonical example prompts, and
its policy (region, data class). Two copies:

- the Chroma collection `nika_federation_goals` (one record per kernel, the goal line's embedding,
  the text and the policy as metadata), for other tools and other machines;
- the compact index `<brain>/.nika/guarded/goals-index.npz`: the routing model of router.py
  (vectors, sub-topic centroids, thresholds, lexical tables) in one file, replaced atomically. The
  triage's hot path reads only this file (numpy), never chromadb. Its digest says whether it is
  current, not whether it is authentic (anyone who writes the file writes the digest too), so the
  file lives where no agent writes (issue 24, hole 5): `.nika/guarded/` is write-denied in the Claude
  Code sandbox of every session (claude/settings.py), refused to the file tools and to commands by
  the hook (a state folder), and absent from a kernel's bwrap sandbox (its `.nika/` is a tmpfs). An
  agent's own process that cannot save it routes with what it built, in memory.

`refresh(brain)` rebuilds both when the goals changed (a digest of every entry, the model id and the
calibration settings), under one inter-process mutex so two writers never interleave, and announces
the new registry on `nika:federation:goals`. `kernel spawn`, `kill` and `triage calibrate` call it;
`current(brain)` notices an edited kernel.yml by the digest and rebuilds the index (not the
collection: that would import chromadb on the hot path; the next refresh syncs it).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nika_brain.errors import BrainError, Invalid
from nika_brain.federation.embedding import Kind
from nika_brain.federation.triage import everyday, vocabulary
from nika_brain.federation.triage.corrections import Correction
from nika_brain.federation.triage.router import MISS_RATE, Model

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain
    from nika_brain.federation.embedding import Embedder

COLLECTION = "nika_federation_goals"
INDEX_NAME = "goals-index.npz"
FORMAT = 8  # 2: background-calibrated scores, corrections (issue 21); 3: sub-topic centroids;
            # 4: the everyday background competes (router.py, 5); 5: elided words stemmed ("état"), the
            # shipped vocabulary of work domains (vocabulary.py); 6: the lexical share weighs 0.2 (an
            # index's background statistics were taken with the weight it was built with); 7: a
            # vocabulary term may wrap onto the next line of vocabulary.txt (nine were cut in two);
            # 8: a text votes for a work domain from 0.39 (vocabulary.VOTE_SIMILARITY), not 0.4
ROUTED_STATUSES = ("starting", "active", "paused", "dead")  # a dead kernel's prompts queue for it
DEFAULT_KERNEL = "generalist"
EMBED_KIND: Kind = everyday.EMBED_KIND  # every goals index embeds its texts and the background so


@dataclass(frozen=True)
class Entry:
    id: str
    goal: str
    domains: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    region: str | None = None
    data_class: str | None = None

    def goal_line(self) -> str:
        return f"{self.goal} ({', '.join(self.domains)})" if self.domains else self.goal


@dataclass(frozen=True)
class DataClass:
    name: str
    patterns: tuple[str, ...] = ()        # regexes that put a prompt in this class
    regions: tuple[str, ...] | None = None  # regions allowed to receive it (None: any)


DEFAULT_CLASSES = (DataClass("public"), DataClass("internal"), DataClass("sensitive"))


@dataclass(frozen=True)
class Settings:
    default: str = DEFAULT_KERNEL
    miss_rate: float = MISS_RATE
    split: bool = True
    calibration: str | None = None        # labelled JSONL refining the thresholds
    data_classes: tuple[DataClass, ...] = DEFAULT_CLASSES
    vocabulary: bool = True               # each kernel takes its work domains' words (vocabulary.py)


def _bad(key: str, msg: str) -> BrainError:
    return Invalid(msg, file="nika-brain.yml", key=f"federation.triage.{key}")


def settings(brain: Brain | None) -> Settings:
    raw = (brain.config.federation.get("triage") if brain is not None else None) or {}
    if not isinstance(raw, dict):
        raise Invalid("must be a mapping", file="nika-brain.yml", key="federation.triage")
    known = ("default", "miss_rate", "split", "calibration", "data_classes", "vocabulary")
    for key in raw:
        if key not in known:
            raise _bad(str(key), f"unknown key (expected one of: {', '.join(known)})")
    default = raw.get("default", DEFAULT_KERNEL)
    if not isinstance(default, str) or not default:
        raise _bad("default", "must be a kernel id")
    miss = raw.get("miss_rate", MISS_RATE)
    if isinstance(miss, bool) or not isinstance(miss, (int, float)) or not 0 < miss < 0.5:
        raise _bad("miss_rate", "must be a number between 0 and 0.5 (share of in-scope prompts "
                   "allowed to fall back)")
    split = raw.get("split", True)
    if not isinstance(split, bool):
        raise _bad("split", "must be true or false")
    vocab = raw.get("vocabulary", True)
    if not isinstance(vocab, bool):
        raise _bad("vocabulary", "must be true or false (each kernel takes its work domains' words)")
    cal = raw.get("calibration")
    if cal is not None and not isinstance(cal, str):
        raise _bad("calibration", "must be a path to a JSONL file")
    classes: tuple[DataClass, ...] = DEFAULT_CLASSES
    if "data_classes" in raw:
        import re
        items = raw["data_classes"]
        if not isinstance(items, list) or not items:
            raise _bad("data_classes", "must be a non-empty list, least sensitive first")
        out = []
        for i, item in enumerate(items):
            if isinstance(item, str):
                item = {"name": item}
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise _bad(f"data_classes[{i}]", "each class is a name or {name, patterns, regions}")
            pats, regions = item.get("patterns", []), item.get("regions")
            if not isinstance(pats, list) or not all(isinstance(p, str) for p in pats):
                raise _bad(f"data_classes[{i}].patterns", "must be a list of regular expressions")
            for p in pats:
                try:
                    re.compile(p)
                except re.error as exc:
                    raise _bad(f"data_classes[{i}].patterns", f"bad regular expression {p!r}: {exc}") from exc
            if regions is not None and (not isinstance(regions, list)
                                        or not all(isinstance(r, str) for r in regions)):
                raise _bad(f"data_classes[{i}].regions", "must be a list of region names")
            out.append(DataClass(item["name"], tuple(pats), None if regions is None else tuple(regions)))
        classes = tuple(out)
    return Settings(default, float(miss), split, cal, classes, vocab)


def placement_regions(brain: Brain) -> dict[str, str]:
    """machine id -> the region it declares: this machine's own (.nika/machine.yml), and the others'
    as their daemons registered them on a shared (Redis) bus (federation/kernels/remote.py)."""
    from nika_brain.state import machine
    here = machine.load(brain)
    out: dict[str, str] = {}
    try:
        from nika_brain import bus
        if bus.backend_name(brain) == "redis":
            reg = bus.open_bus(brain).get("machines") or {}
            out.update({m: v["region"] for m, v in reg.items() if isinstance(v, dict) and v.get("region")})
    except BrainError:
        pass  # no bus: only this machine's placement is known
    if here.region:
        out[here.id] = here.region
    return out


def entries_from_kernels(brain: Brain) -> list[Entry]:
    """The routed kernels; a kernel's region is where it actually runs (its machine's declared
    region) when that is known, its record's label otherwise (a cluster kernel: its node affinity)."""
    from nika_brain.state.kernels import list_kernels
    out = []
    placed: dict[str, str] | None = None
    for k in list_kernels(brain):
        if k.status not in ROUTED_STATUSES:
            continue
        region = getattr(k, "region", None)
        if k.machine and k.runtime != "kubernetes":
            placed = placement_regions(brain) if placed is None else placed
            region = placed.get(k.machine, region)
        out.append(Entry(k.id, k.goal, tuple(k.tags), tuple(getattr(k, "examples", ()) or ()),
                         region, getattr(k, "data_class", None)))
    return out


# ---- the index ------------------------------------------------------------------------------------

@dataclass
class Index:
    model: Model
    entries: list[Entry]
    default: str
    model_id: str
    digest: str
    report: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    def entry(self, kernel_id: str) -> Entry | None:
        return next((e for e in self.entries if e.id == kernel_id), None)


def _file_digest(path: str | None, root: Path | None) -> str | None:
    if not path:
        return None
    p = Path(path)
    if not p.is_absolute() and root is not None:
        p = root / p
    try:
        return hashlib.sha256(p.read_bytes()).hexdigest()
    except OSError as exc:
        raise _bad("calibration", f"cannot read {p}: {exc.strerror}") from exc


def digest(entries: list[Entry], model_id: str, st: Settings, cal_digest: str | None,
           fixes: list[Correction] | None = None) -> str:
    doc = {"format": FORMAT, "model": model_id, "miss_rate": st.miss_rate, "default": st.default,
           "vocabulary": vocabulary.digest() if st.vocabulary else None,
           "calibration": cal_digest, "entries": [asdict(e) for e in sorted(entries, key=lambda e: e.id)],
           "corrections": [[c.id, c.prompt, c.kernel] for c in (fixes or [])]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _with_vocabulary(embedder: Embedder, bgv, own, texts: list[str], owner: list[int], calib: list[bool]):
    """Each kernel's texts extended by the terms of the work domains they vote for (vocabulary.py),
    as domain texts (not canonical); `texts`, `owner` and `calib` grow in place. Returns the vectors
    and, per kernel, the names of its domains."""
    import numpy as np

    from nika_brain.federation.triage.router import center
    terms = vocabulary.terms()
    tv = everyday.vectors(embedder, EMBED_KIND, terms, vocabulary.SHIPPED)
    mean = bgv.mean(axis=0)
    centred_terms, centred_own, owners = center(tv, mean), center(own, mean), np.array(owner, dtype=int)
    taken: dict[int, list[str]] = {}
    rows: list[int] = []
    for k in sorted(set(owner)):
        picked, mine = vocabulary.attach(centred_own[owners == k], centred_terms)
        texts.extend(terms[t] for t in mine)
        owner.extend([k] * len(mine))
        calib.extend([False] * len(mine))
        rows.extend(mine)
        if picked:
            taken[k] = [vocabulary.domains()[j].name for j in picked]
    return (np.vstack([own, tv[rows]]) if rows else own), taken


def build(entries: list[Entry], embedder: Embedder, st: Settings, *,
          labelled: list[tuple[str, str | None]] | None = None, digest_: str = "",
          fixes: list[Correction] | None = None) -> Index:
    """Embed every entry's texts and the everyday background (shipped, or cached), fit and calibrate the
    routing model. The default kernel takes part only through examples of its own."""
    import numpy as np

    from nika_brain.federation.triage import router
    entries = sorted(entries, key=lambda e: e.id)
    ids = [e.id for e in entries]
    if len(set(ids)) != len(ids):
        raise BrainError("two goals entries share one kernel id")
    where = {k: i for i, k in enumerate(ids)}
    fixes = [c for c in (fixes or []) if c.kernel is None or c.kernel in where]
    texts: list[str] = []
    owner: list[int] = []
    calib: list[bool] = []
    for k, e in enumerate(entries):
        if e.id == st.default and not e.examples:
            continue  # the generalist is where nothing else goes, not a topic of its own
        for text, canonical in ([(e.goal_line(), False)] + [(d, False) for d in e.domains]
                                + [(x, True) for x in e.examples]):
            texts.append(text)
            owner.append(k)
            calib.append(canonical)
    for c in fixes:
        if c.kernel is not None:  # a corrected prompt is one more canonical prompt of its kernel
            texts.append(c.prompt)
            owner.append(where[c.kernel])
            calib.append(True)
    dim = embedder.dim
    bgv = everyday.vectors(embedder, EMBED_KIND)   # shipped embedded for the default model
    extra = texts + [c.prompt for c in fixes]
    vecs = embedder.embed(extra, kind=EMBED_KIND) if extra else np.zeros((0, dim), np.float32)
    n = len(texts)
    own, fixed = vecs[:n], vecs[n:]
    taken: dict[int, list[str]] = {}
    if st.vocabulary and n:
        own, taken = _with_vocabulary(embedder, bgv, own, texts, owner, calib)
    shipped = np.arange(len(texts)) >= n    # the vocabulary's words come after the kernels' own texts
    model, report = router.fit(ids, own, np.array(owner, dtype=int), texts, np.array(calib, dtype=bool),
                               bgv, miss_rate=st.miss_rate,
                               corrections=fixed if fixes else None,
                               corr_owner=[-1 if c.kernel is None else where[c.kernel] for c in fixes],
                               corr_ids=[c.id for c in fixes], shipped=shipped)
    if not entries:
        report["calibrated"] = False
    report["corrections"] = len(fixes)
    for k, kid in enumerate(ids):
        if kid in report["kernels"]:
            report["kernels"][kid]["vocabulary"] = taken.get(k, [])
    if labelled and entries:
        known = [(t, e) for t, e in labelled if e is None or e in where or e == st.default]
        qv = embedder.embed([t for t, _ in known], kind=EMBED_KIND)
        z, _ = model.score(qv, [t for t, _ in known])
        exp = [where.get(e) if e is not None and e != st.default else None for _, e in known]
        report["refined_offset"] = router.refine(model, z, exp)
        report["labelled"] = len(known)
        for k, kid in enumerate(ids):
            report["kernels"][kid]["threshold"] = round(float(model.thresholds[k]), 4)
    del dim
    return Index(model, entries, st.default, embedder.model_id, digest_, report)


ARRAYS = ("mean", "examples", "owner", "centroids", "subs", "sub_owner", "loc", "scale", "thresholds",
          "corrections", "corr_owner", "everyday", "everyday_mask")


def index_path(brain: Brain) -> Path:
    return brain.guarded_dir / INDEX_NAME   # out of every agent's reach (Brain.guarded_dir)


def save(index: Index, path: Path) -> None:
    import numpy as np
    m = index.model
    meta = {
        "format": FORMAT, "kernels": m.kernels, "default": index.default, "model_id": index.model_id,
        "digest": index.digest, "entries": [asdict(e) for e in index.entries],
        "vocab": [sorted(v) for v in m.vocab], "corr_ids": m.corr_ids,
        "miss_rate": m.miss_rate, "calibrated": m.calibrated,
        "report": index.report,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".goals-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **{k: getattr(m, k) for k in ARRAYS},
                     meta=np.array(json.dumps(meta, ensure_ascii=False)))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    index.path = path


_LOADED: dict[str, tuple[tuple[int, int, int], Index]] = {}   # path -> (its stat, the index read from it)


def load(path: Path) -> Index | None:
    """The saved index, or None when there is none; a damaged file is one clear error. A file read
    before and unchanged since (same inode, size and modification time: a save replaces the file) is
    not read again: the daemon looks at the index on every prompt, and reading it cost more than the
    rest of the decision but the embedding (~1.5 of 3.5 ms)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    sig = (st.st_ino, st.st_size, st.st_mtime_ns)
    seen = _LOADED.get(str(path))
    if seen is not None and seen[0] == sig:
        return replace(seen[1], report=dict(seen[1].report))
    index = _read(path)
    if index is not None:
        _LOADED[str(path)] = (sig, index)
        return replace(index, report=dict(index.report))
    return None


def _read(path: Path) -> Index | None:
    import numpy as np
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                return None  # an older layout: rebuilt on the next refresh
            arrays = {k: z[k] for k in ARRAYS}
    except (OSError, ValueError, KeyError) as exc:
        raise BrainError(f"{path}: damaged goals index ({exc}); run `nika-brain triage calibrate`") from exc
    model = Model(meta["kernels"], vocab=[frozenset(v) for v in meta["vocab"]], corr_ids=meta["corr_ids"],
                  miss_rate=meta["miss_rate"], calibrated=meta["calibrated"], **arrays)
    entries = [Entry(e["id"], e["goal"], tuple(e["domains"]), tuple(e["examples"]), e["region"],
                     e["data_class"]) for e in meta["entries"]]
    return Index(model, entries, meta["default"], meta["model_id"], meta["digest"],
                 meta.get("report", {}), path)


def read_labelled(path: Path) -> list[tuple[str, str | None]]:
    """A labelled calibration file: JSONL lines {"text": ..., "expected": <kernel id> | null}."""
    from nika_brain.federation.triage.queries import read_queries
    return [(q.text, q.expected[0] if q.expected else None) for q in read_queries(path)
            if q.expected is None or len(q.expected) == 1]


# ---- refresh: build, save, sync, announce ----------------------------------------------------------

def _state(brain: Brain, embedder: Embedder) -> tuple[list[Entry], Settings, str, Path | None,
                                                     list[Correction]]:
    from nika_brain.federation.triage.corrections import load_all
    st = settings(brain)
    entries = entries_from_kernels(brain)
    fixes = load_all(brain)
    cal_path = None
    if st.calibration:
        cal_path = Path(st.calibration)
        if not cal_path.is_absolute():
            cal_path = brain.root / cal_path
    dig = digest(entries, embedder.model_id, st, _file_digest(st.calibration, brain.root), fixes)
    return entries, st, dig, cal_path, fixes


def refresh(brain: Brain, *, force: bool = False, store: bool = True, publish: bool = True,
            labelled: Path | None = None) -> Index:
    """Rebuild the goals index (and the collection) when the goals changed; returns the index."""
    from nika_brain.federation.embedding import open_embedder
    embedder = open_embedder(brain)
    path = index_path(brain)
    with brain.mutex("federation-goals"):
        entries, st, dig, cal_path, fixes = _state(brain, embedder)
        if labelled is not None:
            # a one-off refinement (`triage calibrate --labelled`): kept until the goals change;
            # `federation.triage.calibration` makes it permanent
            cal_path = labelled
        old = load(path)
        changed = force or old is None or old.digest != dig
        if changed or old is None:
            lab = read_labelled(cal_path) if cal_path else None
            index = build(entries, embedder, st, labelled=lab, digest_=dig, fixes=fixes)
            try:
                save(index, path)
            except OSError as exc:   # an agent's sandbox denies the folder: route with this one
                import sys
                print(f"nika-brain: goals index not saved ({path}: {exc.strerror or exc})", file=sys.stderr)
        else:
            index = old
        if store:
            sync_store(brain, index, embedder)
    if changed and publish:
        announce(brain, index)
    return index


def current(brain: Brain, *, rebuild: bool = True) -> Index:
    """The index to route with; rebuilt (without touching Chroma) when a kernel.yml changed."""
    path = index_path(brain)
    index = load(path)
    if index is not None and not rebuild:
        return index
    if index is not None:
        from nika_brain.federation.embedding import embedder_config
        cfg = embedder_config(brain)
        # the model id needs the model; only compare when it is already known to match the config
        from nika_brain.federation.triage.corrections import load_all
        entries, st = entries_from_kernels(brain), settings(brain)
        dig = digest(entries, index.model_id, st, _file_digest(st.calibration, brain.root), load_all(brain))
        if dig == index.digest and cfg.get("backend", "e5") == _backend_of(index.model_id):
            return index
    return refresh(brain, store=False)


def _backend_of(model_id: str) -> str:
    return "onnx" if model_id.startswith("onnx/") else "e5"


def sync_store(brain: Brain, index: Index, embedder: Embedder) -> None:
    """Make `nika_federation_goals` hold exactly one record per indexed kernel."""
    from nika_brain.federation.vault.chroma import open_store
    st = open_store(brain)
    ids = [e.id for e in index.entries]
    with st.errors(f"chroma collection {COLLECTION}"), st.writer():
        col = st.collection(COLLECTION)  # taken under the writer lock, never from a stale client
        existing = set(col.get(include=[])["ids"])
        gone = sorted(existing - set(ids))
        if gone:
            col.delete(ids=gone)
        if not ids:
            return
        vecs = embedder.embed([e.goal_line() for e in index.entries], kind=EMBED_KIND)
        metas = []
        for k, e in enumerate(index.entries):
            meta: dict[str, Any] = {"kernel_id": e.id, "goal": e.goal, "domains": ", ".join(e.domains),
                                    "examples": len(e.examples),
                                    "threshold": float(index.model.thresholds[k]),
                                    "model_id": index.model_id, "digest": index.digest}
            if e.region:
                meta["region"] = e.region
            if e.data_class:
                meta["data_class"] = e.data_class
            metas.append(meta)
        docs = ["\n".join([e.goal_line(), *e.examples]) for e in index.entries]
        col.upsert(ids=ids, embeddings=[v.tolist() for v in vecs], documents=docs, metadatas=metas)


def announce(brain: Brain, index: Index) -> None:
    """Publish the registry of active goals on nika:federation:goals (best effort)."""
    from nika_brain.bus import GOALS, open_bus
    try:
        open_bus(brain).publish(GOALS, {
            "event": "goals", "digest": index.digest, "model_id": index.model_id,
            "kernels": [{"id": e.id, "goal": e.goal, "threshold": round(float(index.model.thresholds[k]), 4)}
                        for k, e in enumerate(index.entries)]})
    except BrainError:
        pass  # the index is rebuilt and saved; a bus that is down must not undo that
