"""The bus between kernels and the orchestrator: durable channels, work queues, small keyed state.

Two interchangeable backends behind the `Bus` protocol, chosen by `brain.config.bus` (`NIKA_BUS`
overrides it, `NIKA_REDIS_URL` overrides `brain.config.redis_url`):

- embedded: one SQLite file in WAL mode under the git-ignored state folder (`.nika/bus.sqlite3`);
- redis: a Stream per channel (XADD with an approximate MAXLEN) plus a PUBLISH of the same JSON for
  live subscribers; consumer groups are XREADGROUP / XACK / XAUTOCLAIM; keys live under `nika:kv:`
  so that they never collide with the channels' streams.

Message ids are opaque strings, ordered per channel: hand them back (`after=`, `ack`), do not compare
them. A work queue's group starts at the beginning of its channel, so work published before the first
worker arrived is not lost. Every failure of a store (dead server, locked or corrupt file, bad JSON)
leaves this module as one BrainError line. `redis` and `sqlite3` are imported only when their backend
is opened: the hook path must not pay for them.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Protocol, runtime_checkable
from urllib.parse import urlsplit

from nika_brain.support import clock, fsio
from nika_brain.errors import BrainError

if TYPE_CHECKING:
    from nika_brain.brain import Brain

# The seed's federation channels (nika:federation:*).
DIRECTIVES = "nika:federation:directives"        # kernel A -> kernel B: an event that concerns you
WORK_STEALING = "nika:federation:work_stealing"  # task_available / task_claim
HEALTH = "nika:federation:health"                # heartbeats and aggregated metrics
GOALS = "nika:federation:goals"                  # updates of the registry of active /goals
FEDERATION_CHANNELS = (DIRECTIVES, WORK_STEALING, HEALTH, GOALS)

MAXLEN = 100_000          # messages kept per channel, approximately (oldest trimmed first)
KV_PREFIX = "nika:kv:"    # Redis namespace of the keyed state
DB_NAME = "bus.sqlite3"
_MAX_NAME = 256
_REDIS_ID = re.compile(r"\d+(-\d+)?\Z")

Message = tuple[str, dict]


@runtime_checkable
class Bus(Protocol):
    backend: str      # its name in BACKENDS
    where: str        # where the store is, for messages: a file, or host:port

    def publish(self, channel: str, message: dict) -> str: ...
    def read(self, channel: str, after: str | None = None, count: int = 100,
             block: float = 0) -> list[Message]: ...
    def group_read(self, channel: str, group: str, consumer: str, count: int = 1,
                   block: float = 0) -> list[Message]: ...
    def ack(self, channel: str, group: str, id: str) -> bool: ...
    def reclaim(self, channel: str, group: str, consumer: str, min_idle: float,
                count: int = 100) -> list[Message]: ...
    def set(self, key: str, value: dict, ttl: float | None = None) -> None: ...
    def get(self, key: str) -> dict | None: ...
    def set_if_absent(self, key: str, value: dict, ttl: float | None = None) -> bool: ...
    def delete(self, key: str) -> bool: ...
    def keys(self, prefix: str = "") -> list[str]: ...
    def ping(self) -> None: ...
    def close(self) -> None: ...


# --- argument checks and JSON, shared by both backends ---------------------------------------------

def _name(what: str, value: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        raise BrainError(f"bus: {what} must be a non-empty string, got {value!r}")
    if len(value) > _MAX_NAME or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise BrainError(f"bus: {what} {value[:40]!r} is too long or has control characters")
    return value


def _count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise BrainError(f"bus: count must be a positive integer, got {count!r}")
    return count


def _seconds(what: str, value: float | None, *, positive: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        need = "positive" if positive else "non-negative"
        raise BrainError(f"bus: {what} must be a {need} number of seconds, got {value!r}")
    return float(value)


def _ttl(ttl: float | None) -> float | None:
    return None if ttl is None else _seconds("ttl", ttl, positive=True)


def _encode(what: str, value: dict) -> str:
    if not isinstance(value, dict):
        raise BrainError(f"bus: {what} must be a JSON object (a dict), got {type(value).__name__}")
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise BrainError(f"bus: {what} is not JSON-serializable: {exc}") from exc


def _decode(where: str, text: str | None) -> dict:
    try:
        value = json.loads(text) if text is not None else None
    except ValueError as exc:
        raise BrainError(f"bus: {where} is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise BrainError(f"bus: {where} is not a JSON object")
    return value


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


class _Deadline:
    """How long a blocking read may still wait; polling backs off from 2 ms to `cap`."""

    def __init__(self, block: float, cap: float):
        self.end = time.monotonic() + block
        self.delay = 0.002
        self.cap = cap

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def sleep(self) -> bool:
        left = self.remaining()
        if left <= 0:
            return False
        time.sleep(min(self.delay, left))
        self.delay = min(self.delay * 2, self.cap)
        return True


# --- embedded: SQLite --------------------------------------------------------------------------------

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, channel TEXT NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS messages_by_channel ON messages(channel, id);
CREATE TABLE IF NOT EXISTS groups (
    channel TEXT NOT NULL, grp TEXT NOT NULL, last_id INTEGER NOT NULL,
    PRIMARY KEY (channel, grp)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending (
    channel TEXT NOT NULL, grp TEXT NOT NULL, id INTEGER NOT NULL, consumer TEXT NOT NULL,
    delivered REAL NOT NULL, deliveries INTEGER NOT NULL,
    PRIMARY KEY (channel, grp, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL);
CREATE INDEX IF NOT EXISTS kv_by_expiry ON kv(expires) WHERE expires IS NOT NULL;
PRAGMA user_version = 1;
"""
_TRIM_EVERY = 256   # publishes between two trims of a channel to MAXLEN
_PURGE_EVERY = 64   # sets between two purges of expired keys


class EmbeddedBus:
    """The bus in one SQLite file. Safe across processes (WAL, busy timeout) and threads (one lock).

    `now` is the injected clock for TTLs and idle times; blocking reads poll with small sleeps.
    synchronous=NORMAL in WAL mode: a killed process loses nothing committed; a power cut may lose the
    last commits, as Redis's default everysec AOF would.
    """

    backend = "embedded"

    def __init__(self, path: Path | str, *, now: Callable[[], datetime] = clock.now,
                 maxlen: int = MAXLEN, busy_timeout: float = 10.0, poll: float = 0.02):
        import sqlite3
        self._sqlite = sqlite3
        self.path = Path(path)
        self.where = str(self.path)
        self.closed = False
        self._now = now
        self._maxlen = _count(maxlen)
        self._busy_timeout = busy_timeout
        self._poll = poll
        self._lock = threading.RLock()
        self._writes = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BrainError(f"bus: cannot create {self.path.parent}: {exc.strerror}") from exc
        self._db = None
        with self._sql():
            self._db = sqlite3.connect(self.where, timeout=busy_timeout, isolation_level=None,
                                       check_same_thread=False)
        try:
            self._init_schema()
        except BaseException:
            self._db.close()
            self.closed = True
            raise

    @classmethod
    def from_brain(cls, brain: "Brain") -> "EmbeddedBus":
        return cls(brain.state_dir / DB_NAME)

    def _init_schema(self) -> None:
        with self._sql() as db:
            if db.execute("PRAGMA user_version").fetchone()[0] == _SCHEMA_VERSION:
                db.execute("PRAGMA synchronous=NORMAL")
                return
        # First open: racing openers would trip over each other switching to WAL, so one at a time.
        with fsio.mutex(self.path.parent / "mutex" / f"{self.path.name}.lock"), self._sql() as db:
            if db.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
                raise BrainError(f"bus: sqlite store {self.where} cannot switch to WAL mode")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)

    @contextlib.contextmanager
    def _sql(self) -> Iterator:
        """The connection, under the thread lock, with every sqlite3 error worded for a user."""
        if self.closed:
            raise BrainError(f"bus: the embedded store {self.where} is closed")
        sqlite3 = self._sqlite
        with self._lock:
            try:
                yield self._db
            except sqlite3.OperationalError as exc:
                text = _one_line(exc)
                if "locked" in text or "busy" in text:
                    raise BrainError(f"bus: sqlite store {self.where} is locked by another process "
                                     f"(waited {self._busy_timeout:g}s): {text}") from exc
                raise BrainError(f"bus: sqlite store {self.where} failed: {text}") from exc
            except sqlite3.DatabaseError as exc:  # not a database, malformed image
                raise BrainError(f"bus: sqlite store {self.where} is unreadable (corrupt?): "
                                 f"{_one_line(exc)}") from exc
            except sqlite3.Error as exc:
                raise BrainError(f"bus: sqlite store {self.where} failed: {_one_line(exc)}") from exc

    @contextlib.contextmanager
    def _txn(self) -> Iterator:
        """A write transaction that takes the write lock up front, so no reader-turned-writer deadlock."""
        with self._sql() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                with contextlib.suppress(self._sqlite.Error):
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _ts(self) -> float:
        return self._now().timestamp()

    def _id(self, value: str | None) -> int:
        if value is None:
            return 0
        if isinstance(value, str) and value.isdigit() and value.isascii():
            return int(value)
        raise BrainError(f"bus: {value!r} is not a message id of the embedded bus")

    def _messages(self, channel: str, rows) -> list[Message]:
        return [(str(i), _decode(f"message {i} on {channel}", body)) for i, body in rows]

    def publish(self, channel: str, message: dict) -> str:
        # Ids come from one AUTOINCREMENT under SQLite's single writer and each insert commits on its
        # own, so a reader never sees id N+1 before id N: `after=` cannot skip a message.
        channel = _name("channel", channel)
        body = _encode("message", message)
        with self._sql() as db:
            mid = db.execute("INSERT INTO messages(channel, body) VALUES (?, ?)",
                             (channel, body)).lastrowid
            if mid % _TRIM_EVERY == 0:
                db.execute("DELETE FROM messages WHERE channel = ? AND id <= (SELECT id FROM messages"
                           " WHERE channel = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
                           (channel, channel, self._maxlen))
        return str(mid)

    def read(self, channel: str, after: str | None = None, count: int = 100,
             block: float = 0) -> list[Message]:
        channel, start, count = _name("channel", channel), self._id(after), _count(count)
        deadline = _Deadline(_seconds("block", block), self._poll)
        while True:
            with self._sql() as db:
                rows = db.execute("SELECT id, body FROM messages WHERE channel = ? AND id > ?"
                                  " ORDER BY id LIMIT ?", (channel, start, count)).fetchall()
            if rows or not deadline.sleep():
                return self._messages(channel, rows)

    def group_read(self, channel: str, group: str, consumer: str, count: int = 1,
                   block: float = 0) -> list[Message]:
        channel, group = _name("channel", channel), _name("group", group)
        consumer, count = _name("consumer", consumer), _count(count)
        deadline = _Deadline(_seconds("block", block), self._poll)
        while True:
            rows = self._deliver(channel, group, consumer, count)
            if rows or not deadline.sleep():
                return self._messages(channel, rows)

    def _deliver(self, channel: str, group: str, consumer: str, count: int) -> list:
        # A cheap look without the write lock first: idle consumers poll this many times a second.
        with self._sql() as db:
            if db.execute("SELECT 1 FROM messages WHERE channel = ? AND id > coalesce((SELECT last_id"
                          " FROM groups WHERE channel = ? AND grp = ?), 0) LIMIT 1",
                          (channel, channel, group)).fetchone() is None:
                return []
        with self._txn() as db:
            db.execute("INSERT OR IGNORE INTO groups(channel, grp, last_id) VALUES (?, ?, 0)",
                       (channel, group))
            (start,) = db.execute("SELECT last_id FROM groups WHERE channel = ? AND grp = ?",
                                  (channel, group)).fetchone()
            rows = db.execute("SELECT id, body FROM messages WHERE channel = ? AND id > ?"
                              " ORDER BY id LIMIT ?", (channel, start, count)).fetchall()
            if rows:
                db.execute("UPDATE groups SET last_id = ? WHERE channel = ? AND grp = ?",
                           (rows[-1][0], channel, group))
                now = self._ts()
                db.executemany("INSERT OR REPLACE INTO pending(channel, grp, id, consumer, delivered,"
                               " deliveries) VALUES (?, ?, ?, ?, ?, 1)",
                               [(channel, group, i, consumer, now) for i, _ in rows])
        return rows

    def ack(self, channel: str, group: str, id: str) -> bool:
        channel, group, mid = _name("channel", channel), _name("group", group), self._id(id)
        with self._sql() as db:
            return db.execute("DELETE FROM pending WHERE channel = ? AND grp = ? AND id = ?",
                              (channel, group, mid)).rowcount > 0

    def reclaim(self, channel: str, group: str, consumer: str, min_idle: float,
                count: int = 100) -> list[Message]:
        channel, group = _name("channel", channel), _name("group", group)
        consumer, count = _name("consumer", consumer), _count(count)
        now = self._ts()
        cutoff = now - _seconds("min_idle", min_idle)
        with self._txn() as db:
            rows = db.execute("SELECT p.id, m.body FROM pending p LEFT JOIN messages m ON m.id = p.id"
                              " WHERE p.channel = ? AND p.grp = ? AND p.delivered <= ?"
                              " ORDER BY p.id LIMIT ?", (channel, group, cutoff, count)).fetchall()
            gone = [(channel, group, i) for i, body in rows if body is None]  # trimmed meanwhile
            rows = [(i, body) for i, body in rows if body is not None]
            db.executemany("DELETE FROM pending WHERE channel = ? AND grp = ? AND id = ?", gone)
            db.executemany("UPDATE pending SET consumer = ?, delivered = ?, deliveries = deliveries + 1"
                           " WHERE channel = ? AND grp = ? AND id = ?",
                           [(consumer, now, channel, group, i) for i, _ in rows])
        return self._messages(channel, rows)

    def set(self, key: str, value: dict, ttl: float | None = None) -> None:
        key, body, ttl = _name("key", key), _encode("value", value), _ttl(ttl)
        now = self._ts()
        with self._sql() as db:
            db.execute("INSERT INTO kv(key, value, expires) VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE"
                       " SET value = excluded.value, expires = excluded.expires",
                       (key, body, None if ttl is None else now + ttl))
            self._writes += 1
            if self._writes % _PURGE_EVERY == 0:
                db.execute("DELETE FROM kv WHERE expires <= ?", (now,))

    def get(self, key: str) -> dict | None:
        key = _name("key", key)
        with self._sql() as db:
            row = db.execute("SELECT value FROM kv WHERE key = ? AND (expires IS NULL OR expires > ?)",
                             (key, self._ts())).fetchone()
        return None if row is None else _decode(f"value of key {key!r}", row[0])

    def set_if_absent(self, key: str, value: dict, ttl: float | None = None) -> bool:
        key, body, ttl = _name("key", key), _encode("value", value), _ttl(ttl)
        now = self._ts()
        # One statement, so atomic: insert, or take over a row whose TTL has run out.
        with self._sql() as db:
            return db.execute("INSERT INTO kv(key, value, expires) VALUES (?, ?, ?) ON CONFLICT(key)"
                              " DO UPDATE SET value = excluded.value, expires = excluded.expires"
                              " WHERE kv.expires IS NOT NULL AND kv.expires <= ?",
                              (key, body, None if ttl is None else now + ttl, now)).rowcount == 1

    def delete(self, key: str) -> bool:
        key = _name("key", key)
        with self._sql() as db:
            live = db.execute("DELETE FROM kv WHERE key = ? AND (expires IS NULL OR expires > ?)",
                              (key, self._ts())).rowcount > 0
            if not live:
                db.execute("DELETE FROM kv WHERE key = ?", (key,))
        return live

    def keys(self, prefix: str = "") -> list[str]:
        prefix = _name("prefix", prefix, empty=True)
        with self._sql() as db:
            rows = db.execute("SELECT key FROM kv WHERE substr(key, 1, ?) = ? AND (expires IS NULL"
                              " OR expires > ?) ORDER BY key", (len(prefix), prefix, self._ts()))
            return [k for (k,) in rows]

    def ping(self) -> None:
        with self._sql() as db:
            db.execute("SELECT count(*) FROM messages").fetchone()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with self._lock, contextlib.suppress(self._sqlite.Error):
                self._db.close()


# --- redis -------------------------------------------------------------------------------------------

def _redis_where(url: str) -> str:
    """host:port (or the socket path) of a Redis URL, without credentials."""
    try:
        parts = urlsplit(url)
        if parts.scheme == "unix":
            return parts.path
        return f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}"
    except ValueError:
        return "<bad url>"


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


class RedisBus:
    """The bus on a Redis server: a Stream per channel, consumer groups, and keys under `nika:kv:`."""

    backend = "redis"

    def __init__(self, url: str, *, maxlen: int = MAXLEN, timeout: float = 5.0,
                 chunk: float = 1.0):
        self.url = url
        self.where = _redis_where(url)
        self.closed = False
        self._maxlen = _count(maxlen)
        self._chunk = chunk      # blocking reads wait in slices shorter than the socket timeout
        self._groups: set[tuple[str, str]] = set()
        try:
            import redis
            from redis.backoff import ExponentialBackoff
            from redis.retry import Retry
        except ModuleNotFoundError as exc:
            raise BrainError("bus: the redis backend needs the `redis` package "
                             "(pip install redis)") from exc
        self._errors = redis.exceptions
        try:
            # One quick retry covers a dropped connection; the default (10, up to 1 s apart) would
            # keep a user staring at a dead server for seconds.
            self._r = redis.Redis.from_url(
                url, decode_responses=True, socket_timeout=timeout, socket_connect_timeout=timeout,
                retry=Retry(ExponentialBackoff(cap=0.1, base=0.01), 1))
        except (ValueError, redis.exceptions.RedisError) as exc:
            raise BrainError(f"bus: bad redis url {url!r}: {_one_line(exc)}") from exc

    @classmethod
    def from_brain(cls, brain: "Brain") -> "RedisBus":
        return cls(redis_url(brain))

    @contextlib.contextmanager
    def _redis(self) -> Iterator:
        if self.closed:
            raise BrainError(f"bus: the redis connection to {self.where} is closed")
        errors = self._errors
        try:
            yield self._r
        except errors.AuthenticationError as exc:
            raise BrainError(f"bus: redis at {self.where} refused the login: {_one_line(exc)}") from exc
        except (errors.ConnectionError, errors.TimeoutError, OSError) as exc:
            raise BrainError(f"bus: redis at {self.where} is unreachable: {_one_line(exc)}") from exc
        except errors.ResponseError as exc:
            raise BrainError(f"bus: redis at {self.where} refused a command: {_one_line(exc)}") from exc
        except errors.RedisError as exc:
            raise BrainError(f"bus: redis at {self.where} failed: {_one_line(exc)}") from exc

    def _id(self, value: str) -> str:
        if isinstance(value, str) and _REDIS_ID.match(value):
            return value
        raise BrainError(f"bus: {value!r} is not a message id of the redis bus")

    def _messages(self, channel: str, entries) -> list[Message]:
        out = []
        for mid, fields in entries or ():
            if fields is None:  # an entry deleted by a trim while it was pending
                continue
            out.append((mid, _decode(f"message {mid} on {channel}", fields.get("m"))))
        return out

    def _ms(self, seconds: float) -> int:
        return max(1, int(seconds * 1000))

    def publish(self, channel: str, message: dict) -> str:
        channel, body = _name("channel", channel), _encode("message", message)
        with self._redis() as r:
            pipe = r.pipeline(transaction=False)
            pipe.xadd(channel, {"m": body}, maxlen=self._maxlen, approximate=True)
            pipe.publish(channel, body)
            mid, _ = pipe.execute()
        return mid

    def read(self, channel: str, after: str | None = None, count: int = 100,
             block: float = 0) -> list[Message]:
        channel, count = _name("channel", channel), _count(count)
        start = "0-0" if after is None else self._id(after)
        deadline = _Deadline(_seconds("block", block), 0)
        while True:
            left = deadline.remaining()
            with self._redis() as r:
                wait = self._ms(min(left, self._chunk)) if left > 0 else None
                res = r.xread({channel: start}, count=count, block=wait)
            if res or deadline.remaining() <= 0:
                return self._messages(channel, res[0][1] if res else ())

    def _ensure_group(self, r, channel: str, group: str) -> None:
        if (channel, group) in self._groups:
            return
        try:
            r.xgroup_create(channel, group, id="0", mkstream=True)
        except self._errors.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._groups.add((channel, group))

    def _with_group(self, r, channel: str, group: str, call: Callable):
        """Run `call` once the group exists; a stream deleted under us (NOGROUP) is recreated once."""
        self._ensure_group(r, channel, group)
        try:
            return call()
        except self._errors.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._groups.discard((channel, group))
            self._ensure_group(r, channel, group)
            return call()

    def group_read(self, channel: str, group: str, consumer: str, count: int = 1,
                   block: float = 0) -> list[Message]:
        channel, group = _name("channel", channel), _name("group", group)
        consumer, count = _name("consumer", consumer), _count(count)
        deadline = _Deadline(_seconds("block", block), 0)
        while True:
            left = deadline.remaining()
            wait = self._ms(min(left, self._chunk)) if left > 0 else None
            with self._redis() as r:
                res = self._with_group(r, channel, group, lambda: r.xreadgroup(
                    group, consumer, {channel: ">"}, count=count, block=wait))
            if res or deadline.remaining() <= 0:
                return self._messages(channel, res[0][1] if res else ())

    def ack(self, channel: str, group: str, id: str) -> bool:
        channel, group, mid = _name("channel", channel), _name("group", group), self._id(id)
        with self._redis() as r:
            return bool(r.xack(channel, group, mid))

    def reclaim(self, channel: str, group: str, consumer: str, min_idle: float,
                count: int = 100) -> list[Message]:
        channel, group = _name("channel", channel), _name("group", group)
        consumer, count = _name("consumer", consumer), _count(count)
        idle = int(_seconds("min_idle", min_idle) * 1000)
        out: list = []
        start = "0-0"
        with self._redis() as r:
            while len(out) < count:
                nxt, entries, *_ = self._with_group(r, channel, group, lambda: r.xautoclaim(
                    channel, group, consumer, idle, start_id=start, count=count - len(out)))
                out.extend(entries)
                if nxt in ("0-0", start):
                    break
                start = nxt
        return self._messages(channel, out)

    def set(self, key: str, value: dict, ttl: float | None = None) -> None:
        key, body, ttl = _name("key", key), _encode("value", value), _ttl(ttl)
        with self._redis() as r:
            r.set(KV_PREFIX + key, body, px=None if ttl is None else self._ms(ttl))

    def get(self, key: str) -> dict | None:
        key = _name("key", key)
        with self._redis() as r:
            text = r.get(KV_PREFIX + key)
        return None if text is None else _decode(f"value of key {key!r}", text)

    def set_if_absent(self, key: str, value: dict, ttl: float | None = None) -> bool:
        key, body, ttl = _name("key", key), _encode("value", value), _ttl(ttl)
        with self._redis() as r:
            return bool(r.set(KV_PREFIX + key, body, nx=True,
                              px=None if ttl is None else self._ms(ttl)))

    def delete(self, key: str) -> bool:
        key = _name("key", key)
        with self._redis() as r:
            return bool(r.delete(KV_PREFIX + key))

    def keys(self, prefix: str = "") -> list[str]:
        prefix = _name("prefix", prefix, empty=True)
        with self._redis() as r:
            found = r.scan_iter(match=_glob_escape(KV_PREFIX + prefix) + "*", count=1000)
            return sorted({k[len(KV_PREFIX):] for k in found})

    def ping(self) -> None:
        with self._redis() as r:
            r.ping()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):
                self._r.close()


# --- registry ----------------------------------------------------------------------------------------

BACKENDS: dict[str, type] = {"embedded": EmbeddedBus, "redis": RedisBus}

_open: dict[tuple, Bus] = {}
_open_lock = threading.Lock()
_OPEN_MAX = 16  # a test run opens many brains; evicted buses close when their last holder drops them


def backend_name(brain: "Brain") -> str:
    env = os.environ.get("NIKA_BUS")
    name = env or brain.config.bus
    if name not in BACKENDS:
        source = "NIKA_BUS" if env else "nika-brain.yml"
        raise BrainError(f"bus: unknown backend {name!r} (from {source}); "
                         f"choose one of {', '.join(sorted(BACKENDS))}")
    return name


def redis_url(brain: "Brain") -> str:
    return os.environ.get("NIKA_REDIS_URL") or brain.config.redis_url


def open_bus(brain: "Brain") -> Bus:
    """The brain's bus, opened once per process (a forked child opens its own)."""
    name = backend_name(brain)
    where = redis_url(brain) if name == "redis" else str(brain.state_dir / DB_NAME)
    key = (os.getpid(), name, where)
    with _open_lock:
        bus = _open.pop(key, None)
        if bus is None or getattr(bus, "closed", False):
            bus = BACKENDS[name].from_brain(brain)
        _open[key] = bus  # most recently used last
        while len(_open) > _OPEN_MAX:
            del _open[next(iter(_open))]
        return bus
