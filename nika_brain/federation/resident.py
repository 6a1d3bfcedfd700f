"""The daemon's resident services as seen by a client: one unix socket per brain,
`.nika/federation/daemon.sock`, one JSON request per connection, one JSON answer.

    {"op": "embed", "texts": [...], "kind": "query"|"passage"}  -> {"model_id", "dim", "vectors": b64}
    {"op": "triage", "prompt": ..., "context": kernel|None}     -> {"decision": Decision.as_dict()}
    {"op": "hint", "prompt": ..., "kernel": ...}                 -> {"hint": text|None}
    {"op": "ping"}                                               -> {"ok": true, "pid": ...}

`request()` answers None when no daemon listens (the caller then does the work in its own process,
today's path), and raises ResidentError when the daemon answered an error. Imports nothing heavy:
the UserPromptSubmit hook uses it.
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from nika_brain.errors import BrainError

SOCKET = "daemon.sock"
MAX_ANSWER = 64 * 1024 * 1024


class ResidentError(BrainError):
    """The daemon answered a request with an error."""


def socket_path(state_dir: Path) -> Path:
    return Path(state_dir) / "federation" / SOCKET


def request(state_dir: Path, op: str, timeout: float = 30.0, **args: Any) -> dict | None:
    s = send(state_dir, op, timeout, **args)
    return None if s is None else receive(s)


def send(state_dir: Path, op: str, timeout: float = 30.0, **args: Any) -> socket.socket | None:
    """The request sent (the daemon works on it meanwhile); receive() reads its answer. None when no
    daemon listens."""
    path = socket_path(state_dir)
    if os.environ.get("NIKA_NO_DAEMON") or not path.exists():
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
        s.sendall(json.dumps({"op": op, **args}).encode("utf-8") + b"\n")
        s.shutdown(socket.SHUT_WR)
    except OSError:
        s.close()
        return None  # a socket file left by a daemon that is gone
    return s


def receive(s: socket.socket) -> dict | None:
    """The answer to a request sent(); the socket closed."""
    try:
        chunks, size = [], 0
        while True:
            try:
                b = s.recv(1 << 16)
            except OSError:
                return None
            if not b:
                break
            chunks.append(b)
            size += len(b)
            if size > MAX_ANSWER:
                return None
    finally:
        s.close()
    try:
        answer = json.loads(b"".join(chunks) or b"null")
    except ValueError:
        return None
    if not isinstance(answer, dict):
        return None
    if "error" in answer:
        raise ResidentError(f"federation daemon: {answer['error']}")
    return answer


def pid_path(state_dir: Path) -> Path:
    return Path(state_dir) / "federation" / "daemon.pid"


def daemon_pid(state_dir: Path) -> int | None:
    """The running daemon's pid (its pid file, the process alive), or None."""
    try:
        pid = int(pid_path(state_dir).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid
