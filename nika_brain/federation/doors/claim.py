"""The satellites' door: one unix socket per satellite, each answering as the one claim it was made
for. One process serves all the satellites of a launch (`python -m nika_brain.federation.doors.claim
BRAIN`, started by engine/satellites.launch with its first satellite and told on stdin `open CLAIM
PID` / `close CLAIM`); `BRAIN CLAIM SOCKET` serves one claim, the satellite's pid its first stdin line.

The satellite's commands change locks, claims and the kernels' queues only through it: `lock
acquire|renew|release`, `claim close` (cli/fast.py sends them here when `$NIKA_DOOR` names a door) and
`ask` (cli/askfast.py: triaged and delivered here, recorded as asked by the claim; the op is added by
federation/asking/door.py, the module the launcher starts: asking may use the doors, not the reverse).
It acts with owner = its claim and refuses acting for another owner or closing another claim (refusals journaled in
`.nika/doors/refusals.jsonl`, {at, claim, op, why, layer: "claim-door"}). Who asks is checked on the
connection itself, never read from the request or the environment: the peer's credentials
(SO_PEERCRED) must be this user's and its process must descend from the satellite's own process
(whose pid the launcher writes on the door's stdin once it started it). A claim's socket closes when
that process exits (a pidfd) or its launcher says `close`; a launcher killed meanwhile leaves it open
for the satellite that still runs, and the process ends with its last satellite. A process of another
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
from nika_brain.bus import door as door_client
from nika_brain.errors import BrainError
from nika_brain.federation.doors.rules import Refused
from nika_brain.federation.doors.service import listening, read_request, refusals_path
from nika_brain.support import clock, procs

LAYER = "claim-door"

# What kind of session a claim's door serves, as its opener said (`open CLAIM PID [assisted]`): the
# refusals name it ("this assisted session acts for claim ... only"), never an authority.
SATELLITE, ASSISTED = "satellite", "assisted session"
KINDS: dict[str, str] = {}


def kind(cid: str) -> str:
    return KINDS.get(cid, SATELLITE)


socket_path = door_client.claim_socket   # under .nika/guarded/: no agent replaces a socket


# ---- who asks ------------------------------------------------------------------------------------

def _ppid(pid: int) -> int | None:
    fields = procs.stat_fields(pid)
    try:
        return int(fields[1]) if fields else None
    except (IndexError, ValueError):
        return None


def _start(pid: int) -> bytes | None:
    fields = procs.stat_fields(pid)
    return None if not fields or fields[0] in (b"Z", b"X") or len(fields) < 20 else fields[19]


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
        raise Refused(f"this {kind(claim_id)} acts for claim {claim_id} only, not for {owner} (releasing, renewing "
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
        raise Refused(f"claim {other} is not this {kind(cid)}'s to close (its claim is {cid})")
    counts = [req.get("tests_passed"), req.get("tests_failed")]
    if not all(n is None or (isinstance(n, int) and not isinstance(n, bool) and n >= 0) for n in counts):
        raise Refused("tests_passed and tests_failed are counts")
    done = service.report(brain, cid, status, summary, tests_passed=counts[0], tests_failed=counts[1],
                          empty=req.get("empty") is True, for_satellite=True)
    nxt = "next: your step is reported — stop here; the orchestrator that launched you routes the result" \
        if done.claim.workflow else f"next: nothing to route — claim {done.claim.id} is not the step of a workflow run"
    return {"claim": done.claim.id, "result": done.claim.result.status if done.claim.result else status,
            "warnings": list(done.warnings), "next": nxt}


def _session(brain: Brain, cid: str, req: dict, _holder: int | None) -> Any:
    """The SessionStart hook binds the session to its claim (bookkeeping, its own claim)."""
    from nika_brain.state import claims, sessions
    session = req.get("session")
    if not isinstance(session, str) or not sessions.valid_id(session):
        raise Refused("session is a session id")
    return claims.update_open(brain, cid, session=session).session


def _touched(brain: Brain, cid: str, req: dict, _holder: int | None) -> Any:
    """The PostToolUse hook records the files the session wrote on its claim (its own claim)."""
    from nika_brain.state import claims
    paths = req.get("paths")
    if not isinstance(paths, list) or not paths or len(paths) > 1000 or \
            not all(isinstance(p, str) and 0 < len(p) < 4096 and "\n" not in p for p in paths):
        raise Refused("paths is a list of relative paths")
    return list(claims.record_touched(brain, cid, paths).touched)


def _ping(_brain: Brain, cid: str, _req: dict, _holder: int | None) -> Any:
    return cid


OPS: dict[str, Callable[[Brain, str, dict, int | None], Any]] = {
    "ping": _ping, "lock_acquire": _acquire, "lock_renew": _renew, "lock_release": _release,
    "claim_close": _close, "claim_session": _session, "claim_touched": _touched}


def answer(brain: Brain, cid: str, req: Any, holder: int | None) -> dict:
    op = req.get("op") if isinstance(req, dict) else None
    try:
        if op not in OPS:
            raise Refused(f"no such door operation for a {kind(cid)}: {op!r}")
        return {"ok": True, "result": OPS[str(op)](brain, cid, req, holder)}
    except Refused as exc:
        journal(brain, cid, str(op), str(exc))
        return {"ok": False, "refused": str(exc), "layer": LAYER, "exit": exc.exit_code, "session": kind(cid)}
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
                why = (f"process {pid} is not of the {kind(cid)} this door was made for (claim {cid}): a "
                       f"{kind(cid)} reaches its own door only")
                journal(brain, cid, str(req.get("op") if isinstance(req, dict) else None), why)
                ans: dict = {"ok": False, "refused": why, "layer": LAYER, "exit": 6, "session": kind(cid)}
            elif req is None:
                ans = {"ok": False, "refused": "a request is one JSON object line under 1 MiB", "layer": LAYER}
            else:
                ans = answer(brain, cid, req, _ppid(pid))   # the lock's holder: the command's parent
            conn.sendall((json.dumps(ans, ensure_ascii=False, default=str) + "\n").encode())
        except OSError:
            pass


class _Door:
    """The claims one door process serves: a listening socket and a satellite (pid, start time) each."""

    def __init__(self, brain: Brain):
        self.brain = brain
        self.sel = selectors.DefaultSelector()
        self.claims: dict[str, tuple[socket.socket, Path, int, bytes | None, int | None]] = {}

    def open(self, cid: str, path: Path, satellite: int, srv: socket.socket | None = None,
             session: str = SATELLITE) -> None:
        if srv is None:
            self.close(cid)
            srv = listening(path)
        KINDS[cid] = session
        start = _start(satellite)
        try:   # readable when the satellite exits: its door lives as long as it, not as its launcher
            pidfd: int | None = os.pidfd_open(satellite)
        except (OSError, AttributeError, ValueError):
            pidfd = None   # no pidfd here: the start time is checked every second instead
        self.claims[cid] = (srv, path, satellite, start, pidfd)
        self.sel.register(srv, selectors.EVENT_READ, ("door", cid))
        if pidfd is not None:
            self.sel.register(pidfd, selectors.EVENT_READ, ("satellite", cid))

    def close(self, cid: str) -> None:
        entry = self.claims.pop(cid, None)
        if entry is None:
            return
        srv, path, _sat, _start_time, pidfd = entry
        KINDS.pop(cid, None)
        self.sel.unregister(srv)
        srv.close()
        if pidfd is not None:
            self.sel.unregister(pidfd)
            os.close(pidfd)
        path.unlink(missing_ok=True)

    def accept(self, cid: str) -> None:
        srv, _path, satellite, _start_time, _fd = self.claims[cid]
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        threading.Thread(target=_serve, args=(self.brain, cid, satellite, conn), daemon=True).start()

    def reap(self) -> None:
        """Close the doors of satellites that are gone (where no pidfd said so)."""
        for cid, (_srv, _path, satellite, start, _fd) in list(self.claims.items()):
            if start is None or _start(satellite) != start:
                self.close(cid)


def _command(door: _Door, line: str) -> bool:
    """One launcher line: `open CLAIM PID [assisted]` (answered `open CLAIM` once its socket listens;
    `assisted`: the session `nika-brain claude start` runs, else a satellite), `close CLAIM`, `end`.
    False when the door must end."""
    words = line.split()
    if words[:1] == ["end"]:
        return False
    if len(words) in (3, 4) and words[0] == "open" and words[2].isdigit() and words[3:] in ([], ["assisted"]):
        try:
            door.open(words[1], socket_path(door.brain, words[1]), int(words[2]),
                      session=ASSISTED if words[3:] else SATELLITE)
            print(f"open {words[1]}", flush=True)
        except (OSError, ValueError) as exc:
            print(f"failed {words[1]} {exc}", flush=True)
    elif len(words) == 2 and words[0] == "close":
        door.close(words[1])
    return True


def main(argv: list[str]) -> int:
    """`BRAIN`: a launcher's door for all its satellites, told on stdin which claim and satellite to
    serve (one process a launch, not one a satellite). `BRAIN CLAIM SOCKET`: one claim's door, the
    satellite's pid its first stdin line."""
    if len(argv) not in (1, 3):
        print("usage: python -m nika_brain.federation.doors.claim BRAIN [CLAIM SOCKET]", file=sys.stderr)
        return 2
    door = _Door(Brain.at(argv[0]))
    single = len(argv) == 3
    stdin, pending = sys.stdin.fileno(), b""   # read raw: a buffered readline would hide lines from select
    if single:
        srv = listening(Path(argv[2]))   # bound before the pid is known: the satellite may already ask
        print("ready", flush=True)
        while b"\n" not in pending and (chunk := os.read(stdin, 4096)):
            pending += chunk
        line, _, pending = pending.partition(b"\n")
        if not line.strip().isdigit():
            srv.close()
            Path(argv[2]).unlink(missing_ok=True)
            return 0
        door.open(argv[1], Path(argv[2]), int(line), srv)
        if pending.strip() == b"end":
            door.close(argv[1])
            return 0
    door.sel.register(stdin, selectors.EVENT_READ, ("launcher", ""))
    launcher = True
    try:
        while door.claims or (launcher and not single):
            for key, _ in door.sel.select(timeout=1.0):
                what, cid = key.data
                if what == "satellite":
                    door.close(cid)
                elif what == "door" and cid in door.claims:
                    door.accept(cid)
                elif what == "launcher":
                    chunk = os.read(stdin, 65536)
                    if not chunk:   # the launcher is gone (killed): the doors stay while their satellites run
                        door.sel.unregister(stdin)
                        launcher = False
                    pending += chunk
                    while b"\n" in pending:
                        said, _, pending = pending.partition(b"\n")
                        if not _command(door, said.decode("utf-8", "replace")):
                            return 0
            door.reap()
    except KeyboardInterrupt:
        pass
    finally:
        for cid in list(door.claims):
            door.close(cid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
