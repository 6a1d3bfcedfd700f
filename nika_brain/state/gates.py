"""Human gates: one YAML per gate in gates/, recording message, decision, who, when and via what.

A gate is decided by a human: on the CLI (`human-gate-ack.sh approve|reject <id>`) or by a pull-request
review (the `github` backend). An agent must never approve its own gate. The authority is not an
environment variable (CLAUDECODE=1 only makes the refusal early and clear): a CLI decision carries the
operator's signature (authority.py), which an agent session cannot make because the sandbox denies it
the operator key; a pull-request decision is checked against the review on GitHub itself. A decided
gate that is neither (a file edited by hand) is not authentic: `authentic()` says why, the
orchestrator treats it as still pending, and `validate` reports it.
"""
from __future__ import annotations

import getpass
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.errors import BrainError, Refused
from nika_brain.state import authority
from nika_brain.state.claims import check_id
from nika_brain.support import clock
from nika_brain.support.schema import F, fields, step_id, step_id_error, step_id_yaml
from nika_brain.support.yamlsafe import Doc, dumps, load_doc

STATUSES = ("pending", "approved", "rejected")
DECISIONS = {"approve": "approved", "reject": "rejected", "approved": "approved", "rejected": "rejected"}


@dataclass(frozen=True)
class Gate:
    id: str
    message: str
    status: str
    created: datetime
    workflow: str | None = None
    step: str | None = None         # a step id (support.schema.step_id)
    claim: str | None = None
    reason: str = "human"          # human | partial | breaker | no-tests | zone | close
    decided_at: datetime | None = None
    decided_by: str | None = None
    via: str | None = None         # cli | github-pr
    pr: int | None = None
    note: str = ""
    signature: str | None = None   # the operator's, over every other field (authority.sign)

    @property
    def pending(self) -> bool:
        return self.status == "pending"


_SPEC = {
    "id": F(str, required=True), "message": F(str, required=True),
    "status": F(str, required=True, choices=STATUSES), "created": F(str, required=True),
    "workflow": F(str), "step": F((int, str), check=step_id_error), "claim": F(str),
    "reason": F(str, default="human"),
    "decided_at": F(str), "decided_by": F(str), "via": F(str), "pr": F(int), "note": F(str, default=""),
    "signature": F(str),
}


def gate_path(brain: Brain, gate_id: str) -> Path:
    return brain.gates_dir / f"{check_id(gate_id)}.yml"


def load_path(path: Path, doc: Doc | None = None) -> Gate:
    """The gate in `path` (`doc`: its text already parsed, as the index does from the bytes it hashed)."""
    doc = load_doc(path) if doc is None else doc
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
    step = None if v["step"] is None else step_id(v["step"])
    return Gate(id=v["id"], message=v["message"], status=v["status"], created=created,
                workflow=v["workflow"], step=step, claim=v["claim"], reason=v["reason"], decided_at=decided,
                decided_by=v["decided_by"], via=v["via"], pr=v["pr"], note=v["note"],
                signature=v["signature"])


def to_dict(g: Gate) -> dict:
    return {"id": g.id, "message": g.message, "status": g.status, "created": clock.iso(g.created),
            "workflow": g.workflow, "step": step_id_yaml(g.step), "claim": g.claim, "reason": g.reason,
            "decided_at": clock.iso(g.decided_at) if g.decided_at else None,
            "decided_by": g.decided_by, "via": g.via, "pr": g.pr, "note": g.note,
            "signature": g.signature}


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
              step: str | None = None, claim: str | None = None, reason: str = "human",
              now: datetime | None = None) -> Gate:
    """Create a pending gate; opening an existing gate returns it unchanged (idempotent)."""
    with brain.mutex("gates"):
        path = gate_path(brain, gate_id)
        if path.exists():
            return load_path(path)
        g = Gate(id=gate_id, message=message, status="pending", created=now or clock.now(),
                 workflow=workflow, step=None if step is None else step_id(step), claim=claim,
                 reason=reason)
        save(brain, g)
    return g


def in_agent_session(env: Mapping[str, str] | None = None) -> bool:
    return agent_session_variable(env) is not None


def agent_session_variable(env: Mapping[str, str] | None = None) -> str | None:
    """The variable that marks this process as an agent's (`CLAUDECODE=1`, `NIKA_AGENT=...`), or None."""
    env = os.environ if env is None else env
    if env.get("CLAUDECODE") == "1":
        return "CLAUDECODE=1"
    if env.get("NIKA_AGENT"):
        return f"NIKA_AGENT={env['NIKA_AGENT']}"
    return None


def decide(brain: Brain, gate_id: str, decision: str, *, by: str | None = None, via: str = "cli",
           note: str = "", env: Mapping[str, str] | None = None, now: datetime | None = None) -> Gate:
    return decide_once(brain, gate_id, decision, by=by, via=via, note=note, env=env, now=now)[0]


def already_decided(g: Gate) -> str:
    return f"gate {g.id} is already {g.status} by {g.decided_by} ({g.via})"


def decide_once(brain: Brain, gate_id: str, decision: str, *, by: str | None = None, via: str = "cli",
                note: str = "", env: Mapping[str, str] | None = None,
                now: datetime | None = None) -> tuple[Gate, bool]:
    """The gate after the decision, and whether this call decided it (False: it was already decided
    the same way, nothing written; deciding it the other way is refused)."""
    status = DECISIONS.get(decision)
    if status is None:
        raise BrainError(f"decision must be approve or reject, not {decision!r}")
    marker = agent_session_variable(env) if via == "cli" else None
    if marker:
        raise Refused(f"refused: a human gate cannot be decided from inside an agent session "
                      f"({marker} is set here); a human must run this")
    with brain.mutex("gates"):
        g = load_gate(brain, gate_id)
        if not g.pending:
            if g.status == status:
                return g, False
            raise Refused(f"refused: {already_decided(g)}; a decided gate does not change")
        g = replace(g, status=status, decided_at=now or clock.now(),
                    decided_by=by or _whoami(), via=via, note=note, signature=None)
        if via == "cli":
            g = replace(g, signature=authority.sign(brain, "gate", to_dict(g),
                                                    what=f"deciding gate {gate_id}"))
        save(brain, g)
    return g, True


Review = Callable[["Gate"], "str | None"]   # the PR review's decision (approve | reject | None)


def authentic(brain: Brain, g: Gate, *, review: Review | None = None) -> str | None:
    """Why a decided gate cannot be trusted, or None (pending gates have nothing to prove).

    A CLI decision must carry the operator's signature over the gate as it is now; a pull-request
    decision must match the review on GitHub, which `review` reads (the engine passes one: this
    layer does no network); without it a pull-request decision is unproven."""
    if g.pending:
        return None
    if g.via == "github-pr":
        if review is None:
            return "decided via github-pr, not checked against the review"
        try:
            decision = review(g)
        except BrainError as exc:
            return f"decided via github-pr, and the review cannot be checked ({exc.message})"
        if DECISIONS.get(decision or "") != g.status:
            return (f"says {g.status} via github-pr, but the pull request's review says "
                    f"{decision or 'nothing yet'}")
        return None
    if authority.verify(brain, "gate", to_dict(g), g.signature):
        return None
    if not g.signature:
        return f"says {g.status} without the operator's signature (edited by hand?)"
    return f"says {g.status} with a signature that does not match (edited after the decision?)"


def effective(brain: Brain, g: Gate, *, review: Review | None = None) -> Gate:
    """The gate as the orchestrator must act on it: a decision that is not authentic is pending."""
    why = authentic(brain, g, review=review)
    if why is None:
        return g
    return replace(g, status="pending", message=f"{g.message} [not decided: {why}]")


def _whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid-{os.getuid()}"


# ---- backends: who decides a pending gate -------------------------------------------------------
