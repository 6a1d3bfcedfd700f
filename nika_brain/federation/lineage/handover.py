"""Auto-handover: a kernel session past its context threshold hands its work to a successor kernel.

Hook handlers (registered by name in nika_brain/hooks/claude.py, never imported on PreToolUse):
- `on_checkpoint` (Stop, PreCompact): measures the session's context use; past the threshold it asks
  for the handover once (the session record's `handover`, state `started`, with the measure and the
  transcript). The hook runs inside the kernel's sandbox, which can start no kernel and holds no
  operator key: the federation daemon does the handover (`perform_requested`, each supervisor tick):
  the session's essential state is summarised into `nika_federation_summaries` (key
  `handover:<session>`, when the vault is installed) and the registry; a successor kernel is spawned
  with the same /goal (`kernel_spawn`, parent = the old kernel); the old kernel is marked handed-over.
  The old session's next checkpoint tells it to stop (`continue: false` with the reason), or says once
  that the handover failed and that it keeps running.
- `on_prompt` (UserPromptSubmit): a handed-over session refuses new prompts (the prompt is erased, the
  reason names the successor).
- `on_session_start` (SessionStart): the successor's session is linked to the root entity in the
  registry and receives the parent entity and the summary as context.

Once only: the session record's `handover` key is set under the sessions mutex before anything else
(`started` by the hook, `running` once the daemon took it, then `done` or `failed`); a session that
has one never starts another. A failed spawn marks it `failed`, undoes the handover record, keeps the
old kernel active and tells the user at the session's next checkpoint.

The window: what Claude Code reports (`reported_window` on the session record, written from the
status line's context_window_size or a headless result), else `federation.handover.window` (per
kernel under `kernels: {<id>: {window: ...}}`),
else what the transcript shows (transcript.window_for). The threshold: `federation.handover.threshold`
(41 by default), per kernel the same way. The source used is recorded with the handover.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any

from nika_brain.errors import BrainError
from nika_brain.support import fsio

DEFAULT_THRESHOLD = 41.0
SUMMARY_CAP = 4000
_TAIL = 256 * 1024


# ---- settings ---------------------------------------------------------------------------------


def _settings(brain: Any, kernel_id: str) -> dict:
    raw = (brain.config.federation or {}).get("handover") or {}
    if not isinstance(raw, dict):
        raise BrainError("nika-brain.yml: federation.handover must be a mapping")
    out = {"threshold": raw.get("threshold", DEFAULT_THRESHOLD), "window": raw.get("window")}
    per = (raw.get("kernels") or {}).get(kernel_id) or {}
    if not isinstance(per, dict):
        raise BrainError(f"nika-brain.yml: federation.handover.kernels.{kernel_id} must be a mapping")
    out.update({k: v for k, v in per.items() if k in ("threshold", "window")})
    t = out["threshold"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 100:
        raise BrainError(
            f"nika-brain.yml: federation.handover threshold must be a percentage (0-100], got {t!r}"
        )
    w = out["window"]
    if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w <= 0):
        raise BrainError(
            f"nika-brain.yml: federation.handover window must be a positive integer (tokens), got {w!r}"
        )
    return out


def reported_window(record: dict) -> int | None:
    """The window Claude Code reported for the session (status line), when it was recorded."""
    for key in ("reported_window", "context_window_size"):  # claude-real records reported_window
        v = record.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def measure(brain: Any, kernel_id: str, record: dict, transcript_path: str | None) -> dict | None:
    """{used, window, pct, threshold, source} of the session now; None when unknown."""
    from nika_brain.claude import transcript

    cfg = _settings(brain, kernel_id)
    window, source = reported_window(record), "claude-code"
    if window is None and cfg["window"]:
        window, source = cfg["window"], "setting"
    usage = transcript.last_usage(transcript_path, window=window)
    if usage is None:
        return None
    return {
        "used": usage.used,
        "window": usage.window,
        "pct": usage.pct,
        "threshold": float(cfg["threshold"]),
        "source": source if window else "model",
    }


# ---- the summary --------------------------------------------------------------------------------


def _tail_lines(path: str | None) -> list[dict]:
    if not path:
        return []
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _TAIL))
            raw = fh.read().splitlines()
    except OSError:
        return []
    return fsio.json_objects(raw)


def _text(msg: Any) -> str:
    content = msg.get("content") if isinstance(msg, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text")
    return ""


def build_summary(kernel: Any, session: dict, transcript_path: str | None, m: dict) -> str:
    """Extractive: the goal, where the context stood, the last requests and answers, touched files."""
    turns = []
    for obj in _tail_lines(transcript_path):
        if obj.get("isSidechain"):
            continue
        kind = obj.get("type")
        text = " ".join(_text(obj.get("message")).split())
        if kind in ("user", "assistant") and text:
            turns.append((kind, text[:400]))
    head = (
        f"Handover of session {session.get('id')} of kernel {kernel.id} at {m['pct']}% of a "
        f"{m['window']}-token window (threshold {m['threshold']:g}%)."
    )
    lines = [head, f"Goal: {kernel.goal}"]
    if session.get("claim"):
        lines.append(f"Open claim: {session['claim']}")
    touched = session.get("touched") or []
    if touched:
        lines.append("Files touched: " + ", ".join(touched[-20:]))
    if turns:
        lines.append("Last exchanges (oldest first):")
        lines += [f"- {who}: {text}" for who, text in turns[-8:]]
    text = "\n".join(lines)
    return text if len(text) <= SUMMARY_CAP else text[: SUMMARY_CAP - 12] + "\n[...cut]"


def store_summary(brain: Any, kernel_id: str, session_id: str, text: str, meta: dict) -> str | None:
    """Into nika_federation_summaries when the vault is installed; its id, else None."""
    try:
        from nika_brain.federation.vault import summaries
    except ImportError:
        return None
    s = summaries.put(brain, kernel_id, f"handover:{session_id}", text, meta)
    return getattr(s, "id", None) or f"{kernel_id}:handover:{session_id}"


# ---- spawning the successor -----------------------------------------------------------------


def successor_id(brain: Any, kernel_id: str) -> str:
    from nika_brain.state.kernels import kernel_dir

    base = re.sub(r"-s\d+$", "", kernel_id)
    n = 2
    while kernel_dir(brain, f"{base}-s{n}").exists():
        n += 1
    return f"{base}-s{n}"


def spawn_successor(brain: Any, kernel: Any, new_id: str) -> Any:
    """The same /goal, scope, limits, tags and examples, parent = the old kernel (federation core),
    and the same credentials: the operator gave the kernel its key and Claude config once (spawn
    --env-file, kernel env set); a successor without them stops on Claude Code's login dialog."""
    from nika_brain.federation.kernels import credentials
    from nika_brain.federation.kernels.verbs import kernel_spawn
    from nika_brain.state.kernels import DEFAULT_CARD, kernel_dir

    return kernel_spawn(
        brain,
        kernel.goal,
        kernel.scope,
        kernel.limits,
        kernel_id=new_id,
        tags=kernel.tags,
        examples=kernel.examples,
        region=kernel.region,
        data_class=kernel.data_class,
        doctrine=kernel.doctrine,
        # the default card is the predecessor's by default, not a card the operator named: spawn only
        # checks agents/<card>.md for a named one (a brain may run on the default without the file)
        card=None if kernel.card == DEFAULT_CARD else kernel.card,
        parent=kernel.id,
        runtime=kernel.runtime,
        restart=kernel.restart,
        max_restarts=kernel.max_restarts,
        sandboxed=kernel.sandbox != "off",   # the operator's --no-sandbox holds for the successor
        env=credentials.load(kernel_dir(brain, kernel.id)),
    )


Spawner = Callable[[Any, Any, str], Any]


# ---- the handover ---------------------------------------------------------------------------


def _begin(brain: Any, session_id: str, m: dict) -> bool:
    """Mark the session's handover as started; False when it has one already (never twice)."""
    from nika_brain.state import sessions

    won: list[bool] = []

    def change(data: dict) -> None:
        if data.get("handover"):
            won.append(False)
            return
        data["handover"] = {"state": "started", "at": time.time(), **m}
        won.append(True)

    sessions.update(brain, session_id, change)
    return won[0]


def _finish(brain: Any, session_id: str, **fields: Any) -> None:
    from nika_brain.state import sessions

    def change(data: dict) -> None:
        data["handover"] = {**(data.get("handover") or {}), **fields}

    sessions.update(brain, session_id, change)


def handover(
    brain: Any,
    session_id: str,
    kernel_id: str,
    m: dict,
    transcript_path: str | None,
    *,
    spawn: Spawner = spawn_successor,
) -> dict:
    """Run one handover whose start was claimed. Raises BrainError when the successor cannot start
    (the caller records the failure; the old kernel and session stay as they were)."""
    from nika_brain.engine import signals
    from nika_brain.federation.lineage import registry
    from nika_brain.state import kernels, sessions

    k = kernels.load_kernel(brain, kernel_id)
    session = sessions.raw(brain, session_id)
    reg = registry.get_session(brain, session_id) or {}
    entity = reg.get("entity") or registry.kernel_root(brain, kernel_id, k.goal)
    root = registry.root_of(brain, entity)
    registry.link_session(brain, session_id, kernel=kernel_id, entity=entity)
    text = build_summary(k, {**session, "id": session_id}, transcript_path, m)
    new_id = successor_id(brain, kernel_id)
    record = {
        "from_session": session_id,
        "from_kernel": kernel_id,
        "successor": new_id,
        "entity": entity,
        "root": root,
        "summary": text,
        "summary_id": None,
        "pct": m["pct"],
        "window": m["window"],
        "window_source": m["source"],
        "threshold": m["threshold"],
        "at": time.time(),
        "successor_session": None,
    }
    try:
        record["summary_id"] = store_summary(
            brain, kernel_id, session_id, text, {"session": session_id, "successor": new_id}
        )
    except BrainError as exc:
        record["summary_error"] = str(exc)  # the registry still carries the summary
    # Written before the spawn: the successor's SessionStart may fire before kernel_spawn returns.
    registry.put_handover(brain, new_id, record)
    try:
        spawn(brain, k, new_id)
    except Exception as exc:
        path = registry.folder(brain) / "handovers" / f"{new_id}.yml"
        path.unlink(missing_ok=True)
        raise BrainError(f"successor {new_id} did not start: {exc}") from exc
    kernels.set_status(brain, kernel_id, "handed-over", reason=f"handed over to {new_id} at {m['pct']}%")
    registry.update_session(
        brain,
        session_id,
        successor=new_id,
        handover={"state": "done", "successor": new_id, "pct": m["pct"], "summary_id": record["summary_id"]},
    )
    signals.emit(
        brain,
        "HANDOVER",
        reason=f"{kernel_id} -> {new_id} at {m['pct']}% of {m['window']}",
        payload={
            "session": session_id,
            "from": kernel_id,
            "to": new_id,
            "entity": entity,
            "root": root,
            "summary_id": record["summary_id"],
        },
        publish=False,
    )
    return record


def _reason(state: dict) -> str:
    return (
        f"this session was handed over to kernel {state.get('successor')} at {state.get('pct')}% "
        "of its context window; continue the work there (nika-brain registry show "
        f"{state.get('successor')})."
    )


# ---- hook handlers ----------------------------------------------------------------------------


def _kernel(hook: Any, record: dict) -> str | None:
    return record.get("kernel") or hook.kernel()


def _failure(state: dict) -> str:
    return (f"nika-brain: context at {state.get('pct')}% (threshold {state.get('threshold', 0):g}%) but the "
            f"handover failed: {state.get('error')}. This session keeps running.")


def on_checkpoint(hook: Any) -> Any:
    from nika_brain.state import sessions

    brain, sid = hook.brain, hook.session_id
    if brain is None or not sessions.valid_id(sid):
        return None
    record = sessions.raw(brain, sid)
    state = record.get("handover") or {}
    if state.get("state") == "done":
        return {"stop": _reason(state)}
    if state.get("state") == "failed" and not state.get("said"):
        _finish(brain, sid, said=True)
        return {"message": _failure(state)}
    if state:
        return None  # asked for (by a parallel hook), running, or failed and said: never twice
    kernel_id = _kernel(hook, record)
    if not kernel_id:
        return None
    tpath = hook.data.get("transcript_path")
    tpath = tpath if isinstance(tpath, str) else None
    m = measure(brain, kernel_id, record, tpath)
    if m is None:
        return None
    _saturation(brain, kernel_id, sid, m["pct"])
    if m["pct"] < m["threshold"]:
        return None
    if not _begin(brain, sid, {**m, "kernel": kernel_id, "transcript": tpath}):
        return None
    return {"message": f"nika-brain: context at {m['pct']}% (threshold {m['threshold']:g}%): handing over; "
                       "the federation daemon (`nika-brain federation up`) starts the successor."}


def _take(brain: Any, session_id: str) -> dict | None:
    """The requested handover, now `running` (one daemon takes it); None when another took it."""
    from nika_brain.state import sessions

    taken: list[dict] = []

    def change(data: dict) -> None:
        state = data.get("handover") or {}
        if state.get("state") == "started":
            data["handover"] = {**state, "state": "running"}
            taken.append(state)

    sessions.update(brain, session_id, change)
    return taken[0] if taken else None


def perform_requested(brain: Any, *, spawn: Spawner = spawn_successor) -> list[str]:
    """The daemon's side (each supervisor tick): every handover a kernel's hook asked for is done
    outside the kernel. Returns the successors started (and `failed:<session>` for the failures)."""
    from nika_brain.state import sessions

    out = []
    for s in sessions.list_sessions(brain):
        if (sessions.raw(brain, s.id).get("handover") or {}).get("state") != "started":
            continue
        state = _take(brain, s.id)
        if state is None:
            continue
        kernel_id = state.get("kernel") or s.kernel
        m = {k: state.get(k) for k in ("used", "window", "pct", "threshold", "source")}
        try:
            if not kernel_id:
                raise BrainError("the session names no kernel")
            rec = handover(brain, s.id, kernel_id, m, state.get("transcript"), spawn=spawn)
        except BrainError as exc:
            _finish(brain, s.id, state="failed", error=str(exc))
            out.append(f"failed:{s.id}")
            continue
        _finish(brain, s.id, state="done", successor=rec["successor"], pct=m["pct"])
        out.append(rec["successor"])
    return out


def _saturation(brain: Any, kernel_id: str, session_id: str, pct: float) -> None:
    """A context sample for the saturation trigger, which may write a proposal (never a spawn)."""
    import sys

    from nika_brain.federation.spawning import triggers

    try:
        triggers.record_context(brain, kernel_id, session_id, pct)
        triggers.check_saturation(brain, kernel_id)
    except (BrainError, OSError) as exc:
        print(f"nika-brain hook: saturation trigger: {exc}", file=sys.stderr)


def on_prompt(hook: Any) -> Any:
    from nika_brain.state import sessions

    brain, sid = hook.brain, hook.session_id
    if brain is None or not sessions.valid_id(sid):
        return None
    state = sessions.raw(brain, sid).get("handover") or {}
    if state.get("state") == "done":
        from nika_brain.federation.kernels import health
        health.record_consumed(hook, _reason(state))
        return {"block": _reason(state), "stop": _reason(state)}
    return None


def on_session_start(hook: Any) -> Any:
    from nika_brain.federation.lineage import registry
    from nika_brain.state import sessions

    brain, sid = hook.brain, hook.session_id
    if brain is None or not sessions.valid_id(sid):
        return None
    kernel_id = os.environ.get("NIKA_KERNEL_ID") or hook.kernel()
    if not kernel_id:
        return None
    try:
        ho = registry.get_handover(brain, kernel_id)
    except BrainError:
        return None
    if ho is None:
        return None
    registry.link_session(brain, sid, kernel=kernel_id, entity=ho["root"], predecessor=ho["from_session"])
    if not ho.get("successor_session"):
        ho["successor_session"] = sid
        registry.put_handover(brain, kernel_id, ho)
        registry.update_session(brain, ho["from_session"], successor_session=sid)
    chain = registry.ancestors(brain, ho["entity"])
    lineage = " <- ".join(f"{e['id']} ({e.get('level')}: {e.get('title') or '-'})" for e in chain)
    text = (
        f"nika-brain handover: you succeed session {ho['from_session']} of kernel "
        f"{ho['from_kernel']}, handed over at {ho['pct']}% of its context window. Root entity: "
        f"{ho['root']}; parent entity: {lineage or ho['entity']}. Pick up the work from this "
        f"summary:\n{ho['summary']}"
    )
    return {"context": text}
