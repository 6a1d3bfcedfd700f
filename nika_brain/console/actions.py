"""The console's state-changing requests: the same core functions the CLI calls.

The console process is the operator: a gate is decided by `engine.service.decide_gate` (as `gate
approve|reject`: signed with the operator key by `state.gates.decide`, journaled, the waiting run
takes its next step at once); a spawn proposal by `federation.spawning.proposals.decide` (as `kernel
approve|reject`); the kernel verbs by `federation.kernels.verbs`; a triage correction by `federation.triage.corrections`
(as `triage correct <ask-id>`). Each returns one line for the page.
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



def correct_ask(brain: Brain, ask_id: str, kernel: str) -> str:
    """The operator says where a recorded ask belongs (a kernel id, or `asks.NO_KERNEL`): recorded as
    `nika-brain triage correct <ask-id> --kernel ID | --none` records it; the next triage learns it."""
    from nika_brain.federation.asking import record
    from nika_brain.federation.triage import corrections

    from .asks import NO_KERNEL
    kernel = kernel.strip()
    if not kernel:
        raise BrainError("a correction names the kernel the prompt belongs to, or none")
    target = None if kernel == NO_KERNEL else kernel
    prompt = record.load_ask(brain, ask_id)["prompt"]
    if target is not None:
        corrections.check_kernel(brain, target)
    c = corrections.record(brain, prompt, target, ask=ask_id)
    return (f"correction {c.id}: ask {ask_id} belongs to {c.kernel or 'no kernel (the generalist)'}; "
            "the next triage learns it")
