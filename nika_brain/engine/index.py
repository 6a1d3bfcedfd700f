"""BRAIN-INDEX.md: the generated overview of a brain (claims, locks, gates, breakers, workflows, kernels).

Two properties matter more than anything else here:

* Deterministic: the same state gives the same bytes, so regenerating with no change leaves the file
  (and git) untouched. Nothing reads the wall clock: ages are measured against the newest time found
  in the state itself, and the header says so. Every list is sorted.
* Fast on a large brain: claims and gates accumulate by the thousand and are mostly closed, hence
  immutable. Their few summary fields are cached in .nika/cache/index.json per file name, with the
  file's (mtime_ns, size, ctime_ns) and a hash of its bytes. The stat triple matching means unchanged
  (ctime cannot be set back by a user, unlike mtime); when it does not match, as after a copy or a
  fresh checkout, the file is read and its hash decides, so only a changed content is parsed again.
  As in git's "racy" rule, a file changed in the last seconds (the file system's clock is coarse: a
  second write in the same tick keeps the stat) is always checked by its hash.
* Fast cold (no cache, as after a fresh clone): a claim in the shape `claims` writes is summarized
  straight from its text by `indexfast` (exact, or declined to the full loader, which names any
  error); each file is read once with os.read of its stat size.
* Fast when nothing changed (a git hook on a commit that touched no state, the pre-commit hook of the
  orchestrator's state commit right after its transition rendered, `index` run twice): the text is a
  function of the state files alone, so .nika/cache/index-text.json keeps the last text with a
  fingerprint of every input (the stat of each file the model reads, listed by `_inputs`, plus the
  template, the config and the rendering code) and, for each one changed in the racy window then, the
  hash of its bytes; the same stat of every input and the same bytes of those gives the same text
  without a parse, a render or Jinja's import. (A remembered text could only be given for other
  bytes than it was made from if a file went A, B, A on the same inode within one tick of the file
  system's clock: the stat would not show it, the bytes would be A's again.)
  Both caches are data an agent could write, as the state files are: never code, and a lie in them
  is no worse than the same lie written into the state or into BRAIN-INDEX.md itself.

The Markdown comes from a Jinja2 template; a brain may point `index_template` in nika-brain.yml at its
own (rendered in a sandbox, with the variables documented at the top of the default template).
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from nika_brain import __version__
from nika_brain.brain import CONFIG_NAME, Brain
from nika_brain.errors import BrainError

if TYPE_CHECKING:
    from datetime import datetime

    from nika_brain.state import claims, gates, workflows

# The state loaders, clock and Jinja are imported where they are used: when the text is remembered
# (nothing changed) none of them is needed.

TEMPLATE_NAME = "BRAIN-INDEX.md.j2"
_PACKAGE_TEMPLATES = Path(__file__).parent.parent / "templates"
_CACHE_VERSION = 2
_RACY_NS = 3_000_000_000  # a file changed less than this ago is verified by its content hash

# Step states of the Mermaid chart and their colours.
STATE_STYLES = {
    "done": "fill:#2da44e,stroke:#1a7f37,color:#ffffff",
    "partial": "fill:#d4a72c,stroke:#9a6700,color:#000000",
    "accepted": "fill:#d4a72c,stroke:#cf222e,color:#000000",
    "failed": "fill:#cf222e,stroke:#a40e26,color:#ffffff",
    "running": "fill:#0969da,stroke:#0550ae,color:#ffffff",
    "gated": "fill:#8250df,stroke:#6639ba,color:#ffffff",
    "blocked": "fill:#bc4c00,stroke:#953800,color:#ffffff",
    "skipped": "fill:#eaeef2,stroke:#8c959f,color:#57606a,stroke-dasharray: 4 2",
    "pending": "fill:#ffffff,stroke:#8c959f,color:#24292f",
}


# ---- cached summaries of the accumulating kinds -------------------------------------------------

def _claim_summary(c: claims.Claim) -> dict:
    from nika_brain.support import clock
    newest = c.closed or c.opened
    return {"id": c.id, "workflow": c.workflow, "step": c.step, "scope": list(c.scope),
            "status": c.status, "opened": clock.iso(c.opened),
            "closed": clock.iso(c.closed) if c.closed else None,
            "result": c.result.status if c.result else None, "newest": newest.timestamp()}


def _gate_summary(g: gates.Gate) -> dict:
    from nika_brain.support import clock
    newest = g.decided_at or g.created
    return {"id": g.id, "workflow": g.workflow, "step": g.step, "claim": g.claim, "message": g.message,
            "reason": g.reason, "status": g.status, "created": clock.iso(g.created),
            "decided_at": clock.iso(g.decided_at) if g.decided_at else None, "newest": newest.timestamp()}


_CACHED: dict[str, tuple[str, Callable[[Any], dict]]] = {
    "claims": ("claim", _claim_summary),
    "gates": ("gate", _gate_summary),
}


def _summarizer(brain: Brain, kind: str) -> Callable[[str, str, bytes | None], dict]:
    """summarize(name, path, bytes) for the files of `kind`: the summary of a claim or gate from the
    bytes already read for its hash (read once, parsed once), with the loader's own checks and
    messages. A claim in the shape `claims` writes takes `indexfast` (the same summary, without the
    generic YAML read, validator and Claim); any other goes the full way, which also names what is
    wrong. (Made once per folder: its imports are not paid per file.)"""
    from nika_brain.engine import indexfast
    from nika_brain.state import claims, gates
    from nika_brain.support import yamlsafe
    from nika_brain.support.fsio import decode_text
    kind_name, summary_of = _CACHED[kind]
    load_path = claims.load_path if kind_name == "claim" else gates.load_path
    fast = indexfast.claim_summary if kind_name == "claim" else None
    limit = yamlsafe.MAX_BYTES

    def summarize(name: str, path: str, data: bytes | None) -> dict:
        if data is None:
            return summary_of(_load(brain, kind_name, Path(path)))
        try:
            text = decode_text(data, path, limit=limit)
            if fast is not None:
                row = fast(text, name[:-4])   # name: <stem>.yml (_listing)
                if row is not None:
                    return row
            record = load_path(Path(path), yamlsafe.loads(text, path))
        except BrainError as exc:
            exc.file = brain.rel(path) or exc.file or path
            raise
        return summary_of(record)
    return summarize


def _load(brain: Brain, kind: str, path: Path):
    from nika_brain.state.validate import load
    try:
        return load(kind, path)
    except BrainError as exc:
        exc.file = brain.rel(path) or exc.file  # brain-relative: short, and the same on every machine
        raise


def _load_all(brain: Brain, folder: Path, kind: str, bad: list | None = None) -> list:
    """Every valid record of the folder; an invalid one is named in `bad` (the index still shows the rest)."""
    from nika_brain.state import listing
    good, errors = listing.load_each(brain, folder, lambda p: _load(brain, kind, p))
    if bad is not None:
        bad += errors
    elif errors:
        raise errors[0]
    return good


_READ_CAP = 1 << 21   # more than any loader takes (yamlsafe.MAX_BYTES): decode_text says "too large"


def _read(path: str, size: int) -> tuple[bytes | None, str | None]:
    """(bytes, their hash) of a state file of `size` bytes by its stat (at most _READ_CAP of them);
    (None, None) when unreadable or gone: the loader says why. os.read of the size the stat gave,
    not a buffered read(_READ_CAP), which allocates 2 MiB per file (a third of a cold index's CPU
    at 10,000 claims); a file grown since its stat is read on to its end or the cap."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # never wait on a FIFO swapped in
    except OSError:
        return None, None
    try:
        want = min(max(size, 0) + 1, _READ_CAP)
        data = os.read(fd, want)
        if len(data) == want and want < _READ_CAP:   # grown since the stat: read on
            parts = [data]
            total = len(data)
            while total < _READ_CAP:
                more = os.read(fd, min(1 << 16, _READ_CAP - total))
                if not more:
                    break
                parts.append(more)
                total += len(more)
            data = b"".join(parts)
    except OSError:
        return None, None
    finally:
        os.close(fd)
    return data, hashlib.blake2b(data, digest_size=16).hexdigest()


# The summary cache this process last read or wrote, by path: (its stat, its data). A transition asks
# for the claims several times (first step, adoption, preflight); the file is parsed once.
_LOADED: dict[str, tuple[tuple[int, int, int, int], dict[str, dict]]] = {}


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class _Cache:
    """Per kind: {file name: [mtime_ns, size, ctime_ns, content hash, summary]}."""

    def __init__(self, brain: Brain):
        self.brain = brain
        self.path = brain.state_dir / "cache" / "index.json"
        self.data: dict[str, dict] = {}
        self.dirty = False
        try:
            st = os.stat(self.path)
            seen = _LOADED.get(str(self.path))
            if seen is not None and seen[0] == _stat_key(st):
                self.data = dict(seen[1])  # this process read or wrote these bytes: not parsed again
                return
            raw = json.loads(self.path.read_bytes())
            if raw.get("version") == _CACHE_VERSION and raw.get("nika") == __version__:
                self.data = {k: v for k, v in raw.get("kinds", {}).items() if isinstance(v, dict)}
                # Each entry is checked against its own file's stat or bytes: data kept past a rewrite
                # by another process costs a re-read, never a stale summary.
                _LOADED[str(self.path)] = (_stat_key(st), dict(self.data))
        except (OSError, ValueError, AttributeError):
            self.data = {}  # missing or damaged: it is only a cache, rebuild it

    def summaries(self, folder: Path, kind: str, bad: list | None = None,
                  listing: list[tuple[str, str, os.stat_result]] | None = None) -> list[dict]:
        old = self.data.get(kind, {})
        new: dict[str, list] = {}
        settled = time.time_ns() - _RACY_NS
        summarize = _summarizer(self.brain, kind)
        for name, path, st in _listing(folder) if listing is None else listing:
            if not stat.S_ISREG(st.st_mode):
                continue
            key = [st.st_mtime_ns, st.st_size, st.st_ctime_ns]
            if max(st.st_mtime_ns, st.st_ctime_ns) >= settled:
                key = [-1, -1, -1]  # too recent to trust the stat: the hash decides next time too
            hit = old.get(name)
            good = isinstance(hit, list) and len(hit) == 5 and isinstance(hit[4], dict)
            if good and hit[:3] == key and key[0] != -1:
                new[name] = hit
                continue
            data, digest = _read(path, st.st_size)
            if good and digest is not None and hit[3] == digest:
                new[name] = key + hit[3:]  # the same bytes (a copy, a fresh checkout): not parsed again
                if hit[:3] == key:
                    continue  # a file still in the racy window, unchanged: nothing new to save
            else:
                try:
                    new[name] = key + [digest, summarize(name, path, data)]
                except BrainError as exc:
                    if bad is None:
                        raise
                    bad.append(exc)  # named in the index, never cached
                    continue
            self.dirty = True
        if new.keys() != old.keys():
            self.dirty = True
        self.data[kind] = new
        return [new[n][4] for n in sorted(new)]

    def save(self) -> None:
        if not self.dirty:
            return
        # In listing (name) order already: no sort_keys (a tenth of a cold index at 10,000 claims).
        text = json.dumps({"version": _CACHE_VERSION, "nika": __version__, "kinds": self.data},
                          separators=(",", ":"), check_circular=False)  # plain data, no cycles
        try:
            from nika_brain.support.fsio import atomic_write
            atomic_write(self.path, text, fsync=False)  # disposable: no need to pay for fsync
            # A file of its own (atomic_write renames a new inode in): its stat names these bytes.
            _LOADED[str(self.path)] = (_stat_key(os.stat(self.path)), dict(self.data))
        except OSError:
            _LOADED.pop(str(self.path), None)  # a read-only state folder only costs speed


def _listing(folder: Path) -> list[tuple[str, str, os.stat_result]]:
    """(name, path, stat) of the folder's *.yml files (not dot files), by name; one removed while we
    looked is not part of this state."""
    out = []
    try:
        entries = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return out
    with entries:
        for de in entries:
            name = de.name
            if name.endswith(".yml") and not name.startswith("."):
                try:
                    out.append((name, de.path, de.stat()))
                except FileNotFoundError:
                    continue
    out.sort()
    return out


_CODE = ("index.py", "../state/runs.py", "../state/workflows.py", "../state/kernels.py",
         "../support/clock.py")   # the rendering code, for a checkout edited in place


def _inputs(brain: Brain) -> tuple[list[Path], list[Path]]:
    """(folders of *.yml, single files) that `model` and `render` read: the fingerprint covers each
    (tests/engine/test_index_memo.py holds this list to every file a render opens)."""
    folders = [brain.claims_dir, brain.gates_dir, brain.locks_dir, brain.breakers_dir, brain.runs_dir,
               brain.workflows_dir, brain.root / "registry" / "handovers",
               brain.root / "proposals", brain.grants_dir]
    files = [brain.root / CONFIG_NAME, brain.journal_dir / "signals.jsonl"]
    try:
        files += [brain.kernels_dir / n / "kernel.yml" for n in sorted(os.listdir(brain.kernels_dir))]
    except (FileNotFoundError, NotADirectoryError):
        pass
    files += [Path(__file__).parent / c for c in _CODE]
    return folders, files


@dataclass(frozen=True)
class _Print:
    """The fingerprint of the inputs: a digest of the stat of every one, and the ones changed in the
    racy window (path, size), whose stat may not show a second change in the same tick; the paths a
    remembered text may name (each single input, each folder of inputs)."""
    digest: str
    racy: tuple[tuple[str, int], ...]
    files: frozenset[str]
    folders: frozenset[str]


def _fingerprint(brain: Brain, template: Path, listings: dict[Path, list]) -> _Print:
    """The stat of every input (fills `listings` for the render that may follow)."""
    settled = time.time_ns() - _RACY_NS
    h = hashlib.blake2b(digest_size=20)
    h.update(f"{_CACHE_VERSION}\0{__version__}\0{brain.root}\0{template}\0".encode())
    folders, files = _inputs(brain)
    racy: list[tuple[str, int]] = []
    for folder in folders:
        rows = listings[folder] = _listing(folder)
        h.update(f"\1{folder.name}".encode())
        h.update("".join([f"{name}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_size}\0{st.st_ctime_ns}\0{st.st_mode}\n"
                          for name, _, st in rows]).encode())
        racy += [(path, st.st_size) for _, path, st in rows if st.st_mtime_ns >= settled or st.st_ctime_ns >= settled]
    for path in (*files, template):
        try:
            st = os.stat(path)
        except OSError:
            h.update(f"\2{path}\0-\n".encode())
            continue
        h.update(f"\2{path}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_size}\0{st.st_ctime_ns}\n".encode())
        if st.st_mtime_ns >= settled or st.st_ctime_ns >= settled:
            racy.append((str(path), st.st_size))
    return _Print(h.hexdigest(), tuple(racy), frozenset(map(str, (*files, template))), frozenset(map(str, folders)))


def _memo_path(brain: Brain) -> Path:
    return brain.state_dir / "cache" / "index-text.json"


def _memo(brain: Brain, fingerprint: _Print, strict: bool) -> str | None:
    """The remembered text when every input has the stat it had then, and each input that was in the
    racy window then still has the bytes it had (the same stat does not prove them)."""
    try:
        raw = json.loads(_memo_path(brain).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("fingerprint") != fingerprint.digest \
            or not isinstance(raw.get("text"), str) or not isinstance(raw.get("racy"), dict):
        return None
    if strict and raw.get("clean") is not True:
        return None  # an invalid file was listed: strict must fail on it, so render again
    sizes = dict(fingerprint.racy)
    for path, digest in raw["racy"].items():
        # Only an input's own path (the memo is data an agent could write: it names nothing else to read).
        if path not in sizes and path not in fingerprint.files and str(Path(path).parent) not in fingerprint.folders:
            return None
        size = sizes.get(path)
        if size is None:
            try:
                size = os.stat(path).st_size
            except OSError:
                return None
        if _read(path, size)[1] != digest:
            return None
    if set(sizes) < set(raw["racy"]):
        # Inputs have left the racy window with the bytes they had: their stat alone answers from now
        # on (a memo written just after a brain was built would otherwise re-hash all of it each run).
        _remember(brain, fingerprint, {p: raw["racy"][p] for p in sizes}, raw["text"], raw.get("clean") is True)
    return raw["text"]


def _digests(fingerprint: _Print) -> dict[str, str | None]:
    """The hash of each input in the racy window, read before the render reads it."""
    return {path: _read(path, size)[1] for path, size in fingerprint.racy}


def _remember(brain: Brain, fingerprint: _Print, racy: dict[str, str | None], text: str, clean: bool) -> None:
    from nika_brain.support.fsio import atomic_write
    if any(d is None for d in racy.values()):
        return  # an input gone or unreadable while the render read: nothing to remember it by
    with contextlib.suppress(OSError):  # a read-only state folder only costs speed
        atomic_write(_memo_path(brain), json.dumps({"fingerprint": fingerprint.digest, "racy": racy,
                                                    "clean": clean, "text": text}), fsync=False)


def claim_summaries(brain: Brain) -> list[dict]:
    """Every claim's summary (id, workflow, step, scope, status, opened, closed, result) from the index
    cache: a claim file is parsed again only when it changed. The orchestrator's transitions read the
    claims through this, once, instead of parsing every claim file for each question."""
    with _no_gc():
        cache = _Cache(brain)
        rows = cache.summaries(brain.claims_dir, "claims")
        cache.save()
    return rows


@contextlib.contextmanager
def _no_gc():
    """The cyclic garbage collector paused: reading 10,000 summaries makes ~100,000 containers, none
    of them in a cycle, and the collections they trigger cost 4 % of a cold index for nothing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ---- the model the template renders ------------------------------------------------------------

def _t(text: str | None) -> datetime | None:
    from nika_brain.support import clock
    return clock.parse(text) if text else None


def _label(text: str) -> str:
    # Mermaid labels sit inside double quotes; entity codes keep them intact.
    return (text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;")
            .replace(">", "#gt;").replace("\n", " "))


def _mermaid(wf: workflows.Workflow, states: dict[str, str]) -> str:
    lines = ["flowchart LR"]
    for i, s in enumerate(wf.chain):
        scope = ", ".join(s.scope)
        lines.append(f'  s{i}["{_label(f"{s.id} · {s.type}")}<br/>{_label(scope)}'
                     f'<br/><i>{states[s.id]}</i>"]:::{states[s.id]}')
    for i in range(len(wf.chain) - 1):
        lines.append(f"  s{i} --> s{i + 1}")
    used = sorted(set(states.values()), key=list(STATE_STYLES).index)
    for state in used:
        lines.append(f"  classDef {state} {STATE_STYLES[state]}")
    return "\n".join(lines)


def _kernels(brain: Brain) -> list[dict]:
    try:
        from nika_brain.state import kernels as kmod
    except ModuleNotFoundError:
        return []
    if not hasattr(kmod, "list_kernels"):
        return []
    out = []
    for k in kmod.list_kernels(brain):
        lim = getattr(k, "limits", None)
        limits = " ".join(f"{key}={v}" for key, v in lim.to_dict().items()) if lim else ""
        enforcement = getattr(k, "enforcement", None)
        out.append({"id": k.id, "status": k.status, "goal": k.goal, "card": k.card,
                    "tags": ", ".join(k.tags), "parent": k.parent,
                    "runtime": getattr(k, "runtime", ""), "reason": getattr(k, "status_reason", None) or "",
                    "limits": limits + (f" ({enforcement})" if limits and enforcement else "")})
    return sorted(out, key=lambda k: k["id"])


STEAL_COUNTS = ("granted_away", "granted_in", "stole", "ran_stolen", "revoked", "revoked_from")


def stealing_counts(brain: Brain) -> dict[str, dict[str, int]]:
    """Per kernel, from the journal's TASK_GRANTED / TASK_REVOKED / TASK_DONE (work stealing)."""
    from nika_brain.engine import signals
    out: dict[str, dict[str, int]] = {}
    pairs = {"TASK_GRANTED": ("granted_away", "granted_in", "to"),
             "TASK_REVOKED": ("revoked", "revoked_from", "from"),
             "TASK_DONE": ("ran_stolen", "stole", "kernel")}
    for rec in signals.read(brain, types=tuple(pairs)):
        p = rec.get("payload") or {}
        mine, theirs, key = pairs[rec["type"]]
        for kernel, what in ((p.get("owner"), mine), (p.get(key), theirs)):
            if isinstance(kernel, str):
                row = out.setdefault(kernel, dict.fromkeys(STEAL_COUNTS, 0))
                row[what] += 1
    return out


def _yaml_rows(brain: Brain, folder: Path) -> list[tuple[str, dict]]:
    from nika_brain.support.yamlsafe import load_doc
    out = []
    for path in brain.iter_yaml(folder):
        try:
            data = load_doc(path).data
        except BrainError:
            continue  # a file being replaced; validate reports broken ones
        if isinstance(data, dict):
            out.append((path.stem, data))
    return out


def federation_rows(brain: Brain) -> dict:
    """Work stealing (journal), handovers (registry/handovers/), pending spawn proposals
    (proposals/) and vault read grants (grants/), read from files; the federation package writes them."""
    steal = [{"kernel": k, **v} for k, v in sorted(stealing_counts(brain).items())]
    handovers = [{"successor": name, "from_kernel": h.get("from_kernel"),
                  "from_session": h.get("from_session"), "pct": h.get("pct"), "root": h.get("root"),
                  "successor_session": h.get("successor_session") or ""}
                 for name, h in _yaml_rows(brain, brain.root / "registry" / "handovers")]
    pending = [{"id": p.get("id"), "trigger": p.get("trigger"), "kernel": p.get("kernel") or "",
                "goal": p.get("goal"), "memory": p.get("memory_estimate"), "gate": p.get("gate")}
               for _, p in _yaml_rows(brain, brain.root / "proposals") if p.get("status") == "pending"]
    grants = [{"owner": g.get("owner"), "reader": g.get("reader"),
               "levels": ", ".join(map(str, g.get("levels") or [])) or "all", "until": g.get("until") or "-"}
              for _, g in _yaml_rows(brain, brain.grants_dir)]
    return {"stealing": steal, "handovers": handovers, "proposals": pending, "grants": grants}


def model(brain: Brain, strict: bool = False, listings: dict[Path, list] | None = None) -> dict:
    """Everything the template may use (documented at the top of BRAIN-INDEX.md.j2). An invalid state
    file is named in the index, which still shows the rest; `strict` (the git hooks) fails instead.
    `listings`: folder listings already made (by `_fingerprint`), not made again."""
    from nika_brain.state import breakers, runs
    from nika_brain.support import clock
    cache = _Cache(brain)
    bad: list[BrainError] | None = None if strict else []
    listings = listings or {}
    claim_rows = cache.summaries(brain.claims_dir, "claims", bad, listings.get(brain.claims_dir))
    gate_rows = cache.summaries(brain.gates_dir, "gates", bad, listings.get(brain.gates_dir))
    lock_list = _load_all(brain, brain.locks_dir, "lock", bad)
    breaker_list = _load_all(brain, breakers.breakers_dir(brain), "breaker", bad)
    run_list = _load_all(brain, runs.runs_dir(brain), "run", bad)
    wf_list = _load_all(brain, brain.workflows_dir, "workflow", bad)
    kernel_rows = _kernels(brain)
    cache.save()

    # The reference time: the newest moment recorded anywhere in the state (never the wall clock).
    times: list[datetime] = []
    # (each summary's "newest" is its newest time as a number: no parsing of 10,000 times here)
    if claim_rows:
        c = max(claim_rows, key=lambda r: r["newest"])
        times.append(_t(c["closed"] or c["opened"]))
    if gate_rows:
        g = max(gate_rows, key=lambda r: r["newest"])
        times.append(_t(g["decided_at"] or g["created"]))
    times += [lk.acquired for lk in lock_list] + [b.updated for b in breaker_list]
    for r in run_list:
        times.append(r.finished or r.started)
        for h in r.history:
            if isinstance(h, dict) and isinstance(h.get("at"), str):
                try:
                    times.append(clock.parse(h["at"]))
                except BrainError:
                    pass  # a free-form history time is not worth failing the index for
    ref = max((t for t in times if t is not None), default=None)

    def age(text_or_dt) -> str:
        if ref is None or text_or_dt is None:
            return ""
        t = _t(text_or_dt) if isinstance(text_or_dt, str) else text_or_dt
        return clock.age(t, ref)

    open_claims = [dict(c, scope=", ".join(c["scope"]), step=str(c["step"]), age=age(c["opened"]))
                   for c in claim_rows if c["status"] == "open"]
    results = {"ok": 0, "partial": 0, "failed": 0}
    for c in claim_rows:
        if c["result"] in results:
            results[c["result"]] += 1

    lock_rows = [{"scope": lk.scope, "owner": lk.owner, "mode": lk.mode, "token": lk.token,
                  "holder": f"{lk.holder.host}:{lk.holder.pid}" if lk.holder.pid else lk.holder.host,
                  "acquired": clock.iso(lk.acquired), "expires": clock.iso(lk.expires),
                  "expired": ref is not None and lk.expired(ref), "age": age(lk.acquired)}
                 for lk in sorted(lock_list, key=lambda lk: (lk.scope, lk.owner))]
    pending = [dict(g, step="" if g["step"] is None else str(g["step"]), age=age(g["created"]))
               for g in gate_rows if g["status"] == "pending"]
    tripped = [{"scope": b.scope, "fails": b.fails, "gate": b.gate, "last_claim": b.last_claim,
                "updated": clock.iso(b.updated), "age": age(b.updated)}
               for b in sorted(breaker_list, key=lambda b: b.scope) if b.tripped]

    runs_by_wf = {r.workflow: r for r in run_list}
    wf_by_name = {wf.name: wf for wf in wf_list}
    wf_rows, charts = [], []
    for name in sorted(set(wf_by_name) | set(runs_by_wf)):
        wf, run = wf_by_name.get(name), runs_by_wf.get(name)
        wf = runs.chain_view(wf, run)
        states = runs.step_states(wf, run)
        finished = sum(1 for s in states.values() if s in ("done", "partial", "skipped"))
        wf_rows.append({
            "name": name, "branch": wf.branch if wf else "", "steps": len(wf.chain) if wf else None,
            "status": run.status if run else "not started",
            "progress": f"{finished}/{len(wf.chain)}" if wf else "?",
            "cursor": (run.cursor or "") if run else "", "gate": (run.gate or "") if run else "",
            "file": f"workflows/{wf.path.name}" if wf and wf.path else "",
        })
        if run is not None and run.active:
            charts.append({"workflow": name, "status": run.status, "cursor": run.cursor or "",
                           "steps": [{"id": s.id, "type": s.type, "scope": ", ".join(s.scope),
                                      "state": states[s.id]} for s in wf.chain] if wf else [],
                           "mermaid": _mermaid(wf, states) if wf else ""})

    return {
        "as_of": clock.iso(ref) if ref else None,
        "counts": {"claims": len(claim_rows), "open": len(open_claims), **results,
                   "locks": len(lock_rows), "gates": len(gate_rows), "pending_gates": len(pending),
                   "tripped": len(tripped), "workflows": len(wf_rows), "kernels": len(kernel_rows)},
        "claims": open_claims, "locks": lock_rows, "gates": pending, "breakers": tripped,
        "workflows": wf_rows, "charts": charts, "kernels": kernel_rows, "states": STATE_STYLES,
        "federation": federation_rows(brain),
        "invalid": [{"file": e.file or "?", "problem": e.message} for e in bad or []],
    }


# ---- rendering ---------------------------------------------------------------------------------

def _cell(value: Any) -> str:
    """A Markdown table cell: one line, pipes escaped."""
    text = "" if value is None else str(value)
    return " ".join(text.split()).replace("|", "\\|")


_ENVS: dict[Path, Any] = {}


def _environment(folder: Path):
    env = _ENVS.get(folder)
    if env is None:
        import jinja2
        from jinja2.sandbox import SandboxedEnvironment
        env = SandboxedEnvironment(loader=jinja2.FileSystemLoader(str(folder)), autoescape=False,
                                   keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                                   undefined=jinja2.StrictUndefined)
        env.filters["cell"] = _cell
        _ENVS[folder] = env
    return env


def template_path(brain: Brain) -> Path:
    override = brain.config.index_template
    if not override:
        return _PACKAGE_TEMPLATES / TEMPLATE_NAME
    p = Path(override)
    path = p if p.is_absolute() else brain.root / p
    if not path.is_file():
        raise BrainError(f"template {override!r} does not exist", file=CONFIG_NAME, key="index_template")
    return path


def render(brain: Brain, strict: bool = False) -> str:
    """The text of BRAIN-INDEX.md for the brain's current state."""
    path = template_path(brain)
    listings: dict[Path, list] = {}
    fingerprint = _fingerprint(brain, path, listings)
    text = _memo(brain, fingerprint, strict)
    if text is not None:
        return text
    racy = _digests(fingerprint)
    text, clean = _render(brain, strict, path, listings)
    _remember(brain, fingerprint, racy, text, clean)
    return text


def _render(brain: Brain, strict: bool, path: Path, listings: dict[Path, list]) -> tuple[str, bool]:
    """(the text, whether every state file was valid)."""
    import jinja2
    with _no_gc():
        data = model(brain, strict, listings)
    shown = brain.rel(path) or str(path)
    try:
        template = _environment(path.parent).get_template(path.name)
        text = template.render(**data)
    except jinja2.TemplateSyntaxError as exc:
        raise BrainError(f"template syntax error: {exc.message}", file=shown, line=exc.lineno) from exc
    except jinja2.TemplateError as exc:
        raise BrainError(f"template error: {exc}", file=shown) from exc
    except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError) as exc:
        if path.parent == _PACKAGE_TEMPLATES:
            raise
        raise BrainError(f"template failed: {type(exc).__name__}: {exc}", file=shown) from exc
    return (text if text.endswith("\n") else text + "\n"), not data["invalid"]


# ---- a drive's transitions: one regeneration when it hands over -----------------------------------
# A drive (engine.service.drive) runs transitions back to back: a step's result is routed and the next
# step claimed a few milliseconds later, each of them followed by a regeneration. Inside `held`, a
# transition's regeneration (`soon`) is only noted; it is made once, when the state is looked at:
# before a satellite starts (satellites.launch), before a state commit (merging), before the drive
# waits for someone or returns. The index is derived: a process killed in between leaves it as the
# previous transition made it, and the next regeneration (any transition, `nika-brain index`, a git
# hook) makes it whole again.

_OWED: dict[str, bool] = {}   # brain root -> a regeneration is owed (present: inside `held`)


@contextlib.contextmanager
def held(brain: Brain):
    """Transitions inside this block regenerate the index once, when it is handed over (`flush`)."""
    key = str(brain.root)
    if key in _OWED:
        yield  # inside an outer hold: that one hands over
        return
    _OWED[key] = False
    failed = True
    try:
        yield
        failed = False
    finally:
        owed = _OWED.pop(key, False)
        if owed:
            try:
                regenerate(brain)
            except (BrainError, OSError):
                if not failed:
                    raise  # on the way out of an error, that error is the one said


def soon(brain: Brain) -> None:
    """A transition's regeneration: now, or at the hand-over of the `held` block it runs in."""
    if str(brain.root) in _OWED:
        _OWED[str(brain.root)] = True
    else:
        regenerate(brain)


def flush(brain: Brain) -> None:
    """Make the regeneration a `held` block owes (nothing when none is owed)."""
    if _OWED.get(str(brain.root)):
        regenerate(brain)


def regenerate(brain: Brain, strict: bool = False) -> bool:
    """Rewrite BRAIN-INDEX.md when its text changed; True when the file changed."""
    if str(brain.root) in _OWED:
        _OWED[str(brain.root)] = False  # what was owed is made now
    with brain.mutex("index"):
        text = render(brain, strict)
        try:
            if brain.index_path.read_bytes() == text.encode("utf-8"):
                return False
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise BrainError(f"cannot read: {exc.strerror}", file=str(brain.index_path)) from exc
        # Derived, not a source of truth: no fsync. A kill leaves the old text or the new one (the
        # rename); a power loss may at worst leave it empty, and the next regeneration writes it again.
        from nika_brain.support.fsio import atomic_write
        atomic_write(brain.index_path, text, fsync=False)
        with contextlib.suppress(OSError):
            os.chmod(brain.index_path, 0o644)  # a tracked file: mkstemp's 0600 is not meant here
        return True


def is_current(brain: Brain) -> bool:
    try:
        return brain.index_path.read_bytes() == render(brain).encode("utf-8")
    except FileNotFoundError:
        return False

