"""Resetting a tripped circuit breaker: one transition, one BREAKER_RESET signal, its pending gate
approved with it. Both the orchestrator (its gate approved) and `preflight-check.sh reset` use it."""
from __future__ import annotations

from nika_brain.brain import Brain
from nika_brain.engine import signals
from nika_brain.state import breakers, gates


def reset_breaker_state(brain: Brain, scope: str, *, why: str = "") -> breakers.Breaker | None:
    """Reset one breaker and journal it (BREAKER_RESET); its pending gate is approved with it."""
    b = breakers.reset(brain, scope)
    if b is None:
        return None
    if b.gate and gates.gate_path(brain, b.gate).exists() and gates.load_gate(brain, b.gate).pending:
        gates.decide(brain, b.gate, "approve", note=f"breaker reset on {b.scope}")
    signals.emit(brain, "BREAKER_RESET", reason=f"circuit breaker reset on {b.scope} after {b.fails} fails"
                 + (f" ({why})" if why else ""), payload={"scope": b.scope, "gate": b.gate})
    return b
