"""Context-window use of a Claude Code session, read from its transcript JSONL.

The formula (docs/ARCHITECTURE.md): of the last real assistant response,
    used = input_tokens + cache_creation_input_tokens + cache_read_input_tokens
    pct  = used / context_window_size
One API response may be written as several lines sharing `message.id`, so responses are
de-duplicated by that id (the last line of an id wins: it carries the most complete usage).

Lines that do not describe the main conversation's context are skipped: synthetic assistant rows
(`model: "<synthetic>"`, API error messages, all-zero usage), sidechain rows (a subagent has its own
window), lines without usage, and lines that are not JSON (a transcript being appended to may end
in half a line).

The hooks call `last_usage`, which reads the file backwards from its end and stops at the first
real response: a Stop hook on a 50 MB transcript costs the same as on a small one. `scan` reads the
whole file once for session totals (responses and output tokens, de-duplicated).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

DEFAULT_WINDOW = 200_000
EXTENDED_WINDOW = 1_000_000
_BLOCK = 64 * 1024
_MAX_TAIL = 16 * 1024 * 1024  # give up reading backwards after this much: no usage that far back


# NamedTuples, not frozen dataclasses: each of those costs ~0.7 ms to create at import, paid by
# every Stop hook.
class ContextUsage(NamedTuple):
    used: int
    window: int
    pct: float            # 0..100, one decimal
    model: str | None
    message_id: str | None


class Totals(NamedTuple):
    responses: int        # distinct assistant responses (message ids)
    output_tokens: int    # summed once per response
    last: ContextUsage | None


class _Row(NamedTuple):
    message_id: str | None
    model: str | None
    used: int
    output: int


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _row(raw: bytes) -> _Row | None:
    """A real main-conversation assistant response with usage, or None for anything else."""
    # Cheap byte test first: most lines (tool results, user turns) are skipped without json.loads.
    if b'"usage"' not in raw or b'"assistant"' not in raw:
        return None
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("isSidechain") or obj.get("isApiErrorMessage"):
        return None
    msg = obj.get("message")
    if not isinstance(msg, dict) or (obj.get("type") != "assistant" and msg.get("role") != "assistant"):
        return None
    usage = msg.get("usage")
    model = msg.get("model") if isinstance(msg.get("model"), str) else None
    if not isinstance(usage, dict) or model == "<synthetic>":
        return None
    used = (_int(usage.get("input_tokens")) + _int(usage.get("cache_creation_input_tokens"))
            + _int(usage.get("cache_read_input_tokens")))
    if used == 0:
        return None  # an all-zero usage is a placeholder, not a context measurement
    mid = msg.get("id") if isinstance(msg.get("id"), str) else None
    return _Row(mid, model, used, _int(usage.get("output_tokens")))


def window_for(model: str | None, used: int, override: int | None = None) -> int:
    """Context window size: explicit > NIKA_CONTEXT_WINDOW > model tag > what the usage proves."""
    if override and override > 0:
        return override
    env = os.environ.get("NIKA_CONTEXT_WINDOW", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if model and ("[1m]" in model.lower() or model.lower().endswith("-1m")):
        return EXTENDED_WINDOW
    # More than 200k in one request can only happen on an extended-context model.
    return EXTENDED_WINDOW if used > DEFAULT_WINDOW else DEFAULT_WINDOW


def _usage(row: _Row, window: int | None) -> ContextUsage:
    size = window_for(row.model, row.used, window)
    return ContextUsage(row.used, size, round(row.used * 100.0 / size, 1), row.model, row.message_id)


def _open_regular(path: Path):
    """Open for reading only if it is a regular file: a FIFO (or device) named as the transcript
    would block the hook forever. O_NONBLOCK makes the open itself return at once, and fstat on the
    opened descriptor leaves no window for a swap between the check and the open."""
    import stat
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _lines_backwards(path: Path):
    """Yield the file's complete lines, last first, reading fixed blocks from the end."""
    with _open_regular(path) as fh:
        pos = fh.seek(0, os.SEEK_END)
        carry = b""
        read = 0
        while pos > 0 and read < _MAX_TAIL:
            step = min(_BLOCK, pos)
            pos -= step
            fh.seek(pos)
            chunk = fh.read(step) + carry
            read += step
            parts = chunk.split(b"\n")
            carry = parts[0]  # may be the tail of a line that starts in an earlier block
            for line in reversed(parts[1:]):
                if line.strip():
                    yield line
        if pos == 0 and carry.strip():
            yield carry


def last_usage(path: str | Path | None, window: int | None = None) -> ContextUsage | None:
    """Context use of the session at its last real response; None when unknown (no file, no usage)."""
    if not path:
        return None
    try:
        for raw in _lines_backwards(Path(path)):
            row = _row(raw)
            if row is not None:
                # Reading backwards, the first line met of the last response is its last line,
                # which is the one that de-duplication by message id keeps.
                return _usage(row, window)
    except OSError:
        return None
    return None


def answered(path: str | Path | None) -> bool:
    """Whether the newest user line of the transcript has an assistant line after it: the turn's
    response has reached the file (Claude Code may write it just after its Stop hook starts)."""
    if not path:
        return False
    try:
        for raw in _lines_backwards(Path(path)):
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            kind = obj.get("type") if isinstance(obj, dict) else None
            if kind == "assistant":
                return True
            if kind == "user":
                return False
    except OSError:
        return False
    return False


def scan(path: str | Path, window: int | None = None) -> Totals:
    """Whole-transcript totals, de-duplicated by message id (rows without an id count alone)."""
    rows: dict[object, _Row] = {}
    try:
        with _open_regular(Path(path)) as fh:
            for n, raw in enumerate(fh):
                row = _row(raw)
                if row is None:
                    continue
                key = row.message_id if row.message_id is not None else ("line", n)
                rows.pop(key, None)  # re-insert so dict order follows each id's last line
                rows[key] = row
    except OSError:
        return Totals(0, 0, None)
    last = next(reversed(rows.values())) if rows else None
    return Totals(len(rows), sum(r.output for r in rows.values()),
                  _usage(last, window) if last is not None else None)
