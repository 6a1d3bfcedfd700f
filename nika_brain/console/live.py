"""The live half of the page: one thread tails the bus, server-sent events fan it out.

The thread reads every channel the page cares about from its end at start (what came before is
history: the pages read it from the files), keeps the last signals (heartbeats aside: they update
their kernel's row) in a ring for the overview and each kernel's last heartbeats for its chart, and
hands each new message to every open page's queue. A page's `EventSource` reconnects by itself; a
bus that is down is said once on the page (`bus` event) and retried.
"""
from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
from typing import Any

from nika_brain import bus
from nika_brain.brain import Brain
from nika_brain.errors import BrainError

SIGNALS = "nika:orchestrator:signals"    # engine.signals.CHANNEL (the engine ranks above the bus)
ASKS = "nika:federation:asks"            # the ask records, when the daemon publishes them
CHANNELS = (bus.HEALTH, bus.GOALS, bus.DIRECTIVES, bus.WORK_STEALING, SIGNALS, ASKS)
RING = 50
BEATS = 300
POLL = 0.05     # seconds between two looks at an idle bus


def summary(channel: str, msg: dict) -> dict[str, Any]:
    """What the page shows of one message: its kind, kernel, time and one line."""
    kind = str(msg.get("type") or msg.get("kind") or msg.get("event") or channel.rsplit(":", 1)[-1])
    payload = msg.get("payload")
    payload = payload if isinstance(payload, dict) else {}
    kernel = msg.get("kernel") or payload.get("kernel")
    line = msg.get("reason") or msg.get("text") or msg.get("goal") or msg.get("summary") or ""
    if kind == "heartbeat":
        pct = msg.get("context_pct")
        line = (f"{msg.get('state', '')} · context {pct if pct is not None else '-'}% · "
                f"queue {msg.get('queue_depth', 0)}")
    return {"channel": channel, "kind": kind, "kernel": kernel or "", "workflow": msg.get("workflow") or "",
            "at": str(msg.get("at") or msg.get("time") or ""), "line": str(line)[:300]}


class Feed:
    def __init__(self, brain: Brain, channels: tuple[str, ...] = CHANNELS) -> None:
        self.brain = brain
        self.channels = channels
        self.recent: collections.deque[dict] = collections.deque(maxlen=RING)
        self.beats: dict[str, collections.deque[dict]] = {}   # per kernel, its last BEATS heartbeats
        self.error: str | None = None
        self._subscribers: set[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nika-console-feed", daemon=True)

    # ---- the thread ----
    def start(self) -> None:
        self._thread.start()
        self._ready.wait(30)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _end(self, b: Any, channel: str) -> str | None:
        """The id of the channel's last message (read through once, at start)."""
        after = None
        while True:
            batch = b.read(channel, after=after, count=1000)
            if not batch:
                return after
            for _, msg in batch:
                self._beat(msg)
            for _, msg in [m for m in batch if m[1].get("kind") != "heartbeat"][-RING:]:
                self.recent.append(summary(channel, msg))
            after = batch[-1][0]

    def _run(self) -> None:
        cursors: dict[str, str | None] = {}
        while not self._stop.is_set():
            try:
                b = bus.open_bus(self.brain)
                if not cursors:
                    cursors = {c: self._end(b, c) for c in self.channels}
                    self._sort_recent()
                    self._ready.set()
                got = False
                for channel in self.channels:
                    batch = b.read(channel, after=cursors[channel], count=200)
                    if batch:
                        got = True
                        cursors[channel] = batch[-1][0]
                        for _, msg in batch:
                            self._deliver(channel, msg)
                if self.error is not None:
                    self.error = None
                    self._broadcast({"event": "bus", "ok": True})
                if not got:
                    time.sleep(POLL)
            except BrainError as exc:
                if self.error != str(exc):
                    self.error = str(exc)
                    self._broadcast({"event": "bus", "ok": False, "error": self.error})
                self._ready.set()
                self._stop.wait(1.0)

    def _sort_recent(self) -> None:
        rows = sorted(self.recent, key=lambda r: r["at"])[-RING:]
        self.recent.clear()
        self.recent.extend(rows)

    def _beat(self, msg: dict) -> None:
        if msg.get("kind") == "heartbeat" and isinstance(msg.get("kernel"), str):
            self.beats.setdefault(msg["kernel"], collections.deque(maxlen=BEATS)).append(
                {k: msg.get(k) for k in ("t", "at", "context_pct", "queue_depth", "state")})

    def _deliver(self, channel: str, msg: dict) -> None:
        self._beat(msg)
        row = summary(channel, msg)
        if row["kind"] != "heartbeat":   # heartbeats update their kernel's row, not the signal list
            self.recent.append(row)
        self._broadcast({"event": "message", "channel": channel, "summary": row, "message": msg})

    def _broadcast(self, data: dict) -> None:
        text = json.dumps(data, default=str, ensure_ascii=False)
        with self._lock:
            subs = list(self._subscribers)
        for loop, q in subs:
            loop.call_soon_threadsafe(_put, q, text)

    # ---- the pages ----
    def subscribe(self) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue(maxsize=1000)
        with self._lock:
            self._subscribers.add((asyncio.get_running_loop(), q))
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        with self._lock:
            self._subscribers = {s for s in self._subscribers if s[1] is not q}

    def history(self, kernel_id: str) -> list[dict]:
        return list(self.beats.get(kernel_id, ()))

    def last(self, n: int = 20) -> list[dict]:
        return list(self.recent)[-n:][::-1]


def _put(q: asyncio.Queue, text: str) -> None:
    if q.full():  # a page that stopped reading: drop its oldest, it reloads what it missed
        q.get_nowait()
    q.put_nowait(text)
