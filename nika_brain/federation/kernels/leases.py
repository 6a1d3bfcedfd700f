"""Path locks that span machines: a Redis lease beside each YAML lock, when `federation.redis_url`
is configured (brains on several machines, or several clones of one brain, sharing one Redis).

A plain `SET key NX PX` excludes only identical keys, and path scopes overlap (`src/` covers
`src/a.py`, `src/*.py` meets `src/a.py`); so one Lua script does what SET NX PX does, atomically,
over every held lease: drop the expired ones (PX), refuse when a live one overlaps (NX, shared
leases excepted), otherwise write the lease with its expiry and a fencing token from one INCR
counter, so tokens strictly increase across every machine. Renewal and release check owner and
token, so a holder whose lease expired and was taken cannot renew or free the new holder's.

The YAML lock file stays the visible record (same CLI, same exit codes: 3 busy). The lease is taken
first and given back if the file lock then fails. Redis unreachable: the lock is refused (one line,
exit 1), never granted without the lease. The state layer (locks.py) does no network: the CLI and
the services call `lock_acquire`/`lock_release`/`lock_renew` here.
"""
from __future__ import annotations

import json
import time

from nika_brain.brain import Brain
from nika_brain.errors import BrainError, Busy
from nika_brain.federation import options
from nika_brain.state import locks, scopes

_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local path, mode, field = ARGV[1], ARGV[3], ARGV[5]
local function overlaps(a, b)
  if a == b then return true end
  if string.sub(a, -1) == '/' and string.sub(b, 1, #a) == a then return true end
  if string.sub(b, -1) == '/' and string.sub(a, 1, #b) == b then return true end
  return false
end
local held = redis.call('HGETALL', KEYS[1])
for i = 1, #held, 2 do
  local v = cjson.decode(held[i + 1])
  if v.exp <= now then
    redis.call('HDEL', KEYS[1], held[i])
  elseif held[i] ~= field and overlaps(v.path, path) and not (v.mode == 'shared' and mode == 'shared') then
    return {0, held[i + 1]}
  end
end
local token
local cur = redis.call('HGET', KEYS[1], field)
if cur then token = cjson.decode(cur).token else token = redis.call('INCR', KEYS[2]) end
local v = cjson.encode({path = path, scope = ARGV[2], mode = mode, owner = ARGV[6], token = token,
                        exp = now + tonumber(ARGV[4]), host = ARGV[7], machine = ARGV[8]})
redis.call('HSET', KEYS[1], field, v)
-- no key of ours lives forever: the hash and the fencing counter go 30 days after the last acquire
redis.call('EXPIRE', KEYS[1], 2592000)
redis.call('EXPIRE', KEYS[2], 2592000)
redis.call('PUBLISH', KEYS[3], 'acquire')
return {1, token}
"""

_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
local v = cjson.decode(cur)
if v.exp <= now or (ARGV[3] ~= '' and tostring(v.token) ~= ARGV[3]) then return 0 end
v.exp = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(v))
redis.call('PUBLISH', KEYS[2], 'renew')
return 1
"""

_RELEASE = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
if ARGV[2] ~= '' and tostring(cjson.decode(cur).token) ~= ARGV[2] then return 0 end
redis.call('PUBLISH', KEYS[2], 'release')
return redis.call('HDEL', KEYS[1], ARGV[1])
"""


def enabled(brain: Brain) -> bool:
    return bool(options.get(brain, "redis_url"))


def lease_path(scope: str) -> str:
    """'/a/b/' for a folder (subtree), '/a/b' for a file; a glob stands for the folder before it."""
    s = scopes.normalize_scope(scope)
    if s == ".":
        return "/"
    parts = s.rstrip("/").split("/")
    for i, seg in enumerate(parts):
        if any(c in seg for c in "*?["):
            return "/" + "".join(p + "/" for p in parts[:i])
    return "/" + "/".join(parts) + ("/" if s.endswith("/") else "")


class Leases:
    def __init__(self, url: str, prefix: str):
        import redis  # lazily: only a brain with leases pays for it
        self.url = url
        self._r = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self.held_key, self.token_key = prefix + "held", prefix + "token"
        # every acquire, renew and release is announced here: the daemons' lease mirrors
        # (leases_mirror.py) refresh at once instead of at their next poll
        self.events_key = prefix + "events"
        self._acq = self._r.register_script(_ACQUIRE)
        self._ren = self._r.register_script(_RENEW)
        self._rel = self._r.register_script(_RELEASE)

    def _call(self, what, fn, *args, **kw):
        import redis
        try:
            return fn(*args, **kw)
        except redis.RedisError as exc:
            where = self.url.rsplit("@", 1)[-1]
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise BrainError(f"redis lease {what}: {where}: {why}") from exc

    @staticmethod
    def field(scope: str, owner: str) -> str:
        return f"{owner}\0{scopes.normalize_scope(scope)}"

    def try_acquire(self, scope: str, owner: str, mode: str, ttl: float,
                    machine: str = "") -> tuple[int | None, dict | None]:
        import socket
        ms = max(1, int(ttl * 1000))
        ok, data = self._call("acquire", self._acq, keys=[self.held_key, self.token_key, self.events_key], args=[
            lease_path(scope), scopes.normalize_scope(scope), mode, ms, self.field(scope, owner), owner,
            socket.gethostname(), machine])
        if ok == 1:
            return int(data), None
        return None, json.loads(data)

    def renew(self, scope: str, owner: str, ttl: float, token: int | None = None) -> bool:
        return self._call("renew", self._ren, keys=[self.held_key, self.events_key],
                          args=[self.field(scope, owner), max(1, int(ttl * 1000)),
                                "" if token is None else str(token)]) == 1

    def release(self, scope: str, owner: str, token: int | None = None) -> bool:
        return self._call("release", self._rel, keys=[self.held_key, self.events_key],
                          args=[self.field(scope, owner), "" if token is None else str(token)]) == 1

    def held(self) -> list[dict]:
        """The live leases (expired ones wait in the hash until the next acquire drops them)."""
        return self.snapshot()[1]

    def snapshot(self) -> tuple[int, list[dict]]:
        """(Redis' clock in ms, the live leases), read in one round trip."""
        def both():
            pipe = self._r.pipeline(transaction=True)
            pipe.time()
            pipe.hgetall(self.held_key)
            return pipe.execute()
        (sec, usec), raw = self._call("list", both)
        now = int(sec) * 1000 + int(usec) // 1000
        return now, [v for v in (json.loads(x) for x in raw.values()) if v.get("exp", 0) > now]

    def close(self) -> None:
        self._r.close()


_open: dict[str, Leases] = {}


def open_leases(brain: Brain) -> Leases:
    url = options.get(brain, "redis_url")
    key = f"{url}|{options.get(brain, 'lease_prefix')}"
    if key not in _open:
        _open[key] = Leases(url, options.get(brain, "lease_prefix"))
    return _open[key]


def lock_acquire(brain: Brain, scope: str, owner: str, *, mode: str = "exclusive",
                 ttl: float | None = None, wait: float = 0.0, pid: int | None = -1) -> locks.Lock:
    """locks.acquire, plus the Redis lease first when configured (same errors and exit codes)."""
    if not enabled(brain):
        return locks.acquire(brain, scope, owner, mode=mode, ttl=ttl, wait=wait, pid=pid)
    if mode not in locks.MODES:
        raise BrainError(f"lock mode must be one of {', '.join(locks.MODES)}")
    if not owner or not owner.strip():
        raise BrainError("a lock needs an owner (a claim id)")
    ttl = brain.config.lock_ttl if ttl is None else ttl
    le = open_leases(brain)
    from nika_brain.state import machine
    here = machine.load(brain).id  # a lost machine's leases are freed by the others (remote.py)
    deadline = time.monotonic() + wait
    while True:
        token, holder = le.try_acquire(scope, owner, mode, ttl, here)
        if token is not None:
            break
        holder = holder or {}
        if time.monotonic() >= deadline:
            raise Busy(f"scope busy: {holder['scope']} held by {holder['owner']} on "
                       f"{holder.get('host', '?')} (redis lease, token {holder['token']})")
        time.sleep(min(brain.config.lock_poll, max(0.001, deadline - time.monotonic())))
    try:
        return locks.acquire(brain, scope, owner, mode=mode, ttl=ttl,
                             wait=max(0.0, deadline - time.monotonic()), pid=pid)
    except BaseException:
        le.release(scope, owner, token)
        raise


def last_token(brain: Brain, scope: str, owner: str) -> int | None:
    if not enabled(brain):
        return None
    f = Leases.field(scope, owner)
    le = open_leases(brain)
    raw = le._call("get", le._r.hget, le.held_key, f)
    return json.loads(raw)["token"] if raw else None


def lock_release(brain: Brain, scope: str, owner: str) -> bool:
    done = locks.release(brain, scope, owner)
    if enabled(brain):
        open_leases(brain).release(scope, owner)
    return done


def lock_renew(brain: Brain, scope: str, owner: str, *, ttl: float | None = None) -> locks.Lock:
    if enabled(brain):
        t = brain.config.lock_ttl if ttl is None else ttl
        if not open_leases(brain).renew(scope, owner, t):
            raise Busy(f"cannot renew {scopes.normalize_scope(scope)}: its redis lease expired "
                       "or is held by someone else")
    return locks.renew(brain, scope, owner, ttl=ttl)


def held_elsewhere(brain: Brain, scope: str, local_owners: set[str]) -> list[dict]:
    """Live leases overlapping `scope` whose owner holds no local lock file here (another machine or
    clone); [] without leases."""
    if not enabled(brain):
        return []
    return [v for v in open_leases(brain).held()
            if v.get("owner") not in local_owners and scopes.scopes_overlap(v["scope"], scope)]


def release_owner(brain: Brain, owner: str) -> int:
    """Drop every lease of `owner` (a killed or dead kernel, its claims)."""
    if not enabled(brain):
        return 0
    le = open_leases(brain)
    n = 0
    for v in le.held():
        if v.get("owner") == owner and le.release(v["scope"], owner):
            n += 1
    return n
