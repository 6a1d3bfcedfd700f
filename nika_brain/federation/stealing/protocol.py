"""Work stealing between kernels: per-kernel queues, task_available / task_claim, one atomic grant.

The seed's protocol, on `nika:federation:work_stealing`:
1. A kernel with waiting work (its owner) publishes `task_available` (task id, its summary's hash,
   priority: a signal; the daemon's claimants read the summary from the brain, see below).
2. Idle kernels (nothing running, nothing waiting) answer `task_claim` with their aptitude: the cosine
   of their /goal and the task summary (aptitude.py).
3. The owner decides (`decide`): no claim at or above the threshold -> it keeps the task; one -> that
   kernel gets it; several -> the owner keeps it (`grant: sole`, the default: the seed's "si A est le
   seul candidat") or, with `grant: best`, the best. Tie-break, deterministic so that any incarnation of the owner
   decides the same from the same claims: the higher aptitude (scores are rounded to 6 decimals),
   then the claimant with fewer tasks in hand (`depth`), then the smaller kernel id. The owner decides
   when every kernel that was idle at offer time has answered, or when the window (0.2 s by default)
   ends, whichever comes first; an offer with no idle kernel alive is kept at once.

Content by reference. A task's summary and prompt, and a run's result, are files in the brain
(texts.py: `kernels/<owner>/tasks/`); the bus carries only ids, hashes and references: the task record
has `ref`, `sha` (sha256 of the file) and `summary_sha`, the done record `result_ref` and `result_sha`.
A text whose hash does not match is not run (the task is done, failed). A sandboxed kernel reads a task
granted to it, and commits its result, through its door (doors: `task`, `task_result`).

Exactly once. Every fact lives in the bus's keyed state (one Redis, or one SQLite file), and every
decision is a `set_if_absent` (SET NX), so two writers can never both win:
- `ws:task:<id>` the task (its reference); `ws:open:<owner>:<id>` while it is not done (the owner's queue view);
  `ws:away:<owner>:<id>` while a task granted to another kernel is not done (what the sweep watches);
- `ws:grant:<id>:<n>` decision n (1, 2, ...): who may run the task. The owner writes 1 when it
  decides; a restarted owner that decides again loses the SET NX and reads the first decision. When a
  grantee never starts (it died after claiming, or never read its grant within `grant_timeout`), the
  owner writes n+1 back to itself: a revocation, also a SET NX;
- `ws:lease:<id>` (with a TTL, renewed by the runner) is held by whoever runs the task; a runner takes
  it first, then checks that the newest decision names its kernel, then runs;
- `ws:done:<id>` the commit, SET NX: exactly one run's result is ever recorded, so a zombie that
  finishes late is refused (the fencing).
A queue message or a grant in a kernel's inbox is acknowledged only once its task is decided or done,
so a kernel killed at any point finds its work again on restart (pending entries are reclaimed), and
the owner's sweep returns work that a dead grantee held.

The queue of a kernel is its stream `nika:federation:queue:<kernel>` (consumer group `kernel`) plus the
open keys; grants travel on the broadcast channel (everyone sees them) and in the grantee's inbox
stream `nika:federation:inbox:<kernel>` (durable). Grants, revocations and stolen completions are
journaled (journal/signals.jsonl: TASK_GRANTED, TASK_REVOKED, TASK_DONE).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from nika_brain.errors import BrainError
from nika_brain.federation.stealing.texts import Texts

GROUP = "kernel"
DEFAULTS = {
    "threshold": 0.80,
    "window": 0.2,
    "lease": 600.0,
    "grant_timeout": 30.0,
    "alive_ttl": 10.0,
    "batch": 8,
    "sweep": 1.0,
    "grant": "sole",
    "aptitude": "calibrated",
}
GRANTS = ("sole", "best")
APTITUDES = ("calibrated", "cosine")


def channel() -> str:
    from nika_brain.bus import WORK_STEALING

    return WORK_STEALING


def queue_channel(kernel: str) -> str:
    return f"nika:federation:queue:{kernel}"


def inbox_channel(kernel: str) -> str:
    return f"nika:federation:inbox:{kernel}"


@dataclass(frozen=True)
class Settings:
    threshold: float = DEFAULTS["threshold"]  # aptitude a claimant needs to be granted a task
    window: float = DEFAULTS["window"]  # seconds the owner waits for claims
    lease: float = DEFAULTS["lease"]  # a running task's lease, renewed at a third of it
    grant_timeout: float = DEFAULTS["grant_timeout"]  # a grant not started by then returns
    alive_ttl: float = DEFAULTS["alive_ttl"]  # a kernel not seen for this long is not alive
    batch: int = DEFAULTS["batch"]  # tasks read ahead from the own queue
    sweep: float = DEFAULTS["sweep"]  # seconds between two sweeps of the open tasks
    grant: str = str(DEFAULTS["grant"])  # sole: only a sole claimant above the threshold; best
    aptitude: str = str(DEFAULTS["aptitude"])  # calibrated (the triage's confidence) or cosine


def settings(brain: Any, **override: Any) -> Settings:
    """`federation: {stealing: {...}}` of nika-brain.yml, checked; keyword arguments win."""
    raw = dict((brain.config.federation or {}).get("stealing") or {}) if brain is not None else {}
    if not isinstance(raw, dict):
        raise BrainError("nika-brain.yml: federation.stealing must be a mapping")
    raw.update(override)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in DEFAULTS:
            raise BrainError(
                f"nika-brain.yml: federation.stealing.{key} is not a setting (known: {', '.join(DEFAULTS)})"
            )
        if key in ("grant", "aptitude"):
            allowed = GRANTS if key == "grant" else APTITUDES
            if value not in allowed:
                raise BrainError(f"nika-brain.yml: federation.stealing.{key} must be one of "
                                 f"{', '.join(allowed)}, got {value!r}")
            values[key] = value
            continue
        kind = int if isinstance(DEFAULTS[key], int) else float
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        if key == "threshold":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and -1 <= value <= 1
        if not ok or (kind is int and int(value) != value):
            raise BrainError(
                f"nika-brain.yml: federation.stealing.{key} must be a positive "
                f"{'integer' if kind is int else 'number'}, got {value!r}"
            )
        values[key] = kind(value)
    return Settings(**values)


# ---- the grant rule ---------------------------------------------------------------------------


class Claim(NamedTuple):
    kernel: str
    aptitude: float
    depth: int = 0


class Decision(NamedTuple):
    to: str
    reason: str
    aptitude: float | None
    candidates: tuple[Claim, ...]


def decide(owner: str, claims: Iterable[Claim], threshold: float, grant: str = "sole") -> Decision:
    """The seed's rule with the documented tie-break (module docstring)."""
    seen: dict[str, Claim] = {}
    for c in claims:
        if c.kernel != owner:
            seen[c.kernel] = c  # a claimant's last word counts
    passing = [c for c in seen.values() if c.aptitude >= threshold]
    if not passing:
        why = "no claim" if not seen else f"no claim at or above the threshold {threshold:g}"
        return Decision(owner, f"kept: {why}", None, tuple(seen.values()))
    passing.sort(key=lambda c: (-round(c.aptitude, 6), c.depth, c.kernel))
    if grant == "sole" and len(passing) > 1:
        return Decision(owner, f"kept: {len(passing)} claimants above the threshold (grant: sole)", None,
                        tuple(seen.values()))
    best = passing[0]
    why = (
        "the only claimant above the threshold"
        if len(passing) == 1
        else f"the best of {len(passing)} claimants above the threshold"
    )
    return Decision(best.kernel, why, best.aptitude, tuple(seen.values()))


# ---- keys and reading the state ---------------------------------------------------------------


def _sha(text: str) -> str:
    import hashlib
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _k_task(tid: str) -> str:
    return f"ws:task:{tid}"


def _k_open(owner: str, tid: str) -> str:
    return f"ws:open:{owner}:{tid}"


def _k_away(owner: str, tid: str) -> str:
    return f"ws:away:{owner}:{tid}"


def _k_grant(tid: str, n: int) -> str:
    return f"ws:grant:{tid}:{n}"


def _k_lease(tid: str) -> str:
    return f"ws:lease:{tid}"


def _k_done(tid: str) -> str:
    return f"ws:done:{tid}"


def _k_alive(kernel: str) -> str:
    return f"ws:alive:{kernel}"


def _check_name(what: str, value: str) -> str:
    if (
        not isinstance(value, str)
        or not value
        or len(value) > 128
        or any(c in value for c in ": \t\n/")
        or not value.isprintable()
    ):
        raise BrainError(f"not a valid {what}: {value!r}")
    return value


def grants(bus: Any, tid: str) -> list[dict]:
    """Every decision on a task, oldest first; the last one is in force."""
    out: list[dict] = []
    while True:
        g = bus.get(_k_grant(tid, len(out) + 1))
        if g is None:
            return out
        out.append(g)


def enqueue(
    bus: Any,
    owner: str,
    summary: str,
    *,
    texts: Texts,
    priority: float = 0.5,
    prompt: str | None = None,
    task_id: str | None = None,
) -> dict:
    """Put a task in `owner`'s queue. Its summary is what claimants score against their goal."""
    _check_name("kernel id", owner)
    summary = (summary or "").strip()
    if not summary:
        raise BrainError("a task needs a summary")
    if len(summary) > 2000:
        raise BrainError("a task summary is at most 2000 characters (put the rest in --prompt)")
    if not isinstance(priority, (int, float)) or isinstance(priority, bool) or not 0 <= priority <= 1:
        raise BrainError(f"a task priority is a number from 0 to 1, got {priority!r}")
    tid = _check_name("task id", task_id or f"t-{uuid.uuid4().hex[:16]}")
    if bus.get(_k_task(tid)) is not None:
        raise BrainError(f"task {tid} exists already")
    task = {
        "id": tid,
        "owner": owner,
        "summary_sha": _sha(summary),
        "priority": float(priority),
        "created": time.time(),
        **texts.put_task(owner, tid, summary, prompt or summary),   # the text: in the brain
    }
    if not bus.set_if_absent(_k_task(tid), task):
        raise BrainError(f"task {tid} exists already")
    bus.set(_k_open(owner, tid), {"at": task["created"]})
    bus.publish(queue_channel(owner), {"task": tid})
    return task


def task_state(bus: Any, tid: str) -> dict:
    """One task as an operator sees it: waiting, granted to X, running in X, done by X."""
    task = bus.get(_k_task(tid))
    if task is None:
        raise BrainError(f"no such task: {tid}")
    done = bus.get(_k_done(tid))
    lease = bus.get(_k_lease(tid))
    gs = grants(bus, tid)
    if done:
        state, where = "done", done.get("kernel")
    elif lease:
        state, where = "running", lease.get("kernel")
    elif gs:
        state, where = ("granted" if gs[-1]["to"] != task["owner"] else "kept"), gs[-1]["to"]
    else:
        state, where = "waiting", task["owner"]
    return {**task, "state": state, "kernel": where, "grants": gs, "done": done}


def result(bus: Any, texts: Texts, tid: str) -> Any:
    """The committed result of a task (None while it is not done), read from the brain."""
    return texts.result(bus.get(_k_done(tid)))


def commit(bus: Any, texts: Texts, tid: str, kernel: str, outcome: Any, *, by: str = "door") -> dict:
    """A kernel commits the result of a task granted to it (its door's `task_result`): the result
    written to the brain, then the done record's SET NX (a second commit, or the worker's own after
    it, loses). Refused (BrainError) when the newest decision does not name the kernel or the task is
    done."""
    task = bus.get(_k_task(tid))
    if task is None:
        raise BrainError(f"no such task: {tid}")
    gs = grants(bus, tid)
    if not gs or gs[-1]["to"] != kernel:
        raise BrainError(f"task {tid} is not granted to {kernel}")
    if bus.get(_k_done(tid)) is not None:
        raise BrainError(f"task {tid} is done already")
    done = {"kernel": kernel, "epoch": gs[-1]["epoch"], "at": time.time(), "by": by,
            **texts.put_result(task, outcome)}
    if not bus.set_if_absent(_k_done(tid), done):
        raise BrainError(f"task {tid} is done already")
    if task["owner"] != kernel:
        msg = {"type": "task_done", "task": tid, "owner": task["owner"], "kernel": kernel, "stolen": True}
        bus.publish(channel(), msg)
    return {"task": tid, "result_ref": done["result_ref"], "result_sha": done["result_sha"]}


def queue(bus: Any, kernel: str) -> list[dict]:
    """The kernel's open tasks (not done), highest priority first then oldest."""
    prefix = f"ws:open:{_check_name('kernel id', kernel)}:"
    out = []
    for key in bus.keys(prefix):
        try:
            out.append(task_state(bus, key[len(prefix) :]))
        except BrainError:
            continue  # a task record gone (purged): nothing to show
    out.sort(key=lambda t: (-t["priority"], t["created"]))
    return out


def follow(bus: Any, predecessor: str, successor: str, *, texts: Texts) -> list[str]:
    """A handed-over kernel's waiting tasks follow its successor: each is closed (done, "followed")
    with a SET NX -- so a run that started meanwhile keeps it -- and enqueued again for the successor
    under `<id>~<successor>`. Running or granted-away tasks stay: their runner finishes them.
    Returns the new task ids."""
    moved = []
    for t in queue(bus, predecessor):
        if t["state"] not in ("waiting", "kept") or bus.get(_k_lease(t["id"])) is not None:
            continue
        if not bus.set_if_absent(_k_done(t["id"]), {"kernel": successor, "followed": True, "at": time.time(),
                                                    "result": {"followed": successor}}):
            continue
        bus.delete(_k_open(predecessor, t["id"]))
        try:
            text = texts.task(t)
        except BrainError:
            continue   # its text is gone or changed: nothing to hand over (it stays closed, followed)
        new = enqueue(bus, successor, text["summary"], texts=texts, priority=t["priority"],
                      prompt=text["prompt"], task_id=f"{t['id']}~{successor}"[:120])
        moved.append(new["id"])
    return moved


def alive(bus: Any) -> dict[str, dict]:
    out = {}
    for key in bus.keys("ws:alive:"):
        value = bus.get(key)
        if value is not None:
            out[key[len("ws:alive:") :]] = value
    return out


# ---- a kernel's worker ------------------------------------------------------------------------


@dataclass
class _Offer:
    tid: str
    qid: str | None  # its message in the owner's queue stream
    started: float
    expected: frozenset[str]
    claims: list[Claim] = field(default_factory=list)


class Worker:
    """One kernel's side of the protocol: runs its queue, offers what waits, claims when idle.

    `run(task) -> dict | None` does the work (in production: the prompt delivered to the kernel's
    agent); it gets the task record with its text (`summary`, `prompt`, read from the brain through
    `texts`); its result is written to the brain and named by the task's done record.
    `journal(type, payload)` records grants and revocations (default: the brain's signal journal).
    One Worker per kernel at a time.
    """

    def __init__(
        self,
        bus: Any,
        kernel: str,
        run: Callable[[dict], dict | None],
        *,
        aptitude: Callable[[list[str]], list[float]],
        texts: Texts,
        config: Settings = Settings(),
        journal: Callable[[str, dict], None] | None = None,
        on_start: Callable[[dict], None] | None = None,
        busy: Callable[[], bool] | None = None,
    ):
        self.bus = bus
        self.kernel = _check_name("kernel id", kernel)
        self.run = run
        self.aptitude = aptitude
        self.texts = texts
        self.cfg = config
        self.journal = journal or (lambda _kind, _payload: None)
        self.on_start = on_start
        self.busy_probe = busy  # work the kernel has outside this queue (prompts waiting)
        self._busy_seen = (0.0, False)
        self.pid = os.getpid()
        self.ws = channel()
        self.cursor: str | None = None
        self.local: list[tuple[str, str | None]] = []  # (task, queue message) to run here
        self.granted: list[tuple[str, str | None]] = []  # (task, inbox message) granted to us
        self.offers: dict[str, _Offer] = {}
        self.claimed: dict[str, float] = {}  # task -> give up waiting at
        self.held: set[str] = set()  # tasks in local/granted/offers
        self.deferred: dict[str, float] = {}  # lease held elsewhere: retry after
        self._alive: dict[str, dict] = {}
        self._alive_at = 0.0
        self._beat_at = 0.0
        self._beat_state = ""
        self._sweep_at = 0.0
        self.stats = {"ran": 0, "stolen": 0, "granted_away": 0, "kept": 0, "revoked": 0, "claims": 0}

    # -- start: what an earlier incarnation left ----------------------------------------------
    def recover(self) -> None:
        """Reclaim queue and inbox entries a killed incarnation had read but not finished."""
        saved = self.bus.get(f"ws:cursor:{self.kernel}")
        self.cursor = saved.get("id") if saved else None
        for mid, msg in self.bus.reclaim(queue_channel(self.kernel), GROUP, self.kernel, 0, 10_000):
            self._take_local(msg.get("task"), mid)
        for mid, msg in self.bus.reclaim(inbox_channel(self.kernel), GROUP, self.kernel, 0, 10_000):
            self._take_grant(msg, mid)

    def _take_local(self, tid: Any, qid: str | None) -> None:
        if isinstance(tid, str) and tid not in self.held:
            self.held.add(tid)
            self.local.append((tid, qid))
        elif qid:
            self.bus.ack(queue_channel(self.kernel), GROUP, qid)

    def _take_grant(self, msg: dict, iid: str | None) -> None:
        tid = msg.get("task")
        if isinstance(tid, str) and tid not in self.held:
            self.held.add(tid)
            self.granted.append((tid, iid))
        elif iid:
            self.bus.ack(inbox_channel(self.kernel), GROUP, iid)

    # -- liveness -----------------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        if self.local or self.granted or self.offers:
            return False
        return not self._kernel_busy()

    def _kernel_busy(self) -> bool:
        """Work the kernel has outside this queue: a turn in progress, prompts waiting."""
        if self.busy_probe is None:
            return False
        at, value = self._busy_seen
        if time.monotonic() - at > 1.0:  # a file read: at most once a second
            value = bool(self.busy_probe())
            self._busy_seen = (time.monotonic(), value)
        return value

    def beat(self, force: bool = False) -> None:
        now = time.monotonic()
        state = "idle" if self.idle else "busy"
        if force or state != self._beat_state or now - self._beat_at > self.cfg.alive_ttl / 3:
            self.bus.set(
                _k_alive(self.kernel),
                {
                    "pid": self.pid,
                    "state": state,
                    "at": time.time(),
                    "depth": len(self.local) + len(self.granted),
                },
                ttl=self.cfg.alive_ttl,
            )
            if self.cursor:
                self.bus.set(f"ws:cursor:{self.kernel}", {"id": self.cursor})
            self._beat_at, self._beat_state = now, state

    def _idle_kernels(self) -> frozenset[str]:
        now = time.monotonic()
        if now - self._alive_at > min(0.25, self.cfg.window):
            self._alive = alive(self.bus)
            self._alive_at = now
        return frozenset(k for k, v in self._alive.items() if k != self.kernel and v.get("state") == "idle")

    # -- one turn of the loop -----------------------------------------------------------------
    def step(self, run: bool = True) -> bool:
        """Read what arrived, decide what is due, run one task (not with run=False: the daemon's
        poller steps many workers in one thread and runs a task in a thread of its own). True when
        something happened."""
        busy = self._read_broadcast()
        busy |= self._read_inbox()
        busy |= self._read_queue()
        busy |= self._offer()
        busy |= self._decide_due()
        if time.monotonic() - self._sweep_at > self.cfg.sweep:
            self._sweep_at = time.monotonic()
            busy |= self._sweep()
        self.beat()
        if not run:
            return busy
        return self._run_one() or busy

    def runnable(self) -> bool:
        """Whether _run_one would run a task now (what step(run=False) leaves undone)."""
        now = time.monotonic()
        if any(self.deferred.get(tid, 0) <= now for tid, _ in self.granted):
            return True
        return bool(self.local) and not self._kernel_busy() and \
            any(self.deferred.get(tid, 0) <= now for tid, _ in self.local)

    def serve(self, stop: Callable[[], bool] = lambda: False, poll: float = 0.005) -> None:
        self.recover()
        self.beat(force=True)
        pause = poll
        while not stop():
            if self.step():
                pause = poll
            else:
                # Wait on the broadcast channel (Redis wakes at once on a message) as a wake-up
                # only: the next step reads it for real; inbox and queue are looked at each turn.
                self.bus.read(self.ws, after=self.cursor, count=1, block=pause)
                pause = min(pause * 2, 0.05)

    def _read_broadcast(self) -> bool:
        msgs = self.bus.read(self.ws, after=self.cursor, count=500)
        offers: list[dict] = []
        for mid, msg in msgs:
            self.cursor = mid
            kind, tid = msg.get("type"), msg.get("task")
            if not isinstance(tid, str):
                continue
            if kind == "task_available" and msg.get("owner") != self.kernel:
                offers.append(msg)
            elif kind == "task_claim" and tid in self.offers and msg.get("owner") == self.kernel:
                try:
                    c = Claim(str(msg["kernel"]), float(msg["aptitude"]), int(msg.get("depth") or 0))
                except (KeyError, TypeError, ValueError):
                    continue
                self.offers[tid].claims.append(c)
            elif kind in ("task_granted", "task_done"):
                self.claimed.pop(tid, None)
        self._claim(offers)
        now = time.monotonic()
        for tid, until in list(self.claimed.items()):
            if until < now:
                del self.claimed[tid]
        return bool(msgs)

    def _summary(self, offer: dict) -> str:
        """What a claimant scores: the offered task's summary, read from its record (the offer carries
        only its id and hash)."""
        task = self.bus.get(_k_task(str(offer["task"])))
        try:
            return self.texts.task(task)["summary"] if task else ""
        except BrainError:
            return ""   # gone or changed: nothing to score (aptitude of an empty text)

    def _claim(self, offers: list[dict]) -> None:
        """Answer fresh offers while idle, scoring them in one batch (one embedding call)."""
        if not offers or not self.idle:
            return
        now = time.time()
        # A stale offer (read from a backlog after a restart, or while busy) is past its window.
        fresh = [
            m
            for m in offers
            if now - float(m.get("at") or 0) <= self.cfg.window * 2 and m["task"] not in self.claimed
        ]
        if not fresh:
            return
        scores = self.aptitude([self._summary(m) for m in fresh])
        for msg, score in zip(fresh, scores):
            tid = msg["task"]
            self.stats["claims"] += 1
            self.claimed[tid] = time.monotonic() + self.cfg.window * 4
            self.bus.publish(
                self.ws,
                {
                    "type": "task_claim",
                    "task": tid,
                    "owner": msg.get("owner"),
                    "kernel": self.kernel,
                    "aptitude": float(score),
                    "depth": len(self.claimed),
                    "at": time.time(),
                },
            )

    def _read_inbox(self) -> bool:
        msgs = self.bus.group_read(inbox_channel(self.kernel), GROUP, self.kernel, count=16)
        for mid, msg in msgs:
            self._take_grant(msg, mid)
        return bool(msgs)

    def _read_queue(self) -> bool:
        room = self.cfg.batch - len(self.local) - len(self.offers)
        if room <= 0:
            return False
        msgs = self.bus.group_read(queue_channel(self.kernel), GROUP, self.kernel, count=room)
        for mid, msg in msgs:
            self._take_local(msg.get("task"), mid)
        return bool(msgs)

    def _offer(self) -> bool:
        """While some kernel is idle, offer every waiting task but the next one to run (the tail of
        what was read ahead, at most `batch`): an idle kernel answers each offer, so the owner mostly
        decides as soon as the answers are in, not at the end of the window. While the owner's kernel
        is busy (a turn in progress) the next one is offered too: it would only wait."""
        keep = 1 if not self._kernel_busy() else 0
        if len(self.local) <= keep:
            return False
        idle = self._idle_kernels()
        did = False
        while idle and len(self.local) > keep:
            tid, qid = self.local.pop()
            task = self.bus.get(_k_task(tid))
            if task is None or self.bus.get(_k_done(tid)) is not None or grants(self.bus, tid):
                self.local.append((tid, qid))  # decided already (an earlier incarnation): run it
                break
            self.offers[tid] = _Offer(tid, qid, time.monotonic(), idle)
            self.bus.publish(
                self.ws,
                {
                    "type": "task_available",
                    "task": tid,
                    "owner": self.kernel,
                    "sha": task.get("summary_sha"),   # a signal: the text stays in the brain
                    "priority": task["priority"],
                    "at": time.time(),
                },
            )
            did = True
        return did

    def _decide_due(self) -> bool:
        now = time.monotonic()
        did = False
        for tid, offer in list(self.offers.items()):
            answered = {c.kernel for c in offer.claims}
            if now - offer.started < self.cfg.window and not offer.expected <= answered:
                continue
            del self.offers[tid]
            self._grant(offer)
            did = True
        return did

    def _grant(self, offer: _Offer) -> None:
        d = decide(self.kernel, offer.claims, self.cfg.threshold, self.cfg.grant)
        record = {
            "to": d.to,
            "epoch": 1,
            "by": self.kernel,
            "reason": d.reason,
            "at": time.time(),
            "aptitude": d.aptitude,
            "candidates": [list(c) for c in d.candidates],
        }
        if not self.bus.set_if_absent(_k_grant(offer.tid, 1), record):
            record = grants(self.bus, offer.tid)[-1]  # decided before (an earlier incarnation)
        self._deliver(offer.tid, offer.qid, record)

    def _deliver(self, tid: str, qid: str | None, record: dict) -> None:
        to = record["to"]
        msg = {
            "type": "task_granted",
            "task": tid,
            "owner": self.kernel,
            "to": to,
            "epoch": record["epoch"],
            "aptitude": record.get("aptitude"),
            "reason": record.get("reason"),
            "at": time.time(),
        }
        if to == self.kernel:
            self.stats["kept"] += 1
            self.local.append((tid, qid))
            self.bus.publish(self.ws, msg)
            return
        self.bus.set(_k_away(self.kernel, tid), {"to": to})  # the sweep watches it until done
        self.bus.publish(inbox_channel(to), msg)
        self.bus.publish(self.ws, msg)
        self.journal("TASK_GRANTED", msg)
        self.stats["granted_away"] += 1
        self.held.discard(tid)
        if qid:
            self.bus.ack(queue_channel(self.kernel), GROUP, qid)

    def _sweep(self) -> bool:
        """Tasks of ours granted to another kernel: done, back with us, or with a dead grantee.

        Only those are watched (`ws:away:<owner>:<task>`, written before the grant is delivered and
        removed once the task is done): everything else of ours is in our queue stream or in hand.
        """
        did = False
        prefix = f"ws:away:{self.kernel}:"
        peers: dict[str, dict] | None = None   # read only when a task of ours is away (idle CPU: 20 workers)
        for key in self.bus.keys(prefix):
            tid = key[len(prefix) :]
            if tid in self.held:
                continue
            if self.bus.get(_k_done(tid)) is not None:
                self.bus.delete(_k_open(self.kernel, tid))
                self.bus.delete(key)
                continue
            gs = grants(self.bus, tid)
            if not gs:
                continue
            last = gs[-1]
            if last["to"] == self.kernel:
                if self.bus.get(_k_lease(tid)) is None:
                    self._take_local(tid, None)
                    did = True
                continue
            if self.bus.get(_k_lease(tid)) is not None:
                continue  # being run by its grantee
            if peers is None:
                peers = alive(self.bus)
            grantee = peers.get(last["to"])
            late = time.time() - float(last.get("at") or 0) > self.cfg.grant_timeout
            if grantee is not None and not late:
                continue
            record = {
                "to": self.kernel,
                "epoch": len(gs) + 1,
                "by": self.kernel,
                "at": time.time(),
                "reason": f"revoked from {last['to']}: "
                + ("not alive" if grantee is None else "not started in time"),
                "aptitude": None,
                "candidates": [],
            }
            if self.bus.set_if_absent(_k_grant(tid, len(gs) + 1), record):
                msg = {
                    "type": "task_revoked",
                    "task": tid,
                    "owner": self.kernel,
                    "from": last["to"],
                    "epoch": len(gs) + 1,
                    "reason": record["reason"],
                }
                self.bus.publish(self.ws, msg)
                self.journal("TASK_REVOKED", msg)
                self.stats["revoked"] += 1
                self._take_local(tid, None)
                did = True
        return did

    # -- running ------------------------------------------------------------------------------
    def _run_one(self) -> bool:
        now = time.monotonic()
        for pool, chan in (
            (self.granted, inbox_channel(self.kernel)),
            (self.local, queue_channel(self.kernel)),
        ):
            if pool is self.local and pool and self._kernel_busy():
                continue  # its own tasks wait for the kernel's turn to end (or go to an idle kernel)
            for i, (tid, mid) in enumerate(pool):
                if self.deferred.get(tid, 0) > now:
                    continue
                del pool[i]
                outcome = self.execute(tid)
                if outcome == "not-ours" and pool is self.local and self._undelivered(tid):
                    # an earlier incarnation decided for another kernel and died before delivering
                    # the decision (nor watched it): deliver it now, or the task is lost
                    self._deliver(tid, mid, grants(self.bus, tid)[-1])
                    return True
                if outcome == "busy":
                    self.deferred[tid] = now + min(1.0, self.cfg.lease / 3)
                    pool.append((tid, mid))
                    return True
                self.deferred.pop(tid, None)
                self.held.discard(tid)
                if mid:
                    self.bus.ack(chan, GROUP, mid)
                return True
        return False

    def _undelivered(self, tid: str) -> bool:
        """A task of our queue whose newest decision names another kernel, and that nobody watches."""
        gs = grants(self.bus, tid)
        return (bool(gs) and gs[-1]["to"] != self.kernel and self.bus.get(_k_done(tid)) is None
                and self.bus.get(_k_away(self.kernel, tid)) is None)

    def execute(self, tid: str) -> str:
        """Run one task if it is ours to run: 'ran', 'done' (already), 'not-ours', or 'busy'."""
        if self.bus.get(_k_done(tid)) is not None:
            # done, maybe by a run killed before it tidied up (its lease may outlive it): nothing to
            # fence, only the owner's queue view to close -- not after the dead run's lease expires
            task = self.bus.get(_k_task(tid))
            if task is not None:
                self.bus.delete(_k_open(task["owner"], tid))
            return "done"
        token = uuid.uuid4().hex
        lease = {"kernel": self.kernel, "pid": self.pid, "token": token, "at": time.time()}
        if not self.bus.set_if_absent(_k_lease(tid), lease, ttl=self.cfg.lease):
            return "busy"
        renew = _Renewal(self.bus, _k_lease(tid), lease, self.cfg.lease)
        try:
            task = self.bus.get(_k_task(tid))
            if task is None:
                return "not-ours"
            if self.bus.get(_k_done(tid)) is not None:
                self.bus.delete(_k_open(task["owner"], tid))
                return "done"
            gs = grants(self.bus, tid)
            if not gs:
                if task["owner"] != self.kernel:
                    return "not-ours"
                local = {
                    "to": self.kernel,
                    "epoch": 1,
                    "by": self.kernel,
                    "reason": "kept: run locally",
                    "at": time.time(),
                    "aptitude": None,
                    "candidates": [],
                }
                if not self.bus.set_if_absent(_k_grant(tid, 1), local):
                    gs = grants(self.bus, tid)
                else:
                    gs = [local]
            if gs[-1]["to"] != self.kernel:
                return "not-ours"
            epoch = gs[-1]["epoch"]
            if self.on_start:
                self.on_start({**task, "epoch": epoch, "kernel": self.kernel, "pid": self.pid})
            renew.start()
            try:
                result = self.run(self.texts.full(task))
            except BrainError as exc:  # a failed task is done (failed); the worker goes on
                result = {"failed": str(exc)}
                self.stats["failed"] = self.stats.get("failed", 0) + 1
            done = {
                "kernel": self.kernel,
                "pid": self.pid,
                "epoch": epoch,
                "token": token,
                "at": time.time(),
                **self.texts.put_result(task, result),   # the result: in the brain
            }
            if self.bus.set_if_absent(_k_done(tid), done):
                self.stats["ran"] += 1
                stolen = task["owner"] != self.kernel
                if stolen:  # the owner's own runs are not news for the other kernels
                    msg = {
                        "type": "task_done",
                        "task": tid,
                        "owner": task["owner"],
                        "kernel": self.kernel,
                        "stolen": stolen,
                    }
                    self.bus.publish(self.ws, msg)
                    self.stats["stolen"] += 1
                    self.journal("TASK_DONE", msg)
            self.bus.delete(_k_open(task["owner"], tid))
            if task["owner"] != self.kernel or len(gs) > 1:
                self.bus.delete(_k_away(task["owner"], tid))
            return "ran"
        finally:
            renew.stop()
            held = self.bus.get(_k_lease(tid))
            if held is not None and held.get("token") == token:
                self.bus.delete(_k_lease(tid))


class _Renewal:
    """Keeps a lease alive while its task runs (a thread renewing at a third of the TTL)."""

    def __init__(self, bus: Any, key: str, value: dict, ttl: float):
        self.bus, self.key, self.value, self.ttl = bus, key, value, ttl
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                held = self.bus.get(self.key)
                if held is None or held.get("token") != self.value["token"]:
                    return  # lost: the done record's SET NX is the fence
                self.bus.set(self.key, self.value, ttl=self.ttl)
            except BrainError:
                continue

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)


def brain_journal(brain: Any) -> Callable[[str, dict], None]:
    """Grants and revocations into journal/signals.jsonl (not re-published: the bus has them)."""
    from nika_brain.engine import signals

    def write(kind: str, payload: dict) -> None:
        signals.emit(
            brain,
            kind,
            reason=f"{payload.get('owner')} -> {payload.get('to') or payload.get('kernel')}"
            f" {payload.get('task')}",
            payload=payload,
            publish=False,
        )

    return write


def worker_for(brain: Any, kernel_id: str, run: Callable[[dict], dict | None], **kw: Any) -> Worker:
    """A Worker for a kernel of this brain: its bus, its goal's aptitude, the journal, the settings."""
    from nika_brain.bus import open_bus
    from nika_brain.federation.stealing.aptitude import Aptitude, Calibrated, goal_text, open_embedder
    from nika_brain.state.kernels import load_kernel

    bus = open_bus(brain)
    k = load_kernel(brain, kernel_id)
    cfg = kw.pop("config", None) or settings(brain)
    apt: Any = Aptitude(k.id, goal_text(k.goal, k.tags), open_embedder(brain), bus)
    if cfg.aptitude == "calibrated":
        apt = Calibrated(brain, k.id, cfg.threshold, apt)
    apt.warm()  # the model loads now, not while the first offer's window runs
    from nika_brain.state import prompts as prompts

    def prompts_waiting() -> bool:  # prompts given to `kernel invoke` and not taken yet
        return bool(prompts.pending(brain, k.id))

    kw.setdefault("busy", prompts_waiting)
    return Worker(
        bus, k.id, run, aptitude=apt.scores, texts=Texts(brain), config=cfg, journal=brain_journal(brain), **kw
    )


SERVE_PAUSE = 0.1     # first pause after a bus error while serving; doubled up to SERVE_PAUSE_MAX
SERVE_PAUSE_MAX = 2.0
SERVE_GIVE_UP = 60.0  # seconds of bus errors in a row that end `kernel work`
SERVE_RECOVERED = 5.0  # a worker that served this long before its error ends a run of errors


def serve_kernel(make: Callable[[], Worker], *, stop: Callable[[], bool] = lambda: False,
                 give_up: float = SERVE_GIVE_UP,
                 say: Callable[[str], None] | None = None) -> None:
    """Serve one kernel's side of work stealing (`kernel work`) until `stop()`. A bus error while
    serving (Redis restarting, the embedded store locked past its timeout) is said in one line and a
    fresh worker from `make()` takes over after a pause, reclaiming what the last one held, as after a
    restart (the worker that failed mid-step is dropped, never stepped again). An error before the
    first worker exists, or errors for `give_up` seconds in a row, end it with that error."""
    tell = say or (lambda line: print(line, file=sys.stderr, flush=True))
    worker: Worker | None = make()
    pause, failing_since = SERVE_PAUSE, None
    while True:
        began = time.monotonic()
        try:
            if worker is None:
                worker = make()
            worker.serve(stop)
            return
        except BrainError as exc:
            worker = None
            now = time.monotonic()
            if failing_since is None or now - began > SERVE_RECOVERED:
                failing_since, pause = now, SERVE_PAUSE
            elif now - failing_since > give_up:
                raise
            tell(f"work stealing: {exc} (a fresh worker in {pause:g}s)")
            time.sleep(pause)
            pause = min(pause * 2, SERVE_PAUSE_MAX)


def journal_summary(brain: Any, kernel: str | None = None) -> dict[str, dict[str, int]]:
    """Per kernel: tasks granted away and in, run for another (stole), revoked, from the journal."""
    from nika_brain.engine.index import stealing_counts

    counts = stealing_counts(brain)
    return {k: v for k, v in counts.items() if kernel is None or k == kernel}
