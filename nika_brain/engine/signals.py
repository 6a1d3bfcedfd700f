"""BSI signals: structured records appended to journal/signals.jsonl, and published on the bus.

STEP_DONE, GATE_PENDING, BLOCKED / BLOCKED_ON, DONE, CIRCUIT_BREAK, ABORT, ESCALATE, CHECKPOINT,
INFO outbound; ORCHESTRATE, ADAPT, ABORT inbound. One JSON object per line, written with a single
O_APPEND write under the journal mutex; a reader skips a torn last line left by a crash.
"""
from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.support import clock

CHANNEL = "nika:orchestrator:signals"        # outbound, to brain-hypervisor and friends
INBOX = "nika:orchestrator:inbox"            # inbound ORCHESTRATE / ADAPT / ABORT


def journal_path(brain: Brain):
    return brain.journal_dir / "signals.jsonl"


def emit(brain: Brain, type: str, *, workflow: str | None = None, step: str | None = None,
         claim: str | None = None, reason: str = "", payload: dict | None = None,
         now: datetime | None = None, publish: bool = True) -> dict[str, Any]:
    record = {"type": type, "workflow": workflow, "step": step, "claim": claim, "reason": reason,
              "time": clock.iso(now or clock.now())}
    if payload:
        record["payload"] = payload
    line = (json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
    path = journal_path(brain)
    path.parent.mkdir(parents=True, exist_ok=True)
    with brain.mutex("journal"):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and _last_byte(path) != b"\n":
                line = b"\n" + line  # seal a torn tail so the new record stays readable
            os.write(fd, line)
            if brain.config.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    if publish:
        _publish(brain, record)
    return record


def _last_byte(path) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1)


def _publish(brain: Brain, record: dict) -> None:
    """Best effort: the journal is the record; a dead bus must not stop the orchestrator."""
    try:
        from nika_brain import bus
    except ModuleNotFoundError:
        return
    try:
        bus.open_bus(brain).publish(CHANNEL, record)
    except BrainError as exc:
        record_failure = {"type": "INFO", "reason": f"bus publish failed: {exc}", "time": record["time"]}
        emit(brain, record_failure["type"], reason=record_failure["reason"], publish=False)


def read(brain: Brain, *, workflow: str | None = None, types: tuple[str, ...] | None = None) -> list[dict]:
    path = journal_path(brain)
    if not path.exists():
        return []
    out = []
    with open(path, "rb") as fh:
        for raw in fh:
            try:
                rec = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue  # a torn line from a crash mid-append
            if not isinstance(rec, dict):
                continue
            if workflow and rec.get("workflow") != workflow:
                continue
            if types and rec.get("type") not in types:
                continue
            out.append(rec)
    return out
