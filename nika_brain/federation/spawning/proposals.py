"""Spawn proposals: what a trigger writes instead of spawning, waiting for a human decision.

The seed: no trigger spawns a kernel without explicit human validation (RAM, embeddings, mutation
tournaments cost too much to decide alone). A proposal is `proposals/<id>.yml` in the brain: the
trigger, why, the measured values, the suggested goal, scope and limits, the estimated memory cost,
and the human gate (`gates/spawn-<id>.yml`, the same gates as workflows) that decides it:
`nika-brain kernel approve|reject <id>` (or `nika-brain gate approve|reject spawn-<id>`, or a
pull-request review through the gate backends). Deciding refuses inside an agent session (gates.decide:
CLAUDECODE=1 / NIKA_AGENT), so an agent cannot approve its own proposal.

Approving spawns the kernel (federation core's kernel_spawn) and records it; a failed spawn is
recorded on the proposal. Rejecting is recorded with the measure's signature: the same trigger for the
same kernel does not propose again while its measure has that signature (`silenced`); a pending
proposal of the same trigger and kernel also holds new ones back.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.support import clock

TRIGGERS = ("saturation", "diversity", "doctrine", "explicit")
STATUSES = ("pending", "approved", "rejected", "spawned", "failed")
DEFAULT_MEMORY = "1G"  # the seed: 512 MB - 2 GB per kernel depending on the skills loaded
_ID = re.compile(r"^p-[a-z0-9-]{1,80}$")


def folder(brain: Brain) -> Path:
    return brain.root / "proposals"


def _path(brain: Brain, pid: str) -> Path:
    if not isinstance(pid, str) or not _ID.match(pid):
        raise BrainError(f"not a valid proposal id: {pid!r}")
    return folder(brain) / f"{pid}.yml"


def gate_id(pid: str) -> str:
    return f"spawn-{pid}"


def load(brain: Brain, pid: str) -> dict:
    from nika_brain.support.yamlsafe import load_doc

    path = _path(brain, pid)
    if not path.is_file():
        raise BrainError(f"no such proposal: {pid}")
    doc = load_doc(path)
    if not isinstance(doc.data, dict) or doc.data.get("id") != pid:
        raise BrainError("not a proposal (id does not match the file name)", file=str(path))
    p = doc.data
    if p.get("status") not in STATUSES or p.get("trigger") not in TRIGGERS or \
            not isinstance(p.get("goal"), str) or not isinstance(p.get("scope") or [], list):
        raise BrainError("not a proposal (needs status, trigger, goal and a scope list)", file=str(path))
    return p


def _save(brain: Brain, p: dict) -> None:
    from nika_brain.support.yamlsafe import dumps

    path = _path(brain, p["id"])
    path.parent.mkdir(parents=True, exist_ok=True)
    brain.write(path, dumps(p))


def list_proposals(brain: Brain, status: str | None = None) -> list[dict]:
    out = []
    for path in brain.iter_yaml(folder(brain)):
        try:
            p = load(brain, path.stem)
        except BrainError:
            continue
        if status is None or p.get("status") == status:
            out.append(p)
    return out


def digest(p: dict) -> str:
    """What the operator approves: the proposal's goal, scope, limits, trigger and kernel. The gate's
    message carries it, so editing a pending proposal makes its approval void."""
    keys = ("trigger", "kernel", "goal", "scope", "limits")
    return hashlib.sha256(repr([p.get(k) for k in keys]).encode()).hexdigest()[:16]


def signature(value: Any) -> str:
    return hashlib.sha1(repr(value).encode()).hexdigest()[:12]


def memory_estimate(brain: Brain, kernel_id: str | None) -> str:
    """The source kernel's memory limit when it has one, else the seed's typical kernel (1 GiB)."""
    if kernel_id:
        from nika_brain.state import kernels

        try:
            k = kernels.load_kernel(brain, kernel_id)
        except BrainError:
            return DEFAULT_MEMORY
        if k.limits.memory:
            return k.limits.memory
    return DEFAULT_MEMORY


def propose(
    brain: Brain,
    trigger: str,
    *,
    goal: str,
    why: str,
    measures: dict,
    sig: str,
    kernel: str | None = None,
    scope: tuple[str, ...] | list[str] = (),
    limits: dict | None = None,
    now: datetime | None = None,
) -> dict | None:
    """Write a proposal and open its gate; None when the trigger is silenced or one is pending."""
    if trigger not in TRIGGERS:
        raise BrainError(f"unknown trigger {trigger!r} (known: {', '.join(TRIGGERS)})")
    goal = " ".join((goal or "").split())
    if not goal:
        raise BrainError("a spawn proposal needs a goal")
    if len(goal) > 500:
        raise BrainError("a suggested goal is at most 500 characters")
    from nika_brain.state import gates

    when = now or clock.now()
    with brain.mutex("proposals"):
        for p in list_proposals(brain):
            if p.get("trigger") != trigger or p.get("kernel") != kernel:
                continue
            if p.get("status") == "pending":
                return None  # one decision at a time per trigger and kernel
            if p.get("status") == "rejected" and p.get("signature") == sig:
                return None  # silenced until the measure changes
        stamp = when.strftime("%Y%m%d-%H%M%S")
        base = f"p-{stamp}-{trigger}"
        pid, n = base, 2
        while _path(brain, pid).exists():
            pid, n = f"{base}-{n}", n + 1
        mem = (limits or {}).get("memory") or memory_estimate(brain, kernel)
        p = {
            "id": pid,
            "trigger": trigger,
            "kernel": kernel,
            "status": "pending",
            "why": why,
            "measures": measures,
            "signature": sig,
            "goal": goal,
            "scope": list(scope),
            "limits": {"memory": (limits or {}).get("memory"), "cpu": (limits or {}).get("cpu")},
            "memory_estimate": mem,
            "gate": gate_id(pid),
            "created": clock.iso(when),
            "decided_at": None,
            "decided_by": None,
            "note": "",
            "spawned": None,
            "error": None,
        }
        _save(brain, p)
    gates.open_gate(
        brain,
        gate_id(pid),
        f"spawn a kernel ({trigger}): {goal} - {why} "
        f"(estimated memory {mem}); nika-brain kernel approve|reject {pid} [proposal {digest(p)}]",
        reason="spawn",
        now=when,
    )
    _journal(brain, "SPAWN_PROPOSED", p)
    return p


def _journal(brain: Brain, kind: str, p: dict) -> None:
    from nika_brain.engine import signals

    signals.emit(
        brain,
        kind,
        reason=f"{p['id']} ({p['trigger']}): {p['goal']}",
        payload={
            "proposal": p["id"],
            "trigger": p["trigger"],
            "kernel": p.get("kernel"),
            "status": p["status"],
            "spawned": p.get("spawned"),
        },
        publish=False,
    )


def decide(
    brain: Brain, pid: str, decision: str, *, note: str = "", by: str | None = None, env: Any = None
) -> dict:
    """A human approves (the kernel is spawned) or rejects (the trigger is silenced)."""
    from nika_brain.state import gates

    load(brain, pid)
    gates.decide(brain, gate_id(pid), decision, by=by, note=note, env=env)  # refuses agent sessions
    return apply(brain, pid)


def apply(brain: Brain, pid: str, *, spawn: Any = None) -> dict:
    """Carry out the gate's decision on a pending proposal (idempotent)."""
    from nika_brain.state import gates

    with brain.mutex("proposals"):
        p = load(brain, pid)
        if p["status"] != "pending":
            return p
        g = gates.load_gate(brain, gate_id(pid))  # its own gate, whatever the file says
        if g.pending:
            return p
        if g.status == "approved" and f"[proposal {digest(p)}]" not in g.message:
            raise BrainError(f"proposal {pid} changed since its gate was opened (or its gate is not "
                             "its own); nothing done: propose again")
        authentic = getattr(gates, "authentic", None)  # the operator's signature, where it exists
        why = authentic(brain, g) if authentic is not None else None
        if why:
            raise BrainError(f"proposal {pid}: its gate {g.id} cannot be trusted ({why}); nothing done")
        p.update(
            decided_at=clock.iso(g.decided_at) if g.decided_at else None, decided_by=g.decided_by, note=g.note
        )
        if g.status == "rejected":
            p["status"] = "rejected"
            _save(brain, p)
            _journal(brain, "SPAWN_REJECTED", p)
            return p
        p["status"] = "approved"
        _save(brain, p)
    try:
        k = (spawn or _spawn)(brain, p)
    except BrainError as exc:
        p.update(status="failed", error=str(exc))
    else:
        p.update(status="spawned", spawned=k.id)
    with brain.mutex("proposals"):
        _save(brain, p)
    _journal(brain, "SPAWN_APPROVED", p)
    return p


def _spawn(brain: Brain, p: dict) -> Any:
    from nika_brain.federation.kernels.verbs import kernel_spawn

    return kernel_spawn(
        brain,
        p["goal"],
        tuple(p.get("scope") or ()),
        {"memory": (p.get("limits") or {}).get("memory"), "cpu": (p.get("limits") or {}).get("cpu")},
    )


def reconcile(brain: Brain) -> list[dict]:
    """Apply gates decided elsewhere (`gate approve`, a pull-request review); returns those applied."""
    from nika_brain.state import gates

    done = []
    for p in list_proposals(brain, "pending"):
        try:
            if not gates.load_gate(brain, gate_id(p["id"])).pending:
                done.append(apply(brain, p["id"]))
        except BrainError:
            continue
    return done
