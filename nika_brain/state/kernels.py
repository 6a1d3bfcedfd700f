"""Kernels: one folder per /goal, kernels/<id>/ with kernel.yml, memory/ and its own .claude/.

Directives sent with `readjust` are appended to kernels/<id>/directives.jsonl ({id, at, text, by}):
append-only, so the history of what a kernel was told is never rewritten. Which directives a
session has already been shown is session state (sessions.py), not kernel state: a successor
session after a handover must see them again.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nika_brain.support import clock
from nika_brain.state import sessions
from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.support.schema import F, fields, name, str_list
from nika_brain.support.yamlsafe import load_doc

STATUSES = ("active", "paused", "handed-over", "killed")
DEFAULT_CARD = "satellite-boot"
_MAX_DIRECTIVE = 4000  # characters: a directive is a patch on the context, not a document


@dataclass(frozen=True)
class Kernel:
    id: str
    goal: str
    tags: tuple[str, ...] = ()
    card: str = DEFAULT_CARD
    parent: str | None = None   # predecessor (kernel id) this kernel succeeds after a handover
    status: str = "active"
    path: Path | None = None

    @property
    def folder(self) -> Path | None:
        return self.path.parent if self.path else None


@dataclass(frozen=True)
class Directive:
    id: str
    at: str
    text: str
    by: str


_SPEC = {
    "id": F(str, required=True, check=name),
    "goal": F(str, required=True),
    "tags": F(list, default=[], check=str_list),
    "card": F(str, default=DEFAULT_CARD, check=name),
    "parent": F(str),
    "status": F(str, default="active", choices=STATUSES),
}


def check_id(kernel_id: str) -> str:
    if name(kernel_id or "") is not None:
        raise BrainError(f"not a valid kernel id: {kernel_id!r}")
    return kernel_id


def kernel_dir(brain: Brain, kernel_id: str) -> Path:
    return brain.kernels_dir / check_id(kernel_id)


def load_path(path: Path) -> Kernel:
    doc = load_doc(path)
    # Later federation fields (resource limits, scope...) may sit beside ours: tolerate them.
    v = fields(doc, doc.data, (), _SPEC, allow_extra=True)
    if v["id"] != path.parent.name:
        raise doc.error(f"id does not match the folder name ({path.parent.name})", "id")
    return Kernel(v["id"], v["goal"], tuple(v["tags"]), v["card"], v["parent"], v["status"], path)


def load_kernel(brain: Brain, kernel_id: str) -> Kernel:
    path = kernel_dir(brain, kernel_id) / "kernel.yml"
    if not path.is_file():
        raise BrainError(f"no such kernel: {kernel_id} (no {brain.rel(path)})")
    return load_path(path)


def list_kernels(brain: Brain) -> list[Kernel]:
    folder = brain.kernels_dir
    if not folder.is_dir():
        return []
    return [load_path(p / "kernel.yml") for p in sorted(folder.iterdir())
            if (p / "kernel.yml").is_file()]


def lineage(brain: Brain, kernel: Kernel, *, limit: int = 10) -> list[Kernel]:
    """Predecessors of `kernel`, nearest first; stops at a missing parent or a cycle."""
    out: list[Kernel] = []
    seen = {kernel.id}
    parent = kernel.parent
    while parent and parent not in seen and len(out) < limit:
        seen.add(parent)
        try:
            k = load_kernel(brain, parent)
        except BrainError:
            break  # a parent that was a session id, or a deleted kernel: the chain ends here
        out.append(k)
        parent = k.parent
    return out


# ---- directives (readjust) ---------------------------------------------------------------------

def directives_path(brain: Brain, kernel_id: str) -> Path:
    return kernel_dir(brain, kernel_id) / "directives.jsonl"


def readjust(brain: Brain, kernel_id: str, text: str, *, by: str,
             now: datetime | None = None) -> Directive:
    """Append a directive for the kernel's sessions; they see it at their next prompt or start."""
    text = (text or "").strip()
    if not text:
        raise BrainError("a directive needs text")
    if len(text) > _MAX_DIRECTIVE:
        raise BrainError(f"a directive is at most {_MAX_DIRECTIVE} characters")
    if not kernel_dir(brain, kernel_id).is_dir():
        raise BrainError(f"no such kernel: {kernel_id}")
    at = clock.iso(now or clock.now())
    path = directives_path(brain, kernel_id)
    with brain.mutex("directives"):
        n = len(list_directives(brain, kernel_id)) + 1
        digest = hashlib.sha1(f"{kernel_id}\0{at}\0{text}".encode()).hexdigest()[:6]
        d = Directive(f"d{n}-{digest}", at, text, by)
        line = json.dumps({"id": d.id, "at": d.at, "text": d.text, "by": d.by}, ensure_ascii=False)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            if brain.config.fsync:
                os.fsync(fh.fileno())
    return d


def list_directives(brain: Brain, kernel_id: str) -> list[Directive]:
    """All directives, oldest first; a torn or foreign line is skipped, not fatal."""
    try:
        with open(directives_path(brain, kernel_id), encoding="utf-8") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise BrainError(f"cannot read directives: {exc.strerror}",
                         file=str(directives_path(brain, kernel_id))) from exc
    out = []
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("id"), str) and isinstance(obj.get("text"), str):
            out.append(Directive(obj["id"], str(obj.get("at", "")), obj["text"], str(obj.get("by", ""))))
    return out


def unseen_directives(brain: Brain, kernel_id: str, session_id: str) -> list[Directive]:
    session = sessions.load(brain, session_id)
    seen = set(session.seen_directives) if session else set()
    return [d for d in list_directives(brain, kernel_id) if d.id not in seen]


def mark_seen(brain: Brain, session_id: str, directives: list[Directive]) -> None:
    if directives:
        sessions.mark_seen(brain, session_id, [d.id for d in directives])
