"""The door service: a listening unix socket per kernel (`.nika/doors/<id>/door.sock`, bound into
that kernel's sandbox at bus/door.SOCKET), one request a connection, answered as that kernel.

Kernels spawned later get their door at the next scan (every SCAN seconds). One thread serves every
door (a selector over their sockets, DoorService), each connection answered in a thread of its own.
Refusals are journaled in `.nika/doors/refusals.jsonl` ({at, kernel, op, why, layer: "door"}).
"""
from __future__ import annotations

import json
import os
import selectors
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation.doors import rules
from nika_brain.federation.doors.rules import Refused
from nika_brain.support import clock

SCAN = 0.5
MAX_REQUEST = 1 << 20


def doors_dir(brain: Brain) -> Path:
    return brain.state_dir / "doors"


def socket_path(brain: Brain, kernel_id: str) -> Path:
    return doors_dir(brain) / kernel_id / "door.sock"


def refusals_path(brain: Brain) -> Path:
    return doors_dir(brain) / "refusals.jsonl"


# ---- the operations --------------------------------------------------------------------------------

def _publish(brain: Brain, kid: str, req: dict) -> Any:
    from nika_brain import bus
    msg = rules.check_signal(kid, str(req.get("channel")), req.get("message"))
    return bus.open_bus(brain).publish(str(req["channel"]), msg)


def _own_key(kid: str, key: Any) -> str:
    from nika_brain.federation.kernels import health
    if key != health.heartbeat_key(kid):
        raise Refused(f"a kernel keeps only its own heartbeat key ({health.heartbeat_key(kid)})")
    return key


def _set(brain: Brain, kid: str, req: dict) -> Any:
    from nika_brain import bus
    value = rules.check_signal(kid, bus.HEALTH, req.get("value"))
    bus.open_bus(brain).set(_own_key(kid, req.get("key")), value, ttl=req.get("ttl") or 86400)


def _get(brain: Brain, kid: str, req: dict) -> Any:
    from nika_brain import bus
    return bus.open_bus(brain).get(_own_key(kid, req.get("key")))


def _strings(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise Refused(f"{what} is a list of strings")
    return value


def _query(brain: Brain, kid: str, req: dict) -> Any:
    from nika_brain.federation.vault.query import search
    rules.check_own(kid, req.get("kernel"), "records")
    k = req.get("k", 5)
    if not isinstance(k, int) or not 0 < k <= 100:
        raise Refused("k is 1 to 100")
    recs = search(brain, str(req.get("text") or ""), kernel=kid, k=k,
                  levels=_strings(req.get("levels"), "levels"), owners=_strings(req.get("owners"), "from"))
    return [r.to_json() for r in recs]


def _records(brain: Brain, kid: str, req: dict) -> Any:
    from nika_brain.federation.vault.query import get, records
    rules.check_own(kid, req.get("kernel"), "records")
    ids, _ = records(brain, kid)
    return [r.to_json() for r in get(brain, ids, kernel=kid)]


def _ingest(brain: Brain, kid: str, req: dict) -> Any:
    from nika_brain.federation.vault.ingest import ingest
    from nika_brain.state import kernels
    own = kernels.kernel_dir(brain, kid).resolve()
    paths = _strings(req.get("paths"), "paths")
    for p in paths:
        if not Path(p).resolve().is_relative_to(own):
            raise Refused(f"a kernel ingests files of its own folder only ({p})")
    return ingest(brain, paths, kid).to_json()


def _claim_close(brain: Brain, kid: str, req: dict) -> Any:
    """A kernel closes a claim of its own work: claims/ and locks/ are read-only in its sandbox, so the
    close (tiered check, commit, routing, lock release) runs here, on the host, as outside a sandbox.
    Its own means every scope of the claim lies in the kernel's folder or in the scope its record
    names; another claim is refused."""
    from nika_brain.engine import service
    from nika_brain.state import claims, kernels, scopes
    cid, status, summary = req.get("claim"), req.get("status"), req.get("summary", "")
    if not all(isinstance(x, str) for x in (cid, status, summary)):
        raise Refused("claim, status and summary are strings")
    counts = [req.get("tests_passed"), req.get("tests_failed")]
    if not all(n is None or (isinstance(n, int) and not isinstance(n, bool) and n >= 0) for n in counts):
        raise Refused("tests_passed and tests_failed are counts")
    c = claims.load_claim(brain, claims.id_from_argument(cid))
    k = kernels.load_kernel(brain, kid)
    own = (f"kernels/{kid}/", *k.scope)
    foreign = [s for s in c.scope if not any(scopes.covers(o, s) for o in own)]
    if foreign:
        raise Refused(f"claim {c.id} is not kernel {kid}'s to close (scope {', '.join(foreign)} lies outside "
                      f"its folder and scope)")
    done = service.report(brain, c.id, status, summary, tests_passed=counts[0], tests_failed=counts[1],
                          empty=req.get("empty") is True)
    nxt = "next: your step is reported — stop here; the orchestrator routes the result" if done.claim.workflow \
        else f"next: nothing to route — claim {done.claim.id} is not the step of a workflow run"
    return {"claim": done.claim.id, "result": done.claim.result.status if done.claim.result else status,
            "warnings": list(done.warnings), "next": nxt}


def _task_id(req: dict) -> str:
    tid = req.get("task")
    if not isinstance(tid, str) or not tid or len(tid) > 128:
        raise Refused("task is a task id")
    return tid


def _task(brain: Brain, kid: str, req: dict) -> Any:
    """The text of a work-stealing task granted to this kernel, or of its own (the bus has only its
    reference): rules.check_task."""
    from nika_brain import bus
    from nika_brain.federation.stealing import protocol, texts
    b, tid = bus.open_bus(brain), _task_id(req)
    record = b.get(protocol._k_task(tid))
    rules.check_task(kid, tid, record, protocol.grants(b, tid) if record else [])
    assert record is not None
    return {"id": tid, "owner": record["owner"], **texts.Texts(brain).task(record)}


def _task_result(brain: Brain, kid: str, req: dict) -> Any:
    """Commit the result of a task granted to this kernel (written to the brain, its hash on the bus)."""
    from nika_brain import bus
    from nika_brain.federation.stealing import protocol, texts
    b, tid = bus.open_bus(brain), _task_id(req)
    record = b.get(protocol._k_task(tid))
    gs = protocol.grants(b, tid) if record else []
    rules.check_task(kid, tid, record, gs, granted_only=True)
    try:
        return protocol.commit(b, texts.Texts(brain), tid, kid, req.get("result"))
    except BrainError as exc:
        raise Refused(str(exc)) from None


def _ping(_brain: Brain, kid: str, _req: dict) -> Any:
    return kid


def _summaries(brain: Brain, _kid: str, req: dict) -> Any:
    from nika_brain.federation.vault import summaries
    day = req.get("day")
    return [s.to_json() for s in summaries.list_summaries(brain, day=day if isinstance(day, str) else None)]


OPS: dict[str, Callable[[Brain, str, dict], Any]] = {
    "ping": _ping, "publish": _publish, "set": _set, "get": _get,
    "query": _query, "records": _records, "ingest": _ingest, "summaries": _summaries,
    "claim_close": _claim_close, "task": _task, "task_result": _task_result,
}


def answer(brain: Brain, kid: str, req: Any) -> dict:
    """One request from kernel `kid` (known by its socket) -> the answer object; refusals journaled."""
    op = req.get("op") if isinstance(req, dict) else None
    try:
        if op in rules.OPERATOR_OPS:
            raise Refused(f"`{op}` is the operator's, never a kernel's")
        if op not in OPS:
            raise Refused(f"no such door operation: {op!r}")
        return {"ok": True, "result": OPS[op](brain, kid, req)}
    except OSError as exc:   # the host failed to do what was asked (a file, git): said, never a dead socket
        return {"ok": False, "refused": f"{op} failed on the host: {exc}", "layer": "door", "exit": 1}
    except BrainError as exc:
        if isinstance(exc, Refused):
            _journal(brain, kid, str(op), str(exc))
        return {"ok": False, "refused": str(exc), "layer": "door", "exit": exc.exit_code}


def _journal(brain: Brain, kid: str, op: str, why: str) -> None:
    line = json.dumps({"at": clock.iso(clock.now()), "kernel": kid, "op": op, "why": why,
                       "layer": "door"}, ensure_ascii=False)
    try:
        with open(refusals_path(brain), "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError:
        pass


# ---- the service -----------------------------------------------------------------------------------

def _bind_path(path: Path) -> tuple[str, int | None]:
    """A path short enough for AF_UNIX (bus/door.short_path)."""
    from nika_brain.bus.door import short_path
    return short_path(str(path))


def listening(path: Path) -> socket.socket:
    """A unix socket listening at `path`, in a folder only this user enters (0700); a socket left there
    by an earlier door is replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    path.unlink(missing_ok=True)
    where, fd = _bind_path(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        srv.bind(where)
        srv.listen(64)
    except OSError:
        srv.close()
        raise
    finally:
        if fd is not None:
            os.close(fd)
    return srv


READ_TIMEOUT = 60.0   # seconds a client has to send its request (one line, then its write side shut)


def read_request(conn: socket.socket) -> Any:
    """A connection's request, read to its end: the JSON value, or None when it is not one under
    MAX_REQUEST bytes (an OSError, a timeout among them, is the caller's)."""
    conn.settimeout(READ_TIMEOUT)
    chunks, size = [], 0
    while size <= MAX_REQUEST:
        b = conn.recv(65536)
        if not b:
            break
        chunks.append(b)
        size += len(b)
    raw = b"".join(chunks)
    try:
        return json.loads(raw.decode("utf-8")) if len(raw) <= MAX_REQUEST else None
    except (UnicodeDecodeError, ValueError):
        return None


def _serve(brain: Brain, kid: str, conn: socket.socket) -> None:
    """One connection: the request (read to its end), the answer, closed."""
    with conn:
        try:
            req = read_request(conn)
            ans = answer(brain, kid, req) if req is not None else \
                {"ok": False, "refused": "a request is one JSON object line under 1 MiB", "layer": "door"}
            conn.settimeout(READ_TIMEOUT)
            conn.sendall((json.dumps(ans, ensure_ascii=False, default=str) + "\n").encode())
        except OSError:
            pass   # the client went away (or never wrote): nothing to answer


class DoorService:
    """start(brain) opens a door for every kernel (and for new ones as they appear); stop() closes.

    One thread serves every door: a selector on all the listening sockets (no thread, no poll per
    socket), which accepts a connection and answers it in a thread of its own (a vault query or a
    claim's close takes time; the other doors stay open meanwhile). The same loop looks for new
    kernels every SCAN seconds: a stat of kernels/ (a new folder changes its mtime) and of the
    folders seen without their kernel.yml yet."""

    def __init__(self, brain: Brain | None = None):
        self.brain = brain
        self.servers: dict[str, socket.socket] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sel: selectors.BaseSelector | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._seen: int | None = None        # kernels/'s mtime at the last full scan
        self._waiting: set[str] = set()      # folders without their kernel.yml at that scan
        self._lock = threading.Lock()

    def start(self, brain: Brain | None = None) -> None:
        self.brain = brain or self.brain
        if self.brain is None:
            raise BrainError("the door service needs a brain")
        doors_dir(self.brain).mkdir(parents=True, exist_ok=True)
        self._sel = selectors.DefaultSelector()
        self._wake = socket.socketpair()
        self._wake[0].setblocking(False)
        self._sel.register(self._wake[0], selectors.EVENT_READ, None)
        self.scan()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="doors")
        self._thread.start()

    def _loop(self) -> None:
        assert self._sel is not None and self.brain is not None
        next_scan = time.monotonic() + SCAN
        while not self._stop.is_set():
            try:
                ready = self._sel.select(timeout=max(0.0, next_scan - time.monotonic()))
            except OSError:
                ready = []
            for key, _ in ready:
                if key.data is None:   # stop() woke us
                    try:
                        key.fileobj.recv(64)  # type: ignore[union-attr]
                    except OSError:
                        pass
                    continue
                try:
                    conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
                except OSError:
                    continue   # taken by nobody else, but gone (the client gave up) or closing
                conn.setblocking(True)
                threading.Thread(target=_serve, args=(self.brain, key.data, conn), daemon=True,
                                 name=f"door-{key.data}").start()
            if time.monotonic() >= next_scan and not self._stop.is_set():
                try:
                    self.scan(changed_only=True)
                except (BrainError, OSError):
                    pass
                next_scan = time.monotonic() + SCAN

    def scan(self, changed_only: bool = False) -> None:
        """Open the doors of kernels that have none yet. With changed_only, list kernels/ only when
        its mtime moved (a folder came or went) and otherwise look at the folders still waiting for
        their kernel.yml."""
        assert self.brain is not None
        folder = self.brain.kernels_dir
        try:
            mtime = folder.stat().st_mtime_ns
        except OSError:
            return
        if changed_only and mtime == self._seen:
            names = sorted(self._waiting)
        else:
            names = sorted(p.name for p in folder.iterdir() if p.is_dir())
            # a folder made within the file system clock's granularity of this listing may leave
            # the mtime as it is: such a fresh mtime is not trusted, the next scan lists again
            self._seen = mtime if time.time_ns() - mtime > 100_000_000 else None
            self._waiting = set()
        for kid in names:
            if kid in self.servers:
                continue
            if (folder / kid / "kernel.yml").is_file():
                self._waiting.discard(kid)
                self.open(kid)
            else:
                self._waiting.add(kid)

    def open(self, kid: str) -> None:
        assert self.brain is not None
        srv = listening(socket_path(self.brain, kid))
        srv.setblocking(False)
        with self._lock:
            self.servers[kid] = srv
            if self._sel is not None:
                self._sel.register(srv, selectors.EVENT_READ, kid)

    def live_kernels(self) -> int:
        from nika_brain.state import kernels
        assert self.brain is not None
        n = 0
        for k in list(self.servers):
            try:
                n += kernels.load_kernel(self.brain, k).live
            except BrainError:
                continue
        return n

    def stop(self) -> None:
        self._stop.set()
        if self._wake is not None:
            try:
                self._wake[1].send(b"x")
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            for srv in self.servers.values():
                if self._sel is not None:
                    try:
                        self._sel.unregister(srv)
                    except (KeyError, ValueError):
                        pass
                srv.close()
            if self.brain is not None:
                for kid in self.servers:
                    socket_path(self.brain, kid).unlink(missing_ok=True)
            self.servers.clear()
        if self._wake is not None:
            for s in self._wake:
                s.close()
            self._wake = None
        if self._sel is not None:
            self._sel.close()
            self._sel = None


def ask(path: Path | str, op: str, **args: Any) -> dict:
    """A raw request to a door socket (tests, the operator's checks): the answer object."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with s:
        where, fd = _bind_path(Path(path))
        try:
            s.connect(where)
        finally:
            if fd is not None:
                os.close(fd)
        s.sendall((json.dumps({"op": op, **args}) + "\n").encode())
        s.shutdown(socket.SHUT_WR)
        return json.loads(s.makefile("rb").read().decode() or "{}")
