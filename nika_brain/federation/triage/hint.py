"""UserPromptSubmit: flag a prompt typed into the wrong kernel (additional context, never a block).

Registered in nika_brain.hooks.claude's dispatch table as "nika_brain.federation.triage.hint:on_user_prompt_submit",
so only UserPromptSubmit imports it; PreToolUse never pays for numpy or the model. It reads the goals
index as saved (no rebuild, no chromadb: a stale index is good enough for a hint), embeds the prompt
once, and says something only when the prompt belongs to another kernel *and* the session's own
kernel would not take it (its confidence is below its threshold). Out-of-scope prompts, prompts for
the generalist, and sessions without a kernel stay silent. Any failure stays silent too (fail open):
a hint must never stand between the user and the agent.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

STATE_DIR = ".nika"   # nika_brain.brain.STATE_DIR (not imported: prefetch runs before the brain loads)

MAX_HINT_PROMPT = 4000  # characters looked at; longer prompts are documents, not requests


class Hint(NamedTuple):
    """Shaped like nika_brain.hooks.claude.Reply (the hooks layer sits above this one: no import)."""
    deny: str | None = None
    context: str | None = None
    block: str | None = None
    message: str | None = None


def hint_text(d: Any) -> str:
    best = d.kernels[0] if d.decision == "kernel" else ", ".join(d.kernels)
    why = d.reason
    return (f"nika-brain triage: this prompt looks like it belongs to kernel {best}, not to this "
            f"kernel ({d.context}) [{why}]. Do what the user asks if it is within this kernel's "
            f"goal; otherwise say so and suggest `nika-brain kernel invoke {d.kernels[0]} \"...\"`.")


_SENT: dict[int, Any] = {}   # hook -> (its hint request, the kernel asked for), sent by prefetch


def _asked(hook: Any) -> tuple[Any, str, str] | None:
    brain = hook.brain
    prompt = hook.data.get("prompt")
    if brain is None or not isinstance(prompt, str) or not prompt.strip():
        return None
    kernel = hook.kernel()
    return (brain, prompt, kernel) if kernel else None


def prefetch(hook: Any) -> None:
    """The first UserPromptSubmit handler: the hint asked of the daemon now, so that its model works
    while this process loads the brain and runs the other handlers (record the prompt taken, the
    heartbeat, directives); the hint handler then only reads the answer. A kernel's session says
    its brain and kernel in its environment (NIKA_BRAIN_DIR, NIKA_KERNEL_ID, set by the runtime), so
    the request leaves before the brain is even imported; the hint handler checks that it asked for
    the kernel the session turns out to be. Silent on any failure (the hint handler asks again)."""
    root, kernel, prompt = os.environ.get("NIKA_BRAIN_DIR"), os.environ.get("NIKA_KERNEL_ID"), hook.data.get("prompt")
    if not root or not kernel or not isinstance(prompt, str) or not prompt.strip():
        return None
    from nika_brain.federation import resident
    try:
        s = resident.send(Path(root) / STATE_DIR, "hint", timeout=10.0, prompt=prompt, kernel=kernel)
    except OSError:
        return None
    if s is not None:
        _SENT[id(hook)] = (s, kernel)
    return None


def on_user_prompt_submit(hook: Any) -> Hint | None:
    asked = _asked(hook)
    sent = _SENT.pop(id(hook), None)
    if asked is None:
        if sent is not None:
            sent[0].close()
        return None
    brain, prompt, kernel = asked
    from nika_brain.federation import resident
    if sent is not None and sent[1] != kernel:   # asked for another kernel than the session's
        sent[0].close()
        sent = None
    try:  # the federation daemon's resident model: this hook process loads none
        served = resident.receive(sent[0]) if sent is not None else \
            resident.request(brain.state_dir, "hint", timeout=10.0, prompt=prompt, kernel=kernel)
    except resident.ResidentError:
        return None
    if served is not None:
        return Hint(context=served["hint"]) if served.get("hint") else None
    from nika_brain.federation.triage import goals
    path = goals.index_path(brain)
    if not path.is_file():
        return None  # no federation index yet: nothing to compare with
    index = goals.load(path)
    if index is None or kernel not in index.model.kernels:
        return None
    from nika_brain.federation.embedding import open_embedder
    from nika_brain.federation.triage.decide import Triage
    emb = open_embedder(brain)
    tri = Triage(index, getattr(emb, "inner", emb), goals.settings(brain))
    d = tri.decide(prompt[:MAX_HINT_PROMPT], context=kernel, aspects=False)
    if not d.wrong_kernel:
        return None
    return Hint(context=hint_text(d))
