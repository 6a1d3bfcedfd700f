"""What a kernel may ask through its door, and what it is refused (the door's one table).

Allowed: its own records (read, ingest from its own folder), queries over what grants allow, every
kernel's daily summaries, signals published on the health and work-stealing channels (ids, scores,
references: no string longer than SIGNAL_TEXT), its own heartbeat key, the text of a work-stealing
task it owns or that is granted to it (and the commit of a granted task's result). Everything else is refused,
named, journaled: spawn, kill, restart, grant, approve, another kernel's records, directives (the
operator's `kernel readjust`), goals.
"""
from __future__ import annotations

from typing import Any

from nika_brain import bus, errors

SIGNAL_TEXT = 256      # a signal's strings are ids, hashes, states: content goes through the vault
SIGNAL_CHANNELS = (bus.HEALTH, bus.WORK_STEALING)
OPERATOR_OPS = ("spawn", "kill", "restart", "start", "readjust", "grant", "revoke", "purge", "approve",
                "reject", "acl", "env")


class Refused(errors.Refused):
    """A request the door does not carry for this kernel (the reason is said to the kernel)."""


def check_signal(kernel_id: str, channel: str, message: Any) -> dict:
    if channel not in SIGNAL_CHANNELS:
        raise Refused(f"a kernel publishes only on {', '.join(SIGNAL_CHANNELS)} (not {channel})")
    if not isinstance(message, dict):
        raise Refused("a signal is a JSON object")
    for key in ("kernel", "by", "owner"):
        if key in message and message[key] != kernel_id:
            raise Refused(f"a signal's {key} is the kernel that sends it ({kernel_id})")

    def walk(v: Any) -> None:
        if isinstance(v, str) and len(v) > SIGNAL_TEXT:
            raise Refused(f"signals carry ids and references, not content (a string of {len(v)} "
                          f"characters; at most {SIGNAL_TEXT})")
        for x in v.values() if isinstance(v, dict) else v if isinstance(v, list) else ():
            walk(x)
    walk(message)
    return {**message, "kernel": kernel_id} if channel == bus.HEALTH else message


def check_own(kernel_id: str, other: Any, what: str) -> None:
    if other not in (None, kernel_id):
        raise Refused(f"{what} of another kernel ({other}) are not {kernel_id}'s to read")


def check_task(kernel_id: str, tid: str, record: Any, grants: list[dict], *, granted_only: bool = False) -> None:
    """A kernel reads a work-stealing task's text when it owns the task or the newest decision grants it
    to that kernel; it commits a result only for a task granted to it. Nothing else (an unknown task
    is refused the same way: the door does not say which tasks exist)."""
    from nika_brain.federation.stealing.texts import readable_by
    if not isinstance(record, dict):
        raise Refused(f"task {tid} is not granted to {kernel_id}")
    if granted_only:
        ok = bool(grants) and grants[-1].get("to") == kernel_id
    else:
        ok = readable_by(kernel_id, record, grants)
    if not ok:
        what = "its result is not" if granted_only else "its text is not"
        raise Refused(f"task {tid} is not granted to {kernel_id}: {what} {kernel_id}'s to "
                      f"{'commit' if granted_only else 'read'}")
