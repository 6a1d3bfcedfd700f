"""The embedded bus: one SQLite file in WAL mode under the brain's git-ignored state folder."""
from __future__ import annotations

import contextlib
import threading
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from nika_brain.errors import BrainError
from nika_brain.support import clock, fsio

if TYPE_CHECKING:
    from nika_brain.brain import Brain

from nika_brain.bus import codec
from nika_brain.bus.protocol import DB_NAME, MAXLEN, Message

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
        self._maxlen = codec.check_count(maxlen)
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
                text = codec.one_line(exc)
                if "locked" in text or "busy" in text:
                    raise BrainError(f"bus: sqlite store {self.where} is locked by another process "
                                     f"(waited {self._busy_timeout:g}s): {text}") from exc
                raise BrainError(f"bus: sqlite store {self.where} failed: {text}") from exc
            except sqlite3.DatabaseError as exc:  # not a database, malformed image
                raise BrainError(f"bus: sqlite store {self.where} is unreadable (corrupt?): "
                                 f"{codec.one_line(exc)}") from exc
            except sqlite3.Error as exc:
                raise BrainError(f"bus: sqlite store {self.where} failed: {codec.one_line(exc)}") from exc

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

    def _messages(self, channel: str, rows, delivered: bool = False) -> list[Message]:
        read = codec.decode_delivered if delivered else codec.decode
        return [(str(i), read(f"message {i} on {channel}", body)) for i, body in rows]

    def publish(self, channel: str, message: dict) -> str:
        # Ids come from one AUTOINCREMENT under SQLite's single writer and each insert commits on its
        # own, so a reader never sees id N+1 before id N: `after=` cannot skip a message.
        channel = codec.check_name("channel", channel)
        body = codec.encode("message", message)
        with self._sql() as db:
            mid = db.execute("INSERT INTO messages(channel, body) VALUES (?, ?)",
                             (channel, body)).lastrowid
            if mid % _TRIM_EVERY == 0:
                db.execute("DELETE FROM messages WHERE channel = ? AND id <= (SELECT id FROM messages"
                           " WHERE channel = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
                           (channel, channel, self._maxlen))
        return str(mid)

    def trim(self, channel: str, older_than: float) -> int:
        """Messages carry their time in their body ("t" epoch seconds, else "at" ISO): those older
        than the cut go, unless a consumer group still has them pending."""
        from datetime import datetime, timezone
        channel = codec.check_name("channel", channel)
        cut = self._ts() - codec.check_seconds("older_than", older_than, positive=True)
        cut_iso = datetime.fromtimestamp(cut, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        with self._txn() as db:
            n = db.execute(
                "DELETE FROM messages WHERE channel = ? AND (json_extract(body, '$.t') < ? OR "
                "(json_extract(body, '$.t') IS NULL AND substr(json_extract(body, '$.at'), 1, 19) < ?))"
                " AND id NOT IN (SELECT id FROM pending WHERE channel = ?)",
                (channel, cut, cut_iso, channel)).rowcount
        return int(n)

    def read(self, channel: str, after: str | None = None, count: int = 100,
             block: float = 0) -> list[Message]:
        channel, start, count = codec.check_name("channel", channel), self._id(after), codec.check_count(count)
        deadline = codec.Deadline(codec.check_seconds("block", block), self._poll)
        while True:
            with self._sql() as db:
                rows = db.execute("SELECT id, body FROM messages WHERE channel = ? AND id > ?"
                                  " ORDER BY id LIMIT ?", (channel, start, count)).fetchall()
            if rows or not deadline.sleep():
                return self._messages(channel, rows)

    def group_read(self, channel: str, group: str, consumer: str, count: int = 1,
                   block: float = 0) -> list[Message]:
        channel, group = codec.check_name("channel", channel), codec.check_name("group", group)
        consumer, count = codec.check_name("consumer", consumer), codec.check_count(count)
        deadline = codec.Deadline(codec.check_seconds("block", block), self._poll)
        while True:
            rows = self._deliver(channel, group, consumer, count)
            if rows or not deadline.sleep():
                return self._messages(channel, delivered=True, rows=rows)

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
        channel, group, mid = codec.check_name("channel", channel), codec.check_name("group", group), self._id(id)
        with self._sql() as db:
            return db.execute("DELETE FROM pending WHERE channel = ? AND grp = ? AND id = ?",
                              (channel, group, mid)).rowcount > 0

    def reclaim(self, channel: str, group: str, consumer: str, min_idle: float,
                count: int = 100) -> list[Message]:
        channel, group = codec.check_name("channel", channel), codec.check_name("group", group)
        consumer, count = codec.check_name("consumer", consumer), codec.check_count(count)
        now = self._ts()
        cutoff = now - codec.check_seconds("min_idle", min_idle)
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
        return self._messages(channel, delivered=True, rows=rows)

    def set(self, key: str, value: dict, ttl: float | None = None) -> None:
        key, body, ttl = codec.check_name("key", key), codec.encode("value", value), codec.check_ttl(ttl)
        now = self._ts()
        with self._sql() as db:
            db.execute("INSERT INTO kv(key, value, expires) VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE"
                       " SET value = excluded.value, expires = excluded.expires",
                       (key, body, None if ttl is None else now + ttl))
            self._writes += 1
            if self._writes % _PURGE_EVERY == 0:
                db.execute("DELETE FROM kv WHERE expires <= ?", (now,))

    def get(self, key: str) -> dict | None:
        key = codec.check_name("key", key)
        with self._sql() as db:
            row = db.execute("SELECT value FROM kv WHERE key = ? AND (expires IS NULL OR expires > ?)",
                             (key, self._ts())).fetchone()
        return None if row is None else codec.decode(f"value of key {key!r}", row[0])

    def set_if_absent(self, key: str, value: dict, ttl: float | None = None) -> bool:
        key, body, ttl = codec.check_name("key", key), codec.encode("value", value), codec.check_ttl(ttl)
        now = self._ts()
        # One statement, so atomic: insert, or take over a row whose TTL has run out.
        with self._sql() as db:
            return db.execute("INSERT INTO kv(key, value, expires) VALUES (?, ?, ?) ON CONFLICT(key)"
                              " DO UPDATE SET value = excluded.value, expires = excluded.expires"
                              " WHERE kv.expires IS NOT NULL AND kv.expires <= ?",
                              (key, body, None if ttl is None else now + ttl, now)).rowcount == 1

    def delete(self, key: str) -> bool:
        key = codec.check_name("key", key)
        with self._sql() as db:
            live = db.execute("DELETE FROM kv WHERE key = ? AND (expires IS NULL OR expires > ?)",
                              (key, self._ts())).rowcount > 0
            if not live:
                db.execute("DELETE FROM kv WHERE key = ?", (key,))
        return live

    def keys(self, prefix: str = "") -> list[str]:
        prefix = codec.check_name("prefix", prefix, empty=True)
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


