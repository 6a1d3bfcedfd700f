"""Human gates: one YAML per gate in gates/, recording message, decision, who, when and via what.

A gate is decided by a human: on the CLI (`human-gate-ack.sh approve|reject <id>`) or by a pull-request
review (the `github` backend). An agent must never approve its own gate, so deciding refuses when run
inside a Claude Code session (it sets CLAUDECODE=1 in every subprocess).
"""
from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Callable, Mapping, Protocol

from nika_brain.support import clock
from nika_brain.brain import Brain
from nika_brain.state.claims import check_id
from nika_brain.errors import EXIT_REFUSED, BrainError
from nika_brain.support.schema import F, fields
from nika_brain.support.yamlsafe import dumps, load_doc

STATUSES = ("pending", "approved", "rejected")
DECISIONS = {"approve": "approved", "reject": "rejected", "approved": "approved", "rejected": "rejected"}


@dataclass(frozen=True)
class Gate:
    id: str
    message: str
    status: str
    created: datetime
    workflow: str | None = None
    step: int | str | None = None
    claim: str | None = None
    reason: str = "human"          # human | partial | breaker | no-tests | zone | close
    decided_at: datetime | None = None
    decided_by: str | None = None
    via: str | None = None         # cli | github-pr
    pr: int | None = None
    note: str = ""

    @property
    def pending(self) -> bool:
        return self.status == "pending"


_SPEC = {
    "id": F(str, required=True), "message": F(str, required=True),
    "status": F(str, required=True, choices=STATUSES), "created": F(str, required=True),
    "workflow": F(str), "step": F((int, str)), "claim": F(str), "reason": F(str, default="human"),
    "decided_at": F(str), "decided_by": F(str), "via": F(str), "pr": F(int), "note": F(str, default=""),
}


def gate_path(brain: Brain, gate_id: str) -> Path:
    return brain.gates_dir / f"{check_id(gate_id)}.yml"


def load_path(path: Path) -> Gate:
    doc = load_doc(path)
    v = fields(doc, doc.data, (), _SPEC)
    if v["id"] != path.stem:
        raise doc.error(f"id does not match the file name ({path.stem})", "id")
    if v["status"] != "pending" and not v["decided_at"]:
        raise doc.error("a decided gate needs decided_at", "decided_at")
    try:
        created = clock.parse(v["created"], what="created")
        decided = clock.parse(v["decided_at"], what="decided_at") if v["decided_at"] else None
    except BrainError as exc:
        raise doc.error(exc.message, "created") from exc
    return Gate(v["id"], v["message"], v["status"], created, v["workflow"], v["step"], v["claim"],
                v["reason"], decided, v["decided_by"], v["via"], v["pr"], v["note"])


def to_dict(g: Gate) -> dict:
    return {"id": g.id, "message": g.message, "status": g.status, "created": clock.iso(g.created),
            "workflow": g.workflow, "step": g.step, "claim": g.claim, "reason": g.reason,
            "decided_at": clock.iso(g.decided_at) if g.decided_at else None,
            "decided_by": g.decided_by, "via": g.via, "pr": g.pr, "note": g.note}


def load_gate(brain: Brain, gate_id: str) -> Gate:
    path = gate_path(brain, gate_id)
    if not path.exists():
        raise BrainError(f"no such gate: {gate_id}")
    return load_path(path)


def list_gates(brain: Brain, status: str | None = None) -> list[Gate]:
    out = brain.load_all(brain.gates_dir, load_path)
    return [g for g in out if status is None or g.status == status]


def save(brain: Brain, g: Gate) -> None:
    brain.write(gate_path(brain, g.id), dumps(to_dict(g)))


def open_gate(brain: Brain, gate_id: str, message: str, *, workflow: str | None = None,
              step: int | str | None = None, claim: str | None = None, reason: str = "human",
              now: datetime | None = None) -> Gate:
    """Create a pending gate; opening an existing gate returns it unchanged (idempotent)."""
    with brain.mutex("gates"):
        path = gate_path(brain, gate_id)
        if path.exists():
            return load_path(path)
        g = Gate(gate_id, message, "pending", now or clock.now(), workflow, step, claim, reason)
        save(brain, g)
    return g


def in_agent_session(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get("CLAUDECODE") == "1" or bool(env.get("NIKA_AGENT"))


def decide(brain: Brain, gate_id: str, decision: str, *, by: str | None = None, via: str = "cli",
           note: str = "", env: Mapping[str, str] | None = None, now: datetime | None = None) -> Gate:
    status = DECISIONS.get(decision)
    if status is None:
        raise BrainError(f"decision must be approve or reject, not {decision!r}")
    if via == "cli" and in_agent_session(env):
        raise BrainError("refused: a human gate cannot be decided from inside an agent session "
                         "(CLAUDECODE=1); a human must run this", EXIT_REFUSED)
    with brain.mutex("gates"):
        g = load_gate(brain, gate_id)
        if not g.pending:
            if g.status == status:
                return g
            raise BrainError(f"gate {gate_id} was already {g.status} by {g.decided_by} ({g.via})",
                             EXIT_REFUSED)
        g = replace(g, status=status, decided_at=now or clock.now(),
                    decided_by=by or _whoami(), via=via, note=note)
        save(brain, g)
    return g


def _whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid-{os.getuid()}"


# ---- backends: who decides a pending gate -------------------------------------------------------

class GateBackend(Protocol):
    name: str

    def announce(self, brain: Brain, gate: Gate) -> Gate:
        """Make the gate visible to humans (print, open a PR...); may record e.g. the PR number."""

    def poll(self, brain: Brain, gate: Gate) -> tuple[str | None, str | None]:
        """(approve | reject | None, who) as the backend currently sees it."""


class CliGate:
    """The human runs `nika-brain gate approve|reject` (or human-gate-ack.sh); nothing to poll."""
    name = "cli"

    def announce(self, brain: Brain, gate: Gate) -> Gate:
        return gate

    def poll(self, brain: Brain, gate: Gate) -> tuple[str | None, str | None]:
        return None, None


class PullRequestGate:
    """The theme branch's pull request on GitHub is the gate: approved → approve, changes
    requested → reject. Token from GITHUB_TOKEN / NIKA_GITHUB_TOKEN; API URL from nika-brain.yml
    (github_api) unless NIKA_GITHUB_API overrides it."""
    name = "github-pr"

    def __init__(self, brain: Brain):
        from nika_brain.github.client import GitHubReviewGate
        env = dict(os.environ)
        env.setdefault("NIKA_GITHUB_API", brain.config.github_api)
        self.client = GitHubReviewGate.from_env(repo=brain.config.github_repo, env=env)

    def _branches(self, brain: Brain, gate: Gate) -> tuple[str, str]:
        from nika_brain.state.workflows import find_workflow
        if not gate.workflow:
            raise BrainError(f"gate {gate.id} names no workflow: no theme branch to review")
        wf = find_workflow(brain, gate.workflow)
        return wf.branch, wf.base or brain.config.base_branch

    def announce(self, brain: Brain, gate: Gate) -> Gate:
        head, base = self._branches(brain, gate)
        pr = self.client.find_or_open_pr(head, base, f"[nika-brain] {gate.workflow}: {head}",
                                         "Review this pull request to decide the brain's human gates.")
        self.client.comment(pr, f"Human gate `{gate.id}`: {gate.message}\n\nApprove the pull request "
                                "to approve, request changes to reject.")
        return replace(gate, pr=pr)

    def poll(self, brain: Brain, gate: Gate) -> tuple[str | None, str | None]:
        if gate.pr is None:
            return None, None
        # Second precision: GitHub stamps reviews in whole seconds.
        since = clock.iso(gate.created.replace(microsecond=0))
        decision, who = self.client.decision(gate.pr, since=since)
        return {"approved": "approve", "rejected": "reject"}.get(decision or ""), who


BACKENDS: dict[str, Callable[[Brain], GateBackend]] = {
    "cli": lambda brain: CliGate(),
    "github": PullRequestGate,
}


def backend(brain: Brain, name: str | None = None) -> GateBackend:
    name = name or brain.config.gate_backend
    if name not in BACKENDS:
        raise BrainError(f"unknown gate backend {name!r} (known: {', '.join(sorted(BACKENDS))})")
    return BACKENDS[name](brain)


def sync(brain: Brain, name: str | None = None, now: datetime | None = None,
         pr: int | None = None) -> list[Gate]:
    """Apply the backend's view to every pending gate (of one PR if given); return those decided."""
    be = backend(brain, name)
    decided = []
    for g in list_gates(brain, "pending"):
        if pr is not None and g.pr != pr:
            continue
        decision, who = be.poll(brain, g)
        if decision:
            decided.append(decide(brain, g.id, decision, by=who, via=be.name, now=now))
    return decided
