"""Argument checks, JSON encoding and deadlines shared by every bus backend."""
from __future__ import annotations

import json
import math
import re
import time
from typing import TYPE_CHECKING

from nika_brain.errors import BrainError

if TYPE_CHECKING:
    pass


_MAX_NAME = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")   # one C-level scan: every bus call checks its names


def check_name(what: str, value: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        raise BrainError(f"bus: {what} must be a non-empty string, got {value!r}")
    if len(value) > _MAX_NAME or _CONTROL.search(value):
        raise BrainError(f"bus: {what} {value[:40]!r} is too long or has control characters")
    if what == "channel" and ("/" in value or "\\" in value or value in (".", "..")):
        raise BrainError(f"bus: channel {value[:40]!r} looks like a path; a channel is a name "
                         "(letters, digits, '.', ':', '-', '_')")
    return value


def check_count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise BrainError(f"bus: count must be a positive integer, got {count!r}")
    return count


def check_seconds(what: str, value: float | None, *, positive: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        need = "positive" if positive else "non-negative"
        raise BrainError(f"bus: {what} must be a {need} number of seconds, got {value!r}")
    return float(value)


def check_ttl(ttl: float | None) -> float | None:
    return None if ttl is None else check_seconds("ttl", ttl, positive=True)


def encode(what: str, value: dict) -> str:
    if not isinstance(value, dict):
        raise BrainError(f"bus: {what} must be a JSON object (a dict), got {type(value).__name__}")
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        text.encode("utf-8")   # a lone surrogate ("\\udc00" in JSON) has no UTF-8 form to store
    except UnicodeEncodeError as exc:
        raise BrainError(f"bus: {what} holds text that is not valid Unicode (a lone surrogate)") from exc
    except (TypeError, ValueError) as exc:
        raise BrainError(f"bus: {what} is not JSON-serializable: {exc}") from exc
    except RecursionError as exc:
        raise BrainError(f"bus: {what} is nested too deeply") from exc
    return text


def decode(where: str, text: str | None) -> dict:
    try:
        value = json.loads(text) if text is not None else None
    except ValueError as exc:
        raise BrainError(f"bus: {where} is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise BrainError(f"bus: {where} is not a JSON object")
    return value


MALFORMED = "_malformed"


def decode_delivered(where: str, text: str | None) -> dict:
    """A message delivered to a consumer group: a body that is not a JSON object is handed over as
    {MALFORMED: why}, so the consumer acknowledges and journals it and the rest of the batch goes on
    (raising would lose the batch: the group's cursor has already moved past it)."""
    try:
        return decode(where, text)
    except BrainError as exc:
        return {MALFORMED: exc.message}


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


class Deadline:
    """How long a blocking read may still wait; polling backs off from 2 ms to `cap`."""

    def __init__(self, block: float, cap: float):
        self.end = time.monotonic() + block
        self.delay = 0.002
        self.cap = cap

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def sleep(self) -> bool:
        left = self.remaining()
        if left <= 0:
            return False
        time.sleep(min(self.delay, left))
        self.delay = min(self.delay * 2, self.cap)
        return True


