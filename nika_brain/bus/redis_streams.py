"""The Redis bus: a Stream per channel, consumer groups for work queues, keyed state under nika:kv:."""
from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator
from urllib.parse import urlsplit

from nika_brain.errors import BrainError

if TYPE_CHECKING:
    from nika_brain.brain import Brain

from nika_brain.bus import codec
from nika_brain.bus.protocol import KEY_TTL, KV_PREFIX, MAXLEN, STREAM_TTL, Message


def redis_url(brain: "Brain") -> str:
    """The Redis URL: NIKA_REDIS_URL (a kernel's own ACL user), else nika-brain.yml's redis_url, as the
    operator's user once `federation acl` has turned the default user off (operator_url)."""
    return os.environ.get("NIKA_REDIS_URL") or operator_url(brain.config.redis_url)


def operator_url_path(url: str) -> Path:
    """Where `federation acl` keeps the operator's Redis URL for this server: in the operator's private
    folder (hidden from every kernel's sandbox, denied to agent sessions), 0600."""
    import hashlib

    from nika_brain.state.authority import private_dir
    return private_dir() / "redis" / f"{hashlib.sha256(_redis_where(url).encode()).hexdigest()[:16]}.url"


def operator_url(url: str) -> str:
    """The operator's authenticated URL for the server `url` names, when `federation acl` wrote one."""
    try:
        return operator_url_path(url).read_text(encoding="utf-8").strip() or url
    except OSError:
        return url


_REDIS_ID = re.compile(r"\d+(-\d+)?\Z")


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
        self._maxlen = codec.check_count(maxlen)
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
            raise BrainError(f"bus: bad redis url {url!r}: {codec.one_line(exc)}") from exc

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
            raise BrainError(f"bus: redis at {self.where} refused the login: {codec.one_line(exc)}") from exc
        except (errors.ConnectionError, errors.TimeoutError, OSError) as exc:
            raise BrainError(f"bus: redis at {self.where} is unreachable: {codec.one_line(exc)}") from exc
        except errors.ResponseError as exc:
            raise BrainError(f"bus: redis at {self.where} refused a command: {codec.one_line(exc)}") from exc
        except errors.RedisError as exc:
            raise BrainError(f"bus: redis at {self.where} failed: {codec.one_line(exc)}") from exc

    def _id(self, value: str) -> str:
        if isinstance(value, str) and _REDIS_ID.match(value):
            return value
        raise BrainError(f"bus: {value!r} is not a message id of the redis bus")

    def _messages(self, channel: str, entries, delivered: bool = False) -> list[Message]:
        out = []
        for mid, fields in entries or ():
            if fields is None:  # an entry deleted by a trim while it was pending
                continue
            read = codec.decode_delivered if delivered else codec.decode
            out.append((mid, read(f"message {mid} on {channel}", fields.get("m"))))
        return out

    def _ms(self, seconds: float) -> int:
        return max(1, int(seconds * 1000))

    def publish(self, channel: str, message: dict) -> str:
        channel, body = codec.check_name("channel", channel), codec.encode("message", message)
        with self._redis() as r:
            pipe = r.pipeline(transaction=False)
            pipe.xadd(channel, {"m": body}, maxlen=self._maxlen, approximate=True)
            pipe.expire(channel, STREAM_TTL)
            pipe.publish(channel, body)
            mid, _, _ = pipe.execute()
        return mid

    def trim(self, channel: str, older_than: float) -> int:
        """Stream ids are milliseconds: XTRIM MINID drops the entries older than the cut (exact,
        not `~`: an approximate trim drops whole radix nodes only and kept every entry of a stream
        of fewer than ~100; retention runs once an hour)."""
        import time
        channel = codec.check_name("channel", channel)
        cut = int((time.time() - codec.check_seconds("older_than", older_than, positive=True)) * 1000)
        with self._redis() as r:
            return int(r.xtrim(channel, minid=f"{cut}-0", approximate=False))

    def read(self, channel: str, after: str | None = None, count: int = 100,
             block: float = 0) -> list[Message]:
        channel, count = codec.check_name("channel", channel), codec.check_count(count)
        start = "0-0" if after is None else self._id(after)
        deadline = codec.Deadline(codec.check_seconds("block", block), 0)
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
            r.expire(channel, STREAM_TTL, nx=True)  # a stream made for a group expires too
        except self._errors.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):  # redis-py has no type for it: its reply text is the contract
                raise
        self._groups.add((channel, group))

    def _with_group(self, r, channel: str, group: str, call: Callable):
        """Run `call` once the group exists; a stream deleted under us (NOGROUP) is recreated once."""
        self._ensure_group(r, channel, group)
        try:
            return call()
        except self._errors.ResponseError as exc:
            if "NOGROUP" not in str(exc):  # idem: the server's NOGROUP reply
                raise
            self._groups.discard((channel, group))
            self._ensure_group(r, channel, group)
            return call()

    def group_read(self, channel: str, group: str, consumer: str, count: int = 1,
                   block: float = 0) -> list[Message]:
        channel, group = codec.check_name("channel", channel), codec.check_name("group", group)
        consumer, count = codec.check_name("consumer", consumer), codec.check_count(count)
        deadline = codec.Deadline(codec.check_seconds("block", block), 0)
        while True:
            left = deadline.remaining()
            wait = self._ms(min(left, self._chunk)) if left > 0 else None
            with self._redis() as r:
                res = self._with_group(r, channel, group, lambda wait=wait: r.xreadgroup(
                    group, consumer, {channel: ">"}, count=count, block=wait))
            if res or deadline.remaining() <= 0:
                return self._messages(channel, delivered=True, entries=res[0][1] if res else ())

    def ack(self, channel: str, group: str, id: str) -> bool:
        channel, group, mid = codec.check_name("channel", channel), codec.check_name("group", group), self._id(id)
        with self._redis() as r:
            return bool(r.xack(channel, group, mid))

    def reclaim(self, channel: str, group: str, consumer: str, min_idle: float,
                count: int = 100) -> list[Message]:
        channel, group = codec.check_name("channel", channel), codec.check_name("group", group)
        consumer, count = codec.check_name("consumer", consumer), codec.check_count(count)
        idle = int(codec.check_seconds("min_idle", min_idle) * 1000)
        out: list = []
        start = "0-0"
        with self._redis() as r:
            while len(out) < count:
                nxt, entries, *_ = self._with_group(r, channel, group, lambda start=start: r.xautoclaim(
                    channel, group, consumer, idle, start_id=start, count=count - len(out)))
                out.extend(entries)
                if nxt in ("0-0", start):
                    break
                start = nxt
        return self._messages(channel, delivered=True, entries=out)

    def set(self, key: str, value: dict, ttl: float | None = None) -> None:
        key, body, ttl = codec.check_name("key", key), codec.encode("value", value), codec.check_ttl(ttl)
        with self._redis() as r:
            r.set(KV_PREFIX + key, body, px=self._ms(KEY_TTL if ttl is None else ttl))

    def get(self, key: str) -> dict | None:
        key = codec.check_name("key", key)
        with self._redis() as r:
            text = r.get(KV_PREFIX + key)
        return None if text is None else codec.decode(f"value of key {key!r}", text)

    def set_if_absent(self, key: str, value: dict, ttl: float | None = None) -> bool:
        key, body, ttl = codec.check_name("key", key), codec.encode("value", value), codec.check_ttl(ttl)
        with self._redis() as r:
            return bool(r.set(KV_PREFIX + key, body, nx=True,
                              px=self._ms(KEY_TTL if ttl is None else ttl)))

    def delete(self, key: str) -> bool:
        key = codec.check_name("key", key)
        with self._redis() as r:
            return bool(r.delete(KV_PREFIX + key))

    def keys(self, prefix: str = "") -> list[str]:
        prefix = codec.check_name("prefix", prefix, empty=True)
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


