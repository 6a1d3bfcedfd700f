"""`nika-brain claude statusline`: the Claude Code status line command (kernel, claim, context use).

Claude Code runs it after every assistant message, so like the hooks it imports no CLI framework.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

from nika_brain.errors import BrainError


def render_statusline(info: dict[str, Any], env: dict[str, str] | None = None) -> str:
    """One line: kernel, claim and context use of the session described by `info` (the status
    line's stdin). Each part that cannot be known is left out, never guessed."""
    from nika_brain.brain import Brain
    from nika_brain.claude import transcript
    from nika_brain.state import sessions

    env = os.environ if env is None else env
    sid = info.get("session_id") if isinstance(info.get("session_id"), str) else None
    ws = info.get("workspace") if isinstance(info.get("workspace"), dict) else {}
    start = ws.get("current_dir") or info.get("cwd")
    record = None
    try:
        brain = Brain.find() if env.get("NIKA_BRAIN_DIR") else Brain.find(start or None)
        if sid and sessions.valid_id(sid):
            record = sessions.load(brain, sid)
    except BrainError:
        brain = None
    kernel = (record.kernel if record else None) or env.get("NIKA_KERNEL_ID")
    claim = (record.claim if record else None) or env.get("NIKA_CLAIM")

    pct = None
    cw = info.get("context_window") if isinstance(info.get("context_window"), dict) else {}
    size = cw.get("context_window_size")
    if (brain is not None and record is not None and isinstance(size, int) and size > 0
            and size != record.reported_window):
        try:  # what Claude Code reports is the window the Stop hook measures against from now on
            record = sessions.report_window(brain, record.id, size)
        except (BrainError, OSError):
            pass
    if isinstance(cw.get("used_percentage"), (int, float)):
        pct = float(cw["used_percentage"])  # Claude Code's own figure, when it gives one
    elif record and record.context_pct is not None:
        pct = record.context_pct
    else:
        size = cw.get("context_window_size") if isinstance(cw.get("context_window_size"), int) else None
        usage = transcript.last_usage(info.get("transcript_path") if isinstance(
            info.get("transcript_path"), str) else None, size)
        pct = usage.pct if usage else None

    parts = ["nika" if brain else "nika (no brain)"]
    if kernel:
        parts.append(f"kernel {kernel}")
    if claim:
        parts.append(f"claim {claim}")
    if pct is not None:
        source = record.context_window_source if record else None
        parts.append(f"ctx {pct:.0f}%" + (f" ({source})" if source and source != "claude" else ""))
    return " · ".join(parts)


def statusline_main() -> int:
    """Entry of `nika-brain claude statusline`: read stdin, print one line, always exit 0."""
    try:
        raw = sys.stdin.read() if sys.stdin is not None and not sys.stdin.isatty() else ""
        try:
            info = json.loads(raw) if raw.strip() else {}
        except ValueError:
            info = {}  # still worth a line: the brain and binding may come from the environment
        line = render_statusline(info if isinstance(info, dict) else {})
    except Exception as exc:  # a status line must never show a traceback
        line = f"nika · status unavailable ({type(exc).__name__})"
    sys.stdout.write(line + "\n")
    return 0
