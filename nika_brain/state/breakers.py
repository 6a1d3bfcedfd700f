"""Circuit breakers: consecutive failures per scope, in breakers/<scope>.yml.

N consecutive fails on the same scope (nika-brain.yml breaker_threshold, 3 by default) trip the
breaker: the chain stops, CIRCUIT_BREAK is signalled and a human gate is opened. Never an automatic
relaunch: only a human reset (`preflight-check.sh reset <scope>`, or approving the breaker gate)
closes it again.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.state.scopes import check_scope, normalize_scope, scope_slug, scopes_overlap
from nika_brain.support import clock
from nika_brain.support.schema import F, fields
from nika_brain.support.yamlsafe import dumps, load_doc


@dataclass(frozen=True)
class Breaker:
    scope: str
    fails: int
    tripped: bool
    updated: datetime
    last_claim: str | None = None
    gate: str | None = None


_SPEC = {"scope": F(str, required=True, check=check_scope), "fails": F(int, required=True),
         "tripped": F(bool, required=True),
         "updated": F(str, required=True), "last_claim": F(str), "gate": F(str)}


def breakers_dir(brain: Brain) -> Path:
    return brain.breakers_dir


def breaker_path(brain: Brain, scope: str) -> Path:
    scope = normalize_scope(scope)
    return breakers_dir(brain) / f"{scope_slug(scope)}-{hashlib.sha1(scope.encode()).hexdigest()[:8]}.yml"


def load_path(path: Path) -> Breaker:
    doc = load_doc(path)
    v = fields(doc, doc.data, (), _SPEC)
    try:
        updated = clock.parse(v["updated"], what="updated")
    except BrainError as exc:
        raise doc.error(exc.message, "updated") from exc
    return Breaker(normalize_scope(v["scope"]), v["fails"], v["tripped"], updated, v["last_claim"], v["gate"])


def _save(brain: Brain, b: Breaker) -> None:
    brain.write(breaker_path(brain, b.scope), dumps({
        "scope": b.scope, "fails": b.fails, "tripped": b.tripped, "updated": clock.iso(b.updated),
        "last_claim": b.last_claim, "gate": b.gate}))


def list_breakers(brain: Brain) -> list[Breaker]:
    return brain.load_all(breakers_dir(brain), load_path)


def tripped_for(brain: Brain, scopes: tuple[str, ...] | list[str]) -> list[Breaker]:
    return [b for b in list_breakers(brain) if b.tripped and any(scopes_overlap(b.scope, s) for s in scopes)]


def record(brain: Brain, scopes: tuple[str, ...], status: str, claim: str, *,
           now: datetime | None = None) -> list[Breaker]:
    """Count a step result on each scope; return the breakers that trip now."""
    now = now or clock.now()
    threshold = brain.config.breaker_threshold
    tripped = []
    with brain.mutex("breakers"):
        for scope in scopes:
            path = breaker_path(brain, scope)
            old = load_path(path) if path.exists() else None
            if old and old.last_claim == claim:
                continue  # this result was already counted (a resume after a crash re-routes it)
            if status != "failed":
                if old and old.fails and not old.tripped:
                    _save(brain, replace(old, fails=0, updated=now, last_claim=claim))
                continue
            fails = (old.fails if old else 0) + 1
            b = Breaker(normalize_scope(scope), fails, fails >= threshold, now, claim, old.gate if old else None)
            _save(brain, b)
            if b.tripped and not (old and old.tripped):
                tripped.append(b)
    return tripped


def set_gate(brain: Brain, scope: str, gate_id: str) -> None:
    with brain.mutex("breakers"):
        b = load_path(breaker_path(brain, scope))
        _save(brain, replace(b, gate=gate_id))


def reset(brain: Brain, scope: str) -> Breaker | None:
    """Human reset: the breaker file goes away (history stays in git and the signal journal)."""
    with brain.mutex("breakers"):
        path = breaker_path(brain, scope)
        if not path.exists():
            return None
        b = load_path(path)
        path.unlink()
    return b
