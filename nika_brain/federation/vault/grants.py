"""Grants: who may read whose vault records, as YAML state files in the brain (`grants/`).

`grants/<owner>--<reader>.yml` says that kernel <reader> may read kernel <owner>'s records, for some
levels (all when the list is empty) and until some time (forever when null). The file is the record:
it is reviewed in git, listed in BRAIN-INDEX.md, and every grant and revoke is journaled
(VAULT_GRANT / VAULT_REVOKE in journal/signals.jsonl). A grant is signed with the operator's key; an
unsigned or forged one (a file an agent wrote) counts as absent, as an expired one does (issue 24).
"""
from __future__ import annotations

import os
from datetime import datetime

from nika_brain.brain import Brain
from nika_brain.engine import signals
from nika_brain.errors import BrainError, Refused
from nika_brain.federation.vault.records import check_kernel, check_level
from nika_brain.state.grants import Grant, grant_path, grants_dir, list_grants, load_path  # noqa: F401  (the API)
from nika_brain.support import clock
from nika_brain.support.yamlsafe import dumps


def active_for(brain: Brain, reader: str, *, now: datetime | None = None) -> dict[str, Grant]:
    """owner -> grant, for the grants that let `reader` read now."""
    from nika_brain.state.grants import authentic
    now = now or clock.now()
    return {g.owner: g for g in list_grants(brain)
            if g.reader == reader and g.active(now) and authentic(brain, g) is None}


def _check_actor(owner: str, verb: str) -> str:
    session_kernel = os.environ.get("NIKA_KERNEL_ID")
    if session_kernel and session_kernel != owner:
        raise Refused(f"refused: a session of kernel {session_kernel} cannot {verb} access to "
                      f"kernel {owner}'s records (only {owner} or a person outside a kernel session can)")
    return session_kernel or os.environ.get("USER") or "cli"


def grant(brain: Brain, owner: str, reader: str, *, levels: list[str] | tuple[str, ...] = (),
          until: str | None = None, now: datetime | None = None) -> Grant:
    check_kernel(owner), check_kernel(reader)
    if owner == reader:
        raise BrainError(f"kernel {owner} reads its own records already; a grant needs two kernels")
    for level in levels:
        check_level(level)
    now = now or clock.now()
    if until is not None:
        end = clock.parse(until, what="--until")
        if end <= now:
            raise BrainError(f"--until {until} is not in the future")
        until = clock.iso(end)
    by = _check_actor(owner, "grant")
    from nika_brain.state import authority
    from nika_brain.state.grants import SIGNED_KIND
    g = Grant(owner, reader, tuple(dict.fromkeys(levels)), until, by, clock.iso(now))
    data = g.fields()
    data["signature"] = authority.sign(brain, SIGNED_KIND, data, what="granting vault access")
    with brain.mutex("grants"):
        brain.write(grant_path(brain, owner, reader), dumps(data))
    signals.emit(brain, "VAULT_GRANT", reason=f"{reader} may read {owner}'s vault records",
                 payload=data, now=now, publish=False)
    return g


def revoke(brain: Brain, owner: str, reader: str, *, now: datetime | None = None) -> bool:
    path = grant_path(brain, owner, reader)
    by = _check_actor(owner, "revoke")
    with brain.mutex("grants"):
        if not path.exists():
            return False
        path.unlink()
    signals.emit(brain, "VAULT_REVOKE", reason=f"{reader} may no longer read {owner}'s vault records",
                 payload={"owner": owner, "reader": reader, "by": by}, now=now, publish=False)
    return True


def drop_kernel(brain: Brain, kernel_id: str) -> int:
    """Remove every grant naming `kernel_id` (rag purge); returns how many went."""
    n = 0
    with brain.mutex("grants"):
        for g in list_grants(brain):
            if kernel_id in (g.owner, g.reader):
                grant_path(brain, g.owner, g.reader).unlink(missing_ok=True)
                n += 1
    return n
