"""Kernels: one folder per /goal, kernels/<id>/ with kernel.yml, memory/ and its own .claude/.

Directives sent with `readjust` are appended to kernels/<id>/directives.jsonl ({id, at, text, by}):
append-only, so the history of what a kernel was told is never rewritten. Which directives a
session has already been shown is session state (sessions.py), not kernel state: a successor
session after a handover must see them again.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Literal, get_args

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.state import sessions
from nika_brain.state.scopes import check_scope, normalize_scope
from nika_brain.support import clock, fsio
from nika_brain.support.schema import F, fields, name, str_list
from nika_brain.support.yamlsafe import load_doc

Status = Literal["starting", "active", "paused", "dead", "killed", "failed", "handed-over"]
STATUSES: tuple[str, ...] = get_args(Status)
LIVE_STATUSES = ("starting", "active", "paused")  # a runtime may be running for these
RUNTIMES = ("tmux", "headless", "kubernetes")     # the federation's runtime registry names
RESTART_POLICIES = ("never", "on-failure")
ENFORCEMENTS = ("cgroup-v2", "cgroup-v1", "prlimit", "kubernetes", "none")
SANDBOXES = ("bwrap", "off")   # bwrap: the kernel runs in its own mount namespace; off: --no-sandbox
DEFAULT_CARD = "satellite-boot"
DEFAULT_RUNTIME = "tmux"
DEFAULT_MAX_RESTARTS = 3
MAX_GOAL = 500        # characters: a /goal is a short mission string, not a brief
MAX_EXAMPLES = 50
_MAX_DIRECTIVE = 4000  # characters: a directive is a patch on the context, not a document


# ---- limits ------------------------------------------------------------------------------------

_MEM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_MEM_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_CPU = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|m)?\s*$")
MIN_MEMORY = 16 << 20   # below this no agent (nor our hooks) can even start


def parse_memory(value: object) -> int:
    """'1G', '512M', '1.5Gi', '2048' (bytes) -> bytes (binary units, as cgroups and Kubernetes count)."""
    m = _MEM.match(str(value)) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if not m:
        raise BrainError(f"memory limit does not parse: {value!r} (expected e.g. 512M, 1G, 2Gi)")
    n = int(float(m.group(1)) * _MEM_UNITS[m.group(2).lower()])
    if n < MIN_MEMORY:
        raise BrainError(f"memory limit too small: {value!r} (at least 16M)")
    return n


def parse_cpu(value: object) -> float:
    """'50%' (of one CPU), '1.5' (CPUs), '500m' (millicpus) -> percent of one CPU."""
    ok = isinstance(value, (str, int, float)) and not isinstance(value, bool)
    m = _CPU.match(str(value)) if ok else None
    if not m:
        raise BrainError(f"cpu limit does not parse: {value!r} (expected e.g. 50%, 1.5, 500m)")
    n = float(m.group(1))
    pct = n if m.group(2) == "%" else n / 10 if m.group(2) == "m" else n * 100
    if pct < 1 or pct > 100 * 1024:
        raise BrainError(f"cpu limit out of range: {value!r} (1% to 1024 CPUs)")
    return pct


def format_memory(n: int) -> str:
    for unit, size in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def format_cpu(pct: float) -> str:
    return f"{pct:g}%"


@dataclass(frozen=True)
class Limits:
    """Hard resource limits; None = unlimited. cpu_percent is a share of one CPU (200 = two CPUs)."""
    memory_bytes: int | None = None
    cpu_percent: float | None = None

    @classmethod
    def parse(cls, memory: object = None, cpu: object = None) -> Limits:
        return cls(None if memory in (None, "") else parse_memory(memory),
                   None if cpu in (None, "") else parse_cpu(cpu))

    @property
    def memory(self) -> str | None:
        return None if self.memory_bytes is None else format_memory(self.memory_bytes)

    @property
    def cpu(self) -> str | None:
        return None if self.cpu_percent is None else format_cpu(self.cpu_percent)

    def to_dict(self) -> dict:
        return {k: v for k, v in (("memory", self.memory), ("cpu", self.cpu)) if v is not None}

    def __str__(self) -> str:
        return f"mem={self.memory or '-'} cpu={self.cpu or '-'}"


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")


def parse_duration(value: object, what: str = "duration") -> float:
    """'90', '90s', '30m', '2h', '1d' -> seconds."""
    ok = isinstance(value, (str, int, float)) and not isinstance(value, bool)
    m = _DURATION.match(str(value)) if ok else None
    if not m or float(m.group(1)) <= 0:
        raise BrainError(f"{what} does not parse: {value!r} (expected e.g. 90s, 30m, 2h)")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2) or "s"]


# ---- the record --------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Kernel:
    """kernels/<id>/kernel.yml. Build it with keywords; change it with dataclasses.replace."""
    id: str
    goal: str
    tags: tuple[str, ...] = ()          # the triage's "domains"
    examples: tuple[str, ...] = ()      # canonical prompts (triage index)
    scope: tuple[str, ...] = ()         # brain-relative path scopes this kernel works in
    limits: Limits = Limits()
    region: str | None = None           # e.g. fr, eu, neutral
    data_class: str | None = None       # e.g. public, internal, sensitive
    doctrine: str | None = None         # the kernel's doctrine (short text or a brain path)
    card: str = DEFAULT_CARD
    parent: str | None = None           # predecessor (kernel id) this kernel succeeds after a handover
    status: Status = "active"
    status_reason: str | None = None    # why it is killed/dead/failed
    runtime: str = DEFAULT_RUNTIME
    restart: str = "never"              # never | on-failure
    max_restarts: int = DEFAULT_MAX_RESTARTS
    restarts: int = 0                   # restarts done by the supervisor so far
    enforcement: str | None = None      # what applied the limits: one of ENFORCEMENTS
    sandbox: str | None = None          # the OS sandbox nika-brain starts it in: bwrap | off (operator's --no-sandbox)
    temporary: bool = False             # a burst worker, decommissioned after ttl
    ttl: float | None = None            # seconds a temporary kernel lives
    machine: str | None = None          # the machine it was placed on (state/machine.py)
    created: datetime | None = None
    updated: datetime | None = None
    path: Path | None = None

    @property
    def folder(self) -> Path | None:
        return self.path.parent if self.path else None

    @property
    def live(self) -> bool:
        return self.status in LIVE_STATUSES


@dataclass(frozen=True)
class Directive:
    id: str
    at: str
    text: str
    by: str


def _goal(value: str) -> str | None:
    if not value.strip():
        return "a goal cannot be empty"
    if len(value) > MAX_GOAL or "\n" in value.strip():
        return f"a goal is one line of at most {MAX_GOAL} characters"
    return None


def _scope_list(value) -> str | None:
    items = [value] if isinstance(value, str) else value
    if not all(isinstance(v, str) for v in items):
        return "expected a path scope or a list of them"
    for v in items:
        msg = check_scope(v)
        if msg:
            return msg
    return None


def _examples(value) -> str | None:
    if str_list(value):
        return "expected a list of strings"
    if len(value) > MAX_EXAMPLES or any(not v.strip() or len(v) > 2000 for v in value):
        return f"at most {MAX_EXAMPLES} examples, each non-empty and at most 2000 characters"
    return None


def _check(fn):
    def check(value):
        try:
            fn(value)
        except BrainError as exc:
            return exc.message
        return None
    return check


_LIMITS_SPEC = {
    "memory": F((str, int), check=_check(parse_memory)),
    "cpu": F((str, int, float), check=_check(parse_cpu)),
}

_SPEC = {
    "id": F(str, required=True, check=name),
    "goal": F(str, required=True, check=_goal),
    "tags": F(list, default=[], check=str_list),
    "examples": F(list, default=[], check=_examples),
    "scope": F((str, list), default=[], check=_scope_list),
    "limits": F(dict, default={}),
    "region": F(str, check=name),
    "data_class": F(str, check=name),
    "doctrine": F(str),
    "card": F(str, default=DEFAULT_CARD, check=name),
    "parent": F(str),
    "status": F(str, default="active", choices=STATUSES),
    "status_reason": F(str),
    "runtime": F(str, default=DEFAULT_RUNTIME, check=name),
    "restart": F(str, default="never", choices=RESTART_POLICIES),
    "max_restarts": F(int, default=DEFAULT_MAX_RESTARTS,
                      check=lambda v: None if 0 <= v <= 100 else "must be 0 to 100"),
    "restarts": F(int, default=0, check=lambda v: None if v >= 0 else "must be at least 0"),
    "enforcement": F(str, choices=ENFORCEMENTS),
    "sandbox": F(str, choices=SANDBOXES),
    "temporary": F(bool, default=False),
    "ttl": F((str, int, float), check=_check(lambda v: parse_duration(v, "ttl"))),
    "machine": F(str, check=name),
    "created": F(str, check=_check(lambda v: clock.parse(v, what="created"))),
    "updated": F(str, check=_check(lambda v: clock.parse(v, what="updated"))),
}


def check_id(kernel_id: str) -> str:
    if name(kernel_id or "") is not None:
        raise BrainError(f"not a valid kernel id: {kernel_id!r}")
    return kernel_id


def kernel_dir(brain: Brain, kernel_id: str) -> Path:
    return brain.kernels_dir / check_id(kernel_id)


_PARSED: dict[str, tuple[tuple[int, int, int], Kernel]] = {}
_SETTLED_NS = 100_000_000   # a record last written this long ago: any later write changes its mtime


def load_path(path: Path) -> Kernel:
    """The record, parsed again only when its file changed (the daemon lists every kernel several
    times a tick: YAML parses were most of its idle CPU). A file written in the last 100 ms is always
    read: within the file system clock's granularity two writes of one size may share an mtime."""
    try:
        st = os.stat(path)
    except OSError:
        return _parse(path)
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    key = str(path)
    hit = _PARSED.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    k = _parse(path)
    if time.time_ns() - st.st_mtime_ns > _SETTLED_NS:   # the real clock: mtimes are real
        if len(_PARSED) > 4096:
            _PARSED.clear()
        _PARSED[key] = (stamp, k)
    return k


def _parse(path: Path) -> Kernel:
    doc = load_doc(path)
    # Keys a later version adds may sit beside ours: tolerate them (an old nika-brain keeps working).
    v = fields(doc, doc.data, (), _SPEC, allow_extra=True)
    if v["id"] != path.parent.name:
        raise doc.error(f"id does not match the folder name ({path.parent.name})", "id")
    lim = fields(doc, v["limits"], ("limits",), _LIMITS_SPEC)
    scope = [v["scope"]] if isinstance(v["scope"], str) else v["scope"]
    return Kernel(
        id=v["id"], goal=v["goal"].strip(), tags=tuple(v["tags"]), examples=tuple(v["examples"]),
        scope=tuple(normalize_scope(s) for s in scope), limits=Limits.parse(lim["memory"], lim["cpu"]),
        region=v["region"], data_class=v["data_class"], doctrine=v["doctrine"], card=v["card"],
        parent=v["parent"], status=v["status"], status_reason=v["status_reason"], runtime=v["runtime"],
        restart=v["restart"], max_restarts=v["max_restarts"], restarts=v["restarts"],
        enforcement=v["enforcement"], sandbox=v["sandbox"], temporary=v["temporary"],
        ttl=None if v["ttl"] is None else parse_duration(v["ttl"], "ttl"), machine=v["machine"],
        created=None if v["created"] is None else clock.parse(v["created"]),
        updated=None if v["updated"] is None else clock.parse(v["updated"]),
        path=path)


def to_dict(k: Kernel) -> dict:
    """The kernel.yml mapping: keys at their default are left out, so old readers see old files."""
    out: dict = {"id": k.id, "goal": k.goal}
    defaults = Kernel(id=k.id, goal=k.goal)
    for key in ("tags", "examples", "scope"):
        if getattr(k, key):
            out[key] = list(getattr(k, key))
    if k.limits.to_dict():
        out["limits"] = k.limits.to_dict()
    for key in ("region", "data_class", "doctrine", "card", "parent", "status", "status_reason",
                "runtime", "restart", "max_restarts", "restarts", "enforcement", "sandbox", "temporary", "ttl",
                "machine"):
        value = getattr(k, key)
        if value != getattr(defaults, key) or key == "status":
            out[key] = value
    for key in ("created", "updated"):
        if getattr(k, key) is not None:
            out[key] = clock.iso(getattr(k, key))
    return out


def new_kernel(kernel_id: str, goal: str, *, tags=(), examples=(), scope=(), memory=None, cpu=None,
               limits: Limits | None = None, region=None, data_class=None, doctrine=None,
               card: str = DEFAULT_CARD, parent=None, status: Status = "starting",
               runtime: str = DEFAULT_RUNTIME, restart: str = "never",
               max_restarts: int = DEFAULT_MAX_RESTARTS, temporary: bool = False, ttl=None,
               now: datetime | None = None) -> Kernel:
    """A validated Kernel from user input (CLI or Python API); nothing is written."""
    check_id(kernel_id)
    goal = (goal or "").strip()
    msg = _goal(goal) if isinstance(goal, str) else "a goal is a string"
    if msg:
        raise BrainError(msg)
    tags = (tags,) if isinstance(tags, str) else tuple(tags)
    examples = tuple(examples)
    for what, value, check in (("tags", list(tags), str_list), ("examples", list(examples), _examples),
                               ("scope", [scope] if isinstance(scope, str) else list(scope), _scope_list)):
        err = check(value)
        if err:
            raise BrainError(f"{what}: {err}")
    for what, given in (("region", region), ("data_class", data_class), ("card", card)):
        if given is not None and name(given):
            raise BrainError(f"{what}: {name(given)}")
    if runtime not in RUNTIMES:
        raise BrainError(f"unknown runtime: {runtime!r} (expected one of: {', '.join(RUNTIMES)})")
    if restart not in RESTART_POLICIES:
        raise BrainError(f"unknown restart policy: {restart!r} "
                         f"(expected one of: {', '.join(RESTART_POLICIES)})")
    if not isinstance(max_restarts, int) or not 0 <= max_restarts <= 100:
        raise BrainError("max_restarts must be 0 to 100")
    if temporary and ttl is None:
        raise BrainError("a temporary kernel needs a ttl (e.g. 2h)")
    at = now or clock.now()
    scope_t = tuple(normalize_scope(s) for s in ([scope] if isinstance(scope, str) else scope))
    return Kernel(id=kernel_id, goal=goal, tags=tags, examples=examples, scope=scope_t,
                  limits=limits or Limits.parse(memory, cpu), region=region, data_class=data_class,
                  doctrine=doctrine, card=card, parent=parent, status=status, runtime=runtime,
                  restart=restart, max_restarts=max_restarts, temporary=temporary,
                  ttl=None if ttl is None else parse_duration(ttl, "ttl"), created=at, updated=at)


def save_kernel(brain: Brain, k: Kernel, *, now: datetime | None = None) -> Kernel:
    """Write kernels/<id>/kernel.yml atomically (0600 in a 0700 folder); `updated` is set to now."""
    from nika_brain.support.yamlsafe import dumps
    folder = kernel_dir(brain, k.id)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / "kernel.yml"
    k = replace(k, updated=now or clock.now(), created=k.created or now or clock.now(), path=path)
    brain.write(path, dumps(to_dict(k)))
    os.chmod(path, 0o600)
    return k


def set_status(brain: Brain, kernel_id: str, status: Status, *, reason: str | None = None,
               **changes) -> Kernel:
    """Change a kernel's status (and other fields) under the kernels mutex; returns the new record."""
    if status not in STATUSES:
        raise BrainError(f"unknown kernel status: {status!r}")
    with brain.mutex("kernels"):
        k = load_kernel(brain, kernel_id)
        return save_kernel(brain, replace(k, status=status, status_reason=reason, **changes))


def load_kernel(brain: Brain, kernel_id: str) -> Kernel:
    path = kernel_dir(brain, kernel_id) / "kernel.yml"
    if not path.is_file():
        raise BrainError(f"no such kernel: {kernel_id} (no {brain.rel(path)})")
    return load_path(path)


def list_kernels(brain: Brain) -> list[Kernel]:
    folder = brain.kernels_dir
    if not folder.is_dir():
        return []
    return [load_path(p / "kernel.yml") for p in sorted(folder.iterdir())
            if (p / "kernel.yml").is_file()]


def lineage(brain: Brain, kernel: Kernel, *, limit: int = 10) -> list[Kernel]:
    """Predecessors of `kernel`, nearest first; stops at a missing parent or a cycle."""
    out: list[Kernel] = []
    seen = {kernel.id}
    parent = kernel.parent
    while parent and parent not in seen and len(out) < limit:
        seen.add(parent)
        try:
            k = load_kernel(brain, parent)
        except BrainError:
            break  # a parent that was a session id, or a deleted kernel: the chain ends here
        out.append(k)
        parent = k.parent
    return out


# ---- directives (readjust) ---------------------------------------------------------------------

def directives_path(brain: Brain, kernel_id: str) -> Path:
    return kernel_dir(brain, kernel_id) / "directives.jsonl"


def readjust(brain: Brain, kernel_id: str, text: str, *, by: str,
             now: datetime | None = None) -> Directive:
    """Append a directive for the kernel's sessions; they see it at their next prompt or start."""
    text = (text or "").strip()
    if not text:
        raise BrainError("a directive needs text")
    if len(text) > _MAX_DIRECTIVE:
        raise BrainError(f"a directive is at most {_MAX_DIRECTIVE} characters")
    if not kernel_dir(brain, kernel_id).is_dir():
        raise BrainError(f"no such kernel: {kernel_id}")
    at = clock.iso(now or clock.now())
    path = directives_path(brain, kernel_id)
    with brain.mutex("directives"):
        n = len(list_directives(brain, kernel_id)) + 1
        import hashlib  # here, not at the top: the PreToolUse hook loads kernels without hashing
        digest = hashlib.sha1(f"{kernel_id}\0{at}\0{text}".encode()).hexdigest()[:6]
        d = Directive(f"d{n}-{digest}", at, text, by)
        line = json.dumps({"id": d.id, "at": d.at, "text": d.text, "by": d.by}, ensure_ascii=False)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            if brain.config.fsync:
                os.fsync(fh.fileno())
    return d


def text_ref(text: str) -> str:
    """The hash a signal carries instead of a text (directives, goals' examples): sha256, 16 hex."""
    import hashlib
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def directive_signal(kernel_id: str, d: Directive) -> dict:
    """What the bus carries of a directive: its id, where it lives, a hash; never its text (the
    kernel's hooks read it from its folder)."""
    return {"kind": "directive", "kernel": kernel_id, "id": d.id, "sha": text_ref(d.text),
            "ref": f"kernels/{kernel_id}/directives.jsonl#{d.id}", "by": d.by, "at": d.at}


def list_directives(brain: Brain, kernel_id: str) -> list[Directive]:
    """All directives, oldest first; a torn or foreign line is skipped, not fatal."""
    try:
        with open(directives_path(brain, kernel_id), encoding="utf-8") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise BrainError(f"cannot read directives: {exc.strerror}",
                         file=str(directives_path(brain, kernel_id))) from exc
    return [Directive(obj["id"], str(obj.get("at", "")), obj["text"], str(obj.get("by", "")))
            for obj in fsio.json_objects(lines)
            if isinstance(obj.get("id"), str) and isinstance(obj.get("text"), str)]


def unseen_directives(brain: Brain, kernel_id: str, session_id: str) -> list[Directive]:
    session = sessions.load(brain, session_id)
    seen = set(session.seen_directives) if session else set()
    return [d for d in list_directives(brain, kernel_id) if d.id not in seen]


def mark_seen(brain: Brain, session_id: str, directives: list[Directive]) -> None:
    if directives:
        sessions.mark_seen(brain, session_id, [d.id for d in directives])
