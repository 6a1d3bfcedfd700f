"""Operator corrections: the continuous triage learns from `nika-brain triage correct` (issue 21).

One YAML per correction in the brain's `corrections/` folder (state: written only by nika-brain,
reviewable in git): the prompt, the kernel it belongs to (or none: out of scope), the ask it came
from, when. The goals index takes them in (its digest covers them): a corrected prompt becomes a
canonical prompt of its kernel, and the prompt itself and its near neighbours route as corrected
(router.CORRECTION_RADIUS). Correcting the same prompt again replaces the earlier correction.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nika_brain.errors import BrainError, Invalid

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain

FOLDER = "corrections"


@dataclass(frozen=True)
class Correction:
    id: str
    prompt: str
    kernel: str | None        # None: out of scope, the generalist takes it
    ask: str | None = None    # the ask it came from, when known
    at: str = ""


def folder(brain: Brain) -> Path:
    return brain.root / FOLDER


def correction_id(prompt: str) -> str:
    return "c-" + hashlib.sha256(" ".join(prompt.split()).encode()).hexdigest()[:12]


def ask_prompt(brain: Brain, ask_id: str) -> str:
    """The prompt of an ask recorded by `nika-brain ask` (.nika/asks/<id>.json); one clear error
    when the id is malformed or unknown."""
    from nika_brain.federation.asking.record import load_ask
    rec = load_ask(brain, ask_id)
    prompt = rec.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise BrainError(f"ask {ask_id} has no prompt to correct")
    return prompt


def record(brain: Brain, prompt: str, kernel: str | None, *, ask: str | None = None) -> Correction:
    from nika_brain.support.clock import now
    from nika_brain.support.fsio import atomic_write
    from nika_brain.support.yamlsafe import dumps
    prompt = prompt.strip()
    if not prompt:
        raise Invalid("an empty prompt cannot be corrected")
    c = Correction(correction_id(prompt), prompt, kernel, ask, now().strftime("%Y-%m-%dT%H:%M:%SZ"))
    path = folder(brain) / f"{c.id}.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, dumps({"id": c.id, "prompt": c.prompt, "kernel": c.kernel, "ask": c.ask, "at": c.at}))
    return c


def load_all(brain: Brain | None) -> list[Correction]:
    """Every recorded correction, by id; a damaged file is one clear error naming it."""
    if brain is None:
        return []
    from nika_brain.support.yamlsafe import load_doc
    d = folder(brain)
    if not d.is_dir():
        return []
    out = []
    for path in sorted(d.glob("*.yml")):
        doc = load_doc(path)
        data = doc.data
        if not isinstance(data, dict):
            raise doc.error("expected a mapping {id, prompt, kernel, ask, at}")
        prompt, kernel = data.get("prompt"), data.get("kernel")
        if not isinstance(prompt, str) or not prompt.strip():
            raise doc.error("missing prompt", "prompt")
        if kernel is not None and not isinstance(kernel, str):
            raise doc.error("expected a kernel id or null", "kernel")
        ask, at = data.get("ask"), data.get("at")
        out.append(Correction(correction_id(prompt), prompt.strip(), kernel,
                              ask if isinstance(ask, str) else None, at if isinstance(at, str) else ""))
    return out


def check_kernel(brain: Brain, kernel: str) -> None:
    """A correction names a kernel that exists in this brain."""
    from nika_brain.state.kernels import check_id, list_kernels
    check_id(kernel)
    if kernel not in {k.id for k in list_kernels(brain)}:
        raise BrainError(f"no kernel {kernel!r} in this brain (see `nika-brain kernel list`)")
