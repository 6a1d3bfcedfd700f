"""The other machines' path leases, as the hooks see them: a local file the federation daemon keeps
current (federation/kernels/leases_mirror.py writes it), read here with no network and no Redis client.

A brain with `federation.redis_url` lives on several machines (or clones) sharing one Redis: a lock
taken on machine b is a Redis lease, and the PreToolUse and pre-commit hooks on machine a must see
it. They cannot pay for a Redis round trip (nor import its client) on every tool call, so the daemon
mirrors the live leases into `.nika/leases/leases.json` — at once on every acquire or release
(the lease scripts PUBLISH, the daemon subscribes) and at least every `federation.lease_mirror_every`
seconds. The hooks read that file:

- fresh (written less than `federation.lease_mirror_stale` seconds ago, 5 by default, by a daemon
  whose process is alive) and without error: its exclusive leases guard writes like lock files do;
- missing, stale, its daemon gone, or Redis unreachable from the daemon: the mirror cannot say who
  holds what, so **writes are refused with that reason** (fail closed); reads go on.

A brain without `federation.redis_url` has no leases: nothing here applies.
"""
from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from nika_brain.errors import BrainError
from nika_brain.state.locks import Holder, Lock
from nika_brain.state.scopes import covers, normalize_scope
from nika_brain.support import procs

FILE = "leases.json"
STALE_AFTER = 5.0
EVERY = 1.0


FOLDER = "leases"   # its own folder: a sandbox binds it read-only (a file bind would pin one inode)


def path(brain: Any) -> Any:
    return brain.state_dir / FOLDER / FILE


def enabled(brain: Any) -> bool:
    return bool((brain.config.federation or {}).get("redis_url"))


def stale_after(brain: Any) -> float:
    v = (brain.config.federation or {}).get("lease_mirror_stale", STALE_AFTER)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 3600:
        raise BrainError("nika-brain.yml: federation.lease_mirror_stale must be seconds, 0 < s <= 3600")
    return float(v)


def read(brain: Any, *, now: float | None = None) -> list[Lock]:
    """The live leases of the mirror as Lock records (holder = the machine's host, no pid).
    Raises BrainError with the reason when the mirror cannot be trusted (the caller refuses writes)."""
    p = path(brain)
    try:
        with open(p, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise BrainError("no lease mirror: the federation daemon is not running here, so other "
                         "machines' locks cannot be seen (start it: nika-brain federation up)") from None
    except (OSError, ValueError) as exc:
        raise BrainError(f"lease mirror {p.name} unreadable ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("leases"), list):
        raise BrainError(f"lease mirror {p.name} malformed")
    # A sandboxed kernel's hook (its own pid namespace) cannot see the daemon: freshness alone says it
    if not os.environ.get("NIKA_SANDBOX") and not procs.alive(doc.get("pid")):
        raise BrainError(f"lease mirror: the federation daemon that kept it (pid {doc.get('pid')}) is "
                         "gone, so other machines' locks cannot be seen (nika-brain federation up)")
    now = time.time() if now is None else now
    written = doc.get("written")
    if not isinstance(written, (int, float)):
        raise BrainError(f"lease mirror {p.name} malformed (no write time)")
    bound = stale_after(brain)
    if now - written > bound:
        raise BrainError(f"lease mirror stale: last refreshed {now - written:.1f}s ago (bound {bound:g}s)"
                         + (f"; redis: {doc['error']}" if doc.get("error") else ""))
    if doc.get("error"):
        raise BrainError(f"lease mirror: redis unreachable from the daemon: {doc['error']}")
    rnow = doc.get("redis_ms")
    if not isinstance(rnow, (int, float)):
        raise BrainError(f"lease mirror {p.name} malformed (no redis time)")
    out: list[Lock] = []
    for v in doc["leases"]:
        try:
            left = (float(v["exp"]) - float(rnow)) / 1000.0 - (now - written)
            if left <= 0:
                continue
            exp = datetime.fromtimestamp(now + left, timezone.utc)
            out.append(Lock(normalize_scope(v["scope"]), str(v["owner"]), str(v.get("mode", "exclusive")),
                            int(v.get("token", 0)), exp - timedelta(seconds=1), exp,
                            Holder(f"{v.get('machine') or v.get('host') or '?'}, redis lease")))
        except (KeyError, TypeError, ValueError) as exc:
            raise BrainError(f"lease mirror {p.name}: a malformed lease ({exc})") from None
    return out


class WithLeases:
    """A lock view (state.locks.LockView or a tuple) plus the mirrored leases: `covering(rel)` gives
    both, so the hook's lock rule applies to other machines' locks unchanged."""

    def __init__(self, local: Any, leases: list[Lock]):
        self.local, self.leases = local, leases

    def covering(self, rel: str) -> list[Lock]:
        mine = getattr(self.local, "covering", None)
        got = list(mine(rel) if mine else self.local)
        return got + [lk for lk in self.leases if covers(lk.scope, rel)]

    def __iter__(self):
        return iter([*self.local, *self.leases])


def view(brain: Any, local: Any, problems: list[str]) -> Any:
    """For the PreToolUse hook: `local` with the mirror's leases when the brain has leases; when the
    mirror cannot be trusted, its reason goes into `problems` (writes are then refused)."""
    if not enabled(brain):
        return local
    try:
        return WithLeases(local, read(brain))
    except BrainError as exc:
        problems.append(str(exc))
        return local
