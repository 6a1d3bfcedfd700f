"""The console's state-changing requests: the same core functions the CLI calls.

The console process is the operator: a gate is decided by `engine.service.decide_gate` (as `gate
approve|reject`: signed with the operator key by `state.gates.decide`, journaled, the waiting run
takes its next step at once); a spawn proposal by `federation.spawning.proposals.decide` (as `kernel
approve|reject`); the kernel verbs by `federation.kernels.verbs`. Each returns one line for the page.
"""
from __future__ import annotations

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.state import kernels

DECISIONS = ("approve", "reject")
KERNEL_ACTIONS = ("readjust", "invoke", "restart", "kill")


def decide_gate(brain: Brain, gate_id: str, decision: str, note: str) -> str:
    from nika_brain.engine import nextstep, service
    if decision not in DECISIONS:
        raise BrainError(f"decision must be approve or reject, not {decision!r}")
    g, out, decided = service.decide_gate(brain, gate_id, decision, note=note)
    line = f"gate {g.id}: {g.status} by {g.decided_by}" + ("" if decided else " already; nothing changed")
    if out is not None:
        line += f" — {nextstep.line(brain, out)}"
    return line


def decide_proposal(brain: Brain, proposal_id: str, decision: str, note: str) -> str:
    from nika_brain.federation.spawning import proposals
    if decision not in DECISIONS:
        raise BrainError(f"decision must be approve or reject, not {decision!r}")
    p = proposals.decide(brain, proposal_id, decision, note=note)
    extra = f" -> kernel {p['spawned']}" if p.get("spawned") else (f" ({p['error']})" if p.get("error") else "")
    return f"proposal {p['id']}: {p['status']}{extra}"


def kernel_action(brain: Brain, kernel_id: str, action: str, text: str, by: str) -> str:
    from nika_brain.federation.kernels import verbs
    kid = kernels.check_id(kernel_id)
    if action == "readjust":
        d = verbs.kernel_readjust(brain, kid, text, by=by)
        return f"directive {d.id} sent to {kid}"
    if action == "invoke":
        out = verbs.kernel_invoke(brain, kid, text, by=by)
        return f"prompt {out['id']} taken by {kid} at {out['taken']}"
    if action == "kill":
        out = verbs.kernel_kill(brain, kid, text, by=by)
        return (f"kernel {kid} killed; {len(out['claims_failed'])} claim(s) failed, "
                f"{len(out['locks_released'])} lock(s) released")
    if action == "restart":
        k = verbs.kernel_restart(brain, kid, by=by)  # under the kernel's lifecycle mutex
        return f"kernel {k.id} restarted ({k.status})"
    raise BrainError(f"unknown action {action!r}: one of {', '.join(KERNEL_ACTIONS)}")

