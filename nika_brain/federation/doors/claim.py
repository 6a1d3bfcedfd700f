"""A satellite's door: one unix socket per satellite, served by a process that knows the one claim it
was made for (`python -m nika_brain.federation.doors.claim BRAIN CLAIM SOCKET`, started by
engine/satellites.launch before the satellite and stopped after it).

The satellite's commands change locks and claims only through it: `lock acquire|renew|release` and
`claim close` (cli/fast.py sends them here when `$NIKA_DOOR` names a door). It acts with owner = its
claim and refuses acting for another owner or closing another claim (refusals journaled in
`.nika/doors/refusals.jsonl`, {at, claim, op, why, layer: "claim-door"}). Who asks is checked on the
connection itself, never read from the request or the environment: the peer's credentials
(SO_PEERCRED) must be this user's and its process must descend from the satellite's own process
(whose pid the launcher writes on the door's stdin once it started it). The door closes when that
process exits (a pidfd), or when its launcher says `end`; a launcher killed meanwhile leaves it open
for the satellite that still runs. A process of another
satellite pointing `$NIKA_DOOR` at this socket is refused; a process that left its satellite's tree
(a double fork) has no door at all. In the satellite's Claude Code sandbox `locks/`, `claims/` and
`.nika/guarded/` (where the sockets are) are read-only and the kernels' doors hidden
(claude/settings.satellite_settings), so the door is the satellite's only way to change them.

Protocol (bus/door.py's): one JSON request a connection, one JSON answer line: {"ok": true, "result"}
or {"ok": false, "refused": why, "layer": "claim-door", "exit": n} or {"ok": false, "error": line,
"exit": n} (a lock held by someone else: the same line and exit code as outside the door).
"""
from __future__ import annotations

import json
import os
import selectors
import socket
import struct
import sys
import threading
from pathlib import Path
from typing import Any, Callable

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation.doors.rules import Refused
from nika_brain.federation.doors.service import listening, read_request, refusals_path
from nika_brain.support import clock

LAYER = "claim-door"


def socket_path(brain: Brain, claim_id: str) -> Path:
    """Under .nika/guarded/ (read-only in the satellite's sandbox: no agent replaces a socket)."""
    return brain.guarded_dir / "doors" / claim_id / "door.sock"


# ---- who asks ------------------------------------------------------------------------------------

def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat.rsplit(b")", 1)[-1].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def _start(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return None
    return None if not fields or fields[0] in (b"Z", b"X") else fields[19]


def peer(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end, as the kernel recorded it at connect."""
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         struct.calcsize("3i")))
    return pid, uid


def descends_from(pid: int, ancestor: int) -> bool:
    for _ in range(256):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        nxt = _ppid(pid)
        if nxt is None:
            return False
        pid = nxt
    return False


# ---- the operations ------------------------------------------------------------------------------

def _lock_dict(lk: Any) -> dict:
    return {"scope": lk.scope, "owner": lk.owner, "mode": lk.mode, "token": lk.token,
            "acquired": clock.iso(lk.acquired), "expires": clock.iso(lk.expires),
            "holder": {"host": lk.holder.host, "pid": lk.holder.pid}}


def _owner(claim_id: str, req: dict) -> None:
    owner = req.get("owner")
    if owner not in (None, "", claim_id):
        raise Refused(f"this satellite acts for claim {claim_id} only, not for {owner} (releasing, renewing "
                      "or taking a lock in another claim's name is the operator's decision)")


def _scope(req: dict) -> str:
    scope = req.get("scope")
    if not isinstance(scope, str) or not scope:
        raise Refused("scope is a path")
    return scope


def _number(req: dict, key: str) -> float | None:
    v = req.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Refused(f"{key} is a number")
    return float(v)


def _acquire(brain: Brain, cid: str, req: dict, holder: int | None) -> Any:
    from nika_brain.federation.kernels import leases
    _owner(cid, req)
    lk = leases.lock_acquire(brain, _scope(req), cid, mode="shared" if req.get("shared") is True else "exclusive",
                             ttl=_number(req, "ttl"), wait=_number(req, "wait") or 0.0,
                             pid=None if req.get("no_pid") is True else holder)
    return _lock_dict(lk)


def _renew(brain: Brain, cid: str, req: dict, _holder: int | None) -> Any:
    from nika_brain.federation.kernels import leases
    _owner(cid, req)
    return _lock_dict(leases.lock_renew(brain, _scope(req), cid, ttl=_number(req, "ttl")))


def _release(brain: Brain, cid: str, req: dict, _holder: int | None) -> Any:
    from nika_brain.federation.kernels import leases
    from nika_brain.state import scopes
    _owner(cid, req)
    leases.lock_release(brain, _scope(req), cid)
    return {"scope": scopes.normalize_scope(_scope(req))}


def _close(brain: Brain, cid: str, req: dict, _holder: int | None) -> Any:
    from nika_brain.engine import service
    from nika_brain.state import claims
    other, status, summary = req.get("claim"), req.get("status"), req.get("summary", "")
    if not all(isinstance(x, str) for x in (other, status, summary)):
        raise Refused("claim, status and summary are strings")
    assert isinstance(other, str)
    if claims.id_from_argument(other) != cid:
        raise Refused(f"claim {other} is not this satellite's to close (its claim is {cid})")
    counts = [req.get("tests_passed"), req.get("tests_failed")]
    if not all(n is None or (isinstance(n, int) and not isinstance(n, bool) and n >= 0) for n in counts):
        raise Refused("tests_passed and tests_failed are counts")
    done = service.report(brain, cid, status, summary, tests_passed=counts[0], tests_failed=counts[1],
                          empty=req.get("empty") is True, for_satellite=True)
    nxt = "next: your step is reported — stop here; the orchestrator that launched you routes the result" \
        if done.claim.workflow else f"next: nothing to route — claim {done.claim.id} is not the step of a workflow run"
    return {"claim": done.claim.id, "result": done.claim.result.status if done.claim.result else status,
            "warnings": list(done.warnings), "next": nxt}


def _ping(_brain: Brain, cid: str, _req: dict, _holder: int | None) -> Any:
    return cid


OPS: dict[str, Callable[[Brain, str, dict, int | None], Any]] = {
    "ping": _ping, "lock_acquire": _acquire, "lock_renew": _renew, "lock_release": _release,
    "claim_close": _close}


def answer(brain: Brain, cid: str, req: Any, holder: int | None) -> dict:
    op = req.get("op") if isinstance(req, dict) else None
    try:
        if op not in OPS:
            raise Refused(f"no such door operation for a satellite: {op!r}")
        return {"ok": True, "result": OPS[str(op)](brain, cid, req, holder)}
    except Refused as exc:
        journal(brain, cid, str(op), str(exc))
        return {"ok": False, "refused": str(exc), "layer": LAYER, "exit": exc.exit_code}
    except BrainError as exc:
        return {"ok": False, "error": str(exc), "exit": exc.exit_code}
    except OSError as exc:
        return {"ok": False, "error": f"{op} failed on the host: {exc}", "exit": 1}


def journal(brain: Brain, cid: str, op: str, why: str) -> None:
    line = json.dumps({"at": clock.iso(clock.now()), "claim": cid, "op": op, "why": why, "layer": LAYER},
                      ensure_ascii=False)
    try:
        refusals_path(brain).parent.mkdir(parents=True, exist_ok=True)
        with open(refusals_path(brain), "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError:
        pass


# ---- the process ---------------------------------------------------------------------------------

def _serve(brain: Brain, cid: str, satellite: int, conn: socket.socket) -> None:
    with conn:
        try:
            pid, uid = peer(conn)
            ok = uid == os.getuid() and descends_from(pid, satellite)
            req = read_request(conn)
            if not ok:
                why = (f"process {pid} is not of the satellite this door was made for (claim {cid}): a "
                       "satellite reaches its own door only")
                journal(brain, cid, str(req.get("op") if isinstance(req, dict) else None), why)
                ans: dict = {"ok": False, "refused": why, "layer": LAYER, "exit": 6}
            elif req is None:
                ans = {"ok": False, "refused": "a request is one JSON object line under 1 MiB", "layer": LAYER}
            else:
                ans = answer(brain, cid, req, _ppid(pid))   # the lock's holder: the command's parent
            conn.sendall((json.dumps(ans, ensure_ascii=False, default=str) + "\n").encode())
        except OSError:
            pass


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m nika_brain.federation.doors.claim BRAIN CLAIM SOCKET", file=sys.stderr)
        return 2
    brain, cid, path = Brain.at(argv[0]), argv[1], Path(argv[2])
    srv = listening(path)
    print("ready", flush=True)
    line = sys.stdin.readline()    # the satellite's pid, once the launcher started it ("" : it did not)
    try:
        satellite = int(line)
        start = _start(satellite)
    except ValueError:
        satellite, start = 0, None
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ, "door")
    try:   # readable when the satellite exits: the door lives as long as its satellite, not its launcher
        sel.register(os.pidfd_open(satellite), selectors.EVENT_READ, "satellite")
    except (OSError, AttributeError, ValueError):
        pass   # no pidfd here: the start time is checked every second instead
    sel.register(sys.stdin, selectors.EVENT_READ, "launcher")   # "end": the launcher is done with it
    try:
        while start is not None and _start(satellite) == start:
            for key, _ in sel.select(timeout=1.0):
                if key.data == "satellite":
                    return 0
                if key.data == "launcher":
                    said = sys.stdin.readline()
                    if said.strip() == "end":
                        return 0
                    if not said:   # the launcher is gone (killed): the door stays while its satellite runs
                        sel.unregister(sys.stdin)
                    continue
                try:
                    conn, _ = srv.accept()
                except OSError:
                    continue
                threading.Thread(target=_serve, args=(brain, cid, satellite, conn), daemon=True).start()
    except KeyboardInterrupt:
        pass
    finally:
        srv.close()
        path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
