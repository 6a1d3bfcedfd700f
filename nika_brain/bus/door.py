"""The client side of the doors. Inside a kernel's sandbox, the bus, the vault and the summaries are
reached only through one unix socket, bound at `SOCKET` (the same path in every sandbox; each
kernel's is its own). The server (nika_brain.federation.doors) knows the kernel by which socket the
request came on, never by what the request says.

A satellite's door (federation/doors/claim.py) is named by `$NIKA_DOOR`: its lock and claim changes go
there (`claim_door()`). The variable only says where the door is: the server checks the caller's
process, and a satellite that drops it meets a read-only `locks/` and `claims/` instead.

One request a connection: a JSON object line {"op": ..., ...}; one JSON answer line {"ok": true,
"result": ...} or {"ok": false, "refused": why, "layer": "door"}. A refusal is one BrainError line.
Only socket and json are imported: the hook path goes through here.
"""
from __future__ import annotations

import json
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from nika_brain.errors import BrainError

if TYPE_CHECKING:
    from pathlib import Path

SOCKET = "/run/nika-door/door.sock"   # fixed place inside every kernel sandbox
CLAIM_DOOR = "NIKA_DOOR"              # a satellite's door, set by engine/satellites.launch
_WAIT = 15.0                          # the door server may still be starting with the kernel


def claim_door() -> str | None:
    """The satellite's door socket when this process runs in a satellite that has one (it may still
    be starting: call() waits for it)."""
    return os.environ.get(CLAIM_DOOR) or None


def claim_socket(brain: Any, claim_id: str) -> Path:
    """A claim's door socket, under .nika/guarded/ (read-only in every session's sandbox: no agent
    replaces or removes one)."""
    return brain.guarded_dir / "doors" / claim_id / "door.sock"


def bound(brain: Any, claim_id: str) -> bool:
    """Whether the claim's door is open: a session nika-brain started acts as the claim, and its lock and
    claim changes made anywhere else are the operator's (cli/fast.py). A door whose process was killed
    leaves its socket behind: still bound (closed, never open) until its next session replaces it."""
    return os.path.lexists(claim_socket(brain, claim_id))


def session_claim() -> str | None:
    """The claim this process acts as through its session's door (`$NIKA_DOOR`), as the door says: it
    answers only the process tree of the session nika-brain started for its claim, so the answer is
    the session's identity; None without a door, or when the door does not answer this process."""
    path = claim_door()
    if path is None or not os.path.exists(path):
        return None
    try:
        claim = call("ping", path, answer_within=30.0, start_within=0.0)
    except BrainError:
        return None
    return claim if isinstance(claim, str) and claim else None


def present() -> bool:
    """True inside a kernel's sandbox (its door is bound there; outside, nothing is). A satellite's
    door is `claim_door()`: it carries lock and claim changes only, never the bus or the vault."""
    return os.path.exists(SOCKET)


def short_path(path: str) -> tuple[str, int | None]:
    """A socket path short enough for AF_UNIX (108 bytes): through its folder's fd when the real one is
    not (the fd, to close once bound or connected, is returned too)."""
    if len(path) < 100:
        return path, None
    fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{os.path.basename(path)}", fd


def _connect(s: socket.socket, path: str) -> None:
    where, fd = short_path(path)
    try:
        s.connect(where)
    finally:
        if fd is not None:
            os.close(fd)


def call(op: str, path: str = SOCKET, *, answer_within: float = 300.0, start_within: float = _WAIT,
         **args: Any) -> Any:
    """Send one request through a door (the kernel's unless `path` names another: claim_door()); the
    result, or a BrainError (refused, failed, or door down). `answer_within`: seconds the answer may
    take (an `ask --wait` waits for the kernels' answers); `start_within`: how long a door that does not
    listen yet is waited for."""
    whose = "kernel's" if path == SOCKET else "claim's"   # a refusal names its session (below)
    data = (json.dumps({"op": op, **args}, ensure_ascii=False) + "\n").encode()
    deadline = time.monotonic() + start_within
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(answer_within)
            _connect(s, path)
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
            break
        except (ConnectionRefusedError, FileNotFoundError):
            if time.monotonic() >= deadline:
                raise BrainError(f"the {whose} door ({path}) does not answer") from None
            time.sleep(0.05)
        except OSError as exc:
            raise BrainError(f"the {whose} door failed: {exc}") from None
        finally:
            s.close()
    try:
        answer = json.loads(b"".join(chunks).decode() or "{}")
    except ValueError:
        raise BrainError(f"the {whose} door gave a malformed answer") from None
    if isinstance(answer, dict) and not answer.get("ok") and isinstance(answer.get("error"), str):
        code = answer.get("exit")   # not a refusal: what the command says outside the door, same code
        raise BrainError(answer["error"], exit_code=code if isinstance(code, int) and 0 < code < 126 else None)
    if not isinstance(answer, dict) or not answer.get("ok"):
        why = answer.get("refused", "no answer") if isinstance(answer, dict) else "no answer"
        code = answer.get("exit") if isinstance(answer, dict) else None
        session = answer.get("session") if isinstance(answer, dict) else None
        if session in ("satellite", "assisted session"):   # a claim's door: whose session it serves
            whose = f"{session}'s"
        raise BrainError(f"refused by the {whose} door: {why}",
                         exit_code=code if isinstance(code, int) and 0 < code < 126 else None)
    return answer.get("result")


class DoorBus:
    """The Bus a sandboxed kernel's hooks get: publish signals, keep its heartbeat; nothing else."""
    closed = False

    def publish(self, channel: str, message: dict) -> str:
        return str(call("publish", channel=channel, message=message))

    def set(self, key: str, value: dict, ttl: float | None = None) -> None:
        call("set", key=key, value=value, ttl=ttl)

    def get(self, key: str) -> dict | None:
        return call("get", key=key)

    def _refused(self, *_a: Any, **_k: Any) -> Any:
        raise BrainError("refused inside a kernel sandbox: only publish, set and get of its own keys "
                         "go through its door")

    read = group_read = ack = reclaim = set_if_absent = delete = keys = _refused

    def ping(self) -> None:
        call("ping")

    def close(self) -> None:
        pass
