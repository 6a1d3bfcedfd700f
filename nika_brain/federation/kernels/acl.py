"""Per-kernel Redis ACL users (`nika-brain federation acl`): each kernel gets its own Redis user that
may publish on the federation channels (XADD on their streams, PUBLISH on their pub/sub channels,
write-only) and read and write only its own keys (`nika:kernel:<id>:*`, `nika:kv:kernel:<id>:*`);
everything else answers NOPERM. The user's password is written into the kernel's credentials file
(0600: NIKA_REDIS_USER, NIKA_REDIS_PASSWORD, and NIKA_REDIS_URL connecting as that user), which only
that kernel's process receives: its hooks then publish heartbeats as the kernel, not as the admin.

Applied with an administrative connection to `federation.redis_url` (else the brain's redis_url).
"""
from __future__ import annotations

import os
import re
import secrets

from nika_brain import bus
from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation import options
from nika_brain.state import kernels

COMMANDS = ("ping", "hello", "auth", "client|setname", "client|id", "select", "echo",
            "get", "set", "del", "exists", "expire", "pexpire", "ttl", "pttl", "mget",
            "hget", "hset", "hdel", "hgetall", "incr", "scan",
            "xadd", "xrange", "xrevrange", "xlen", "xread", "publish")


def user_name(kernel_id: str) -> str:
    return f"nika-kernel-{kernel_id}"


def own_patterns(kernel_id: str) -> list[str]:
    return [f"nika:kernel:{kernel_id}:*", f"{bus.KV_PREFIX}kernel:{kernel_id}:*"]


def rules(kernel_id: str, password: str) -> list[str]:
    """The ACL SETUSER arguments for one kernel."""
    out = ["reset", "on", f">{password}"]
    out += [f"~{p}" for p in own_patterns(kernel_id)]
    out += [f"%W~{ch}" for ch in bus.FEDERATION_CHANNELS]     # streams: append, never read
    out += [f"&{ch}" for ch in bus.FEDERATION_CHANNELS]       # pub/sub: publish
    out += [f"+{c}" for c in COMMANDS]
    return out


OPERATOR_USER = "nika-operator"


def url(brain: Brain) -> str:
    given = options.get(brain, "redis_url")
    return bus.operator_url(given) if given else bus.redis_url(brain)


def close_default(r, target: str) -> str:
    """Turn Redis' open `default` user off; nika-brain's own connections (the operator's) go as
    OPERATOR_USER, whose URL is written to the operator's private folder first (so nothing is locked
    out). Returns what to say."""
    path = bus.operator_url_path(target)
    if not path.exists():
        pw = secrets.token_urlsafe(24)
        r.execute_command("ACL", "SETUSER", OPERATOR_USER, "reset", "on", f">{pw}", "~*", "&*", "+@all")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(with_user(target, OPERATOR_USER, pw) + "\n")
    r.execute_command("ACL", "SETUSER", "default", "off")
    return f"default user: off (nika-brain connects as {OPERATOR_USER}; its URL is in {path}, the operator's only)"


def with_user(redis_url: str, user: str, password: str) -> str:
    """The same server and database, connecting as `user`: the kernel's bus (NIKA_REDIS_URL)."""
    from urllib.parse import quote, urlsplit, urlunsplit
    u = urlsplit(redis_url)
    host = u.netloc.rsplit("@", 1)[-1]
    return urlunsplit((u.scheme, f"{quote(user, safe='')}:{quote(password, safe='')}@{host}", u.path,
                       u.query, u.fragment))


def _set_credentials(brain: Brain, kernel_id: str, values: dict[str, str]) -> None:
    path = kernels.kernel_dir(brain, kernel_id) / "credentials.env"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    keep = [ln for ln in lines if not re.match(rf"^\s*(export\s+)?({'|'.join(values)})\s*=", ln)]
    keep += [f"{k}={v}" for k, v in values.items()]
    brain.write(path, "\n".join(keep) + "\n")
    os.chmod(path, 0o600)


def apply(brain: Brain, kernel_ids: list[str] | None = None, *, revoke: bool = False) -> list[str]:
    """Create (or rotate) the ACL user of each kernel (all live ones by default), then turn the
    `default` user off; return what was done, a line each."""
    import redis
    ks = [kernels.load_kernel(brain, k) for k in kernel_ids] if kernel_ids else \
        [k for k in kernels.list_kernels(brain) if k.live]
    target = url(brain)
    r = redis.Redis.from_url(target, socket_timeout=5, socket_connect_timeout=5)
    done = []
    try:
        for k in ks:
            name = user_name(k.id)
            if revoke:
                r.execute_command("ACL", "DELUSER", name)
            else:
                pw = secrets.token_urlsafe(24)
                r.execute_command("ACL", "SETUSER", name, *rules(k.id, pw))
                _set_credentials(brain, k.id, {"NIKA_REDIS_USER": name, "NIKA_REDIS_PASSWORD": pw,
                                               "NIKA_REDIS_URL": with_user(target, name, pw)})
            done.append(f"{'revoked' if revoke else 'set'} {name}")
        if not revoke:
            done.append(close_default(r, options.get(brain, "redis_url") or bus.redis_url(brain)))
    except redis.RedisError as exc:
        where = target.rsplit("@", 1)[-1]
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BrainError(f"redis acl: {where}: {why}") from exc
    finally:
        r.close()
    return done
