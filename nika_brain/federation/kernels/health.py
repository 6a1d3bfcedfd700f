"""Kernel health: the agent's own acknowledgements (hook events), heartbeats with the seed's metrics
on `nika:federation:health`, and the view `federation status` prints.

Events: the kernel's hooks (SessionStart, UserPromptSubmit, Stop) append one JSON line each to
`.nika/federation/<kernel>/events.jsonl` — `session` (the agent started), `taken` (a prompt reached the
agent: sha1 of its text), `answered` (the agent finished a turn, with the last answer's text). That is
how `kernel invoke` knows a prompt was taken: from the agent's own hook, never from the screen.

Heartbeat metrics (per kernel): context_pct (its newest session's context use), error_rate (failed
invocations / invocations over the last 50), ttfa_s (median seconds from taken to answered over the
last 50: the seed's time to first answer), queue_depth (prompts queued and not yet taken). The last
heartbeat is also kept in the bus's keyed state (`kernel:<kernel>:heartbeat`, the kernel's own key),
so any machine on the same Redis sees it.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from nika_brain.brain import Brain
from nika_brain.support import clock, fsio

HEARTBEAT_TTL = 86400.0  # a kernel's last heartbeat key expires a day after its last beat


def heartbeat_key(kernel_id: str) -> str:
    """The kernel's own key (nika:kv:kernel:<id>:*), which its Redis ACL user may write."""
    return f"kernel:{kernel_id}:heartbeat"
_ANSWER_CAP = 4000


def events_path(brain: Brain, kernel_id: str) -> Path:
    return brain.state_dir / "federation" / kernel_id / "events.jsonl"


def prompt_sha(text: str) -> str:
    return hashlib.sha1(" ".join(text.split()).encode("utf-8")).hexdigest()


def record_event(brain: Brain, kernel_id: str, event: str, **data: Any) -> None:
    path = events_path(brain, kernel_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"event": event, "at": clock.iso(clock.now()), "t": clock.now().timestamp(),
                       **data}, ensure_ascii=False)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def read_events(brain: Brain, kernel_id: str, offset: int = 0) -> tuple[list[dict], int]:
    """Events from byte `offset`; returns them and the offset after the last whole line."""
    try:
        with open(events_path(brain, kernel_id), "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    return fsio.json_objects(data[:end].splitlines()), offset + end


def tail_events(brain: Brain, kernel_id: str, max_bytes: int = 256 * 1024) -> list[dict]:
    """The newest events (the last `max_bytes` of the file): metrics never read a whole history."""
    size = events_size(brain, kernel_id)
    start = max(0, size - max_bytes)
    events, _ = read_events(brain, kernel_id, start)
    return events[1:] if start else events  # the first line may be cut


def _median(values: list[float]) -> float:
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def events_size(brain: Brain, kernel_id: str) -> int:
    try:
        return events_path(brain, kernel_id).stat().st_size
    except OSError:
        return 0


# ---- metrics and heartbeats ------------------------------------------------------------------------

def metrics(brain: Brain, kernel_id: str, session_id: str | None = None) -> dict:
    """The heartbeat's metrics. With `session_id` (a hook knows its session) only that session's
    record is read, so a hook's cost does not grow with the brain's history of sessions."""
    from nika_brain.state import prompts as queue
    from nika_brain.state import sessions
    events = tail_events(brain, kernel_id)
    taken = [e for e in events if e.get("event") == "taken"][-50:]
    answered = [e for e in events if e.get("event") == "answered"]
    waits = []
    for t in taken:
        nxt = next((a for a in answered if a.get("session") == t.get("session")
                    and a.get("t", 0) >= t.get("t", 0)), None)
        if nxt:
            waits.append(nxt["t"] - t["t"])
    runs = [e for e in events if e.get("event") == "run-exit"][-50:]
    errors = sum(1 for e in runs if e.get("status") not in (0, None))
    if session_id and sessions.valid_id(session_id):   # a hook's own session: no record, no context use
        one = sessions.load(brain, session_id)
        sess = [one] if one is not None else []
    else:
        sess = [s for s in sessions.list_sessions(brain) if s.kernel == kernel_id]
    sess.sort(key=lambda s: s.heartbeat_at or s.started_at or "")
    pct = sess[-1].context_pct if sess else None
    return {"context_pct": pct, "error_rate": round(errors / len(runs), 3) if runs else 0.0,
            "ttfa_s": round(_median(waits), 3) if waits else None,
            "queue_depth": len(queue.pending(brain, kernel_id)),
            "session": sess[-1].id if sess else None}


def publish_heartbeat(brain: Brain, kernel_id: str, state: str, *, source: str,
                      session_id: str | None = None, **extra: Any) -> dict:
    """Publish one heartbeat on nika:federation:health and keep it as the kernel's last one."""
    from nika_brain import bus
    hb = {"kind": "heartbeat", "kernel": kernel_id, "state": state, "source": source,
          "at": clock.iso(clock.now()), "t": clock.now().timestamp(),
          **metrics(brain, kernel_id, session_id), **extra}
    b = bus.open_bus(brain)
    b.publish(bus.HEALTH, hb)
    b.set(heartbeat_key(kernel_id), hb, ttl=HEARTBEAT_TTL)
    return hb


def turn_in_progress(brain: Brain, kernel_id: str) -> bool:
    """Whether the kernel's agent is in a turn: its last `taken` (UserPromptSubmit) has no `answered`
    (Stop) after it, and no start or stop since. The seed's "pas de prompt en cours"."""
    for e in reversed(tail_events(brain, kernel_id, 64 * 1024)):
        kind = e.get("event")
        if kind == "taken":
            return True
        if kind in ("answered", "session", "consumed", "killed", "stopped", "run-exit", "started"):
            return False
    return False


def publish_event(brain: Brain, kernel_id: str, kind: str, **extra: Any) -> None:
    """A health event that is not a heartbeat: dead, killed, restarted, failed."""
    from nika_brain import bus
    publish_or_warn(brain, bus.HEALTH, {"kind": kind, "kernel": kernel_id,
                                        "at": clock.iso(clock.now()), **extra})


def publish_or_warn(brain: Brain, channel: str, message: dict) -> bool:
    """Publish a signal whose state is already written (a record, a directive file): a bus that is
    down then costs the listeners a signal, not the operator the change, so say it on stderr."""
    from nika_brain import bus
    from nika_brain.errors import BrainError
    try:
        bus.open_bus(brain).publish(channel, message)
        return True
    except BrainError as exc:
        import sys
        print(f"nika-brain: warning: not published on {channel}: {exc}", file=sys.stderr)
        return False


def last_heartbeat(brain: Brain, kernel_id: str) -> dict | None:
    from nika_brain import bus
    return bus.open_bus(brain).get(heartbeat_key(kernel_id))


# ---- the hook side (Claude Code runs these in the kernel's sessions) ------------------------------

def _kernel_of(hook: Any) -> str | None:
    kid = os.environ.get("NIKA_KERNEL_ID") or (hook.kernel() if hook.brain is not None else None)
    if not kid:
        return None
    from nika_brain.support.schema import name  # what state.kernels.check_id checks, without loading it
    return kid if name(kid) is None else None


def _is_prompt(obj: dict) -> bool:
    """A user turn that is a prompt (not a tool result fed back to the model)."""
    msg = obj.get("message")
    if obj.get("type") != "user" or not isinstance(msg, dict):
        return False
    content = msg.get("content")
    if isinstance(content, str):
        return True
    return isinstance(content, list) and any(isinstance(c, dict) and c.get("type") == "text" for c in content)


def _answer_in(lines: list[bytes]) -> tuple[bool, str | None]:
    """(found, text): the last assistant text after the newest prompt; found is False while nothing of
    the turn's answer has reached the transcript (Claude Code may write it just after Stop fires). A
    turn that answered with tools only is found, with no text."""
    seen_assistant = False
    for raw in reversed(lines):
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if _is_prompt(obj):
            return seen_assistant, None   # never the previous turn's answer
        msg = obj.get("message")
        if obj.get("type") == "assistant" and isinstance(msg, dict):
            seen_assistant = True
            content = msg.get("content")
            if isinstance(content, str) and content:
                return True, content[:_ANSWER_CAP]
            if isinstance(content, list):
                text = "".join(c.get("text", "") for c in content if isinstance(c, dict)
                               and c.get("type") == "text")
                if text:
                    return True, text[:_ANSWER_CAP]
    return seen_assistant, None


def _last_answer(transcript_path: object, wait: float = 5.0) -> str | None:
    if not isinstance(transcript_path, str):
        return None
    deadline = time.monotonic() + wait
    while True:
        try:
            with open(transcript_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 256 * 1024))
                lines = fh.read().splitlines()
        except OSError:
            return None
        found, text = _answer_in(lines)
        if found or time.monotonic() >= deadline:
            return text
        time.sleep(0.05)


def record_consumed(hook: Any, reason: str) -> None:
    """A UserPromptSubmit handler erased the prompt (a `decision: block`): no turn follows, so a
    caller waiting for the answer (`invoke --wait`, `ask --wait`) stops waiting at once."""
    kid = _kernel_of(hook) if hook.brain is not None else None
    prompt = hook.data.get("prompt")
    if kid and isinstance(prompt, str):
        record_event(hook.brain, kid, "consumed", session=hook.session_id if isinstance(hook.session_id, str)
                     else None, sha=prompt_sha(prompt), reason=reason[:300])


def on_hook(hook: Any) -> None:
    """SessionStart / UserPromptSubmit / Stop in a kernel's session: record the event, heartbeat."""
    brain = hook.brain
    kid = _kernel_of(hook)
    if brain is None or not kid:
        return None
    sid = hook.session_id if isinstance(hook.session_id, str) else None
    if hook.event == "SessionStart":
        record_event(brain, kid, "session", session=sid, source=hook.data.get("source"),
                     pid=os.getppid())
    elif hook.event == "UserPromptSubmit":
        prompt = hook.data.get("prompt")
        if isinstance(prompt, str):
            record_event(brain, kid, "taken", session=sid, sha=prompt_sha(prompt))
    elif hook.event == "Stop":
        given = hook.data.get("last_assistant_message")   # newer Claude Code hands it to Stop itself
        text = given[:_ANSWER_CAP] if isinstance(given, str) and given else \
            _last_answer(hook.data.get("transcript_path"))
        record_event(brain, kid, "answered", session=sid, text=text)
    else:
        return None
    try:
        publish_heartbeat(brain, kid, "alive", source=f"hook:{hook.event}", session_id=sid)
    except Exception as exc:  # a bus that is down must not break the agent's turn
        import sys
        print(f"nika-brain: heartbeat not published: {exc}", file=sys.stderr)
    return None
