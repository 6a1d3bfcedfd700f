"""The daemon's process: one per brain (an exclusive lock on .nika/federation/daemon.lock, the pid in
daemon.pid), its services ticked in one loop, SIGTERM/SIGINT for a clean stop, and its status in
daemon.json (services, last tick, last error) for `federation status`.

`up(detach=True)` starts it in the background and returns once it serves (its socket answers);
`down()` asks it to stop (SIGTERM) and waits; `python -m nika_brain.federation.daemon.host` is the
foreground process (what systemd runs: docs/federation-daemon.service).
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation import resident
from nika_brain.federation.daemon import service
from nika_brain.support import clock


class DaemonRunning(BrainError):
    """A daemon serves this brain already."""


def _dir(brain: Brain) -> Path:
    d = brain.state_dir / "federation"
    d.mkdir(parents=True, exist_ok=True)
    return d


def status_path(brain: Brain) -> Path:
    return _dir(brain) / "daemon.json"


def log_path(brain: Brain) -> Path:
    return _dir(brain) / "daemon.log"


def log(msg: str) -> None:
    print(f"{clock.iso(clock.now())} {msg}", file=sys.stderr, flush=True)


START_RETRY = 5.0   # seconds between two tries of a service that did not start


class Host:
    def __init__(self, brain: Brain):
        self.brain = brain
        self.stopping = threading.Event()
        self.services: list[service.Service] = []
        self.state: dict[str, dict] = {}
        self.pending: dict[str, tuple[service.Service, float]] = {}   # spec -> (service, next try)

    def _write_status(self) -> None:
        doc = {"pid": os.getpid(), "started": self.started, "services": self.state}
        tmp = status_path(self.brain).with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, status_path(self.brain))

    def run(self) -> None:
        lock = open(_dir(self.brain) / "daemon.lock", "a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise DaemonRunning(f"a federation daemon runs already for this brain "
                                f"(pid {resident.daemon_pid(self.brain.state_dir) or '?'})") from None
        os.environ["NIKA_NO_DAEMON"] = "1"  # inside the daemon, everything is in-process
        pidfile = resident.pid_path(self.brain.state_dir)
        pidfile.write_text(f"{os.getpid()}\n")
        self.started = clock.iso(clock.now())
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stopping.set())
        try:
            self._start_all()
            self._loop()
        finally:
            for svc in reversed(self.services):
                try:
                    svc.stop()
                except Exception as exc:  # noqa: BLE001 (a service's stop must not block the others)
                    log(f"{svc.name}: stop failed: {exc}")
            try:
                if pidfile.read_text().split()[0] == str(os.getpid()):
                    pidfile.unlink()
            except (OSError, IndexError):
                pass
            self.state = {k: {**v, "running": False} for k, v in self.state.items()}
            self._write_status()
            lock.close()

    def _start_all(self) -> None:
        for spec in service.specs(self.brain):
            try:
                svc = service.load(spec, self.brain)
            except Exception as exc:  # noqa: BLE001 (reported; the other services run)
                self.state[spec] = {"running": False, "error": f"did not start: {exc}"}
                log(f"{spec}: did not start: {exc}")
                continue
            self._start(spec, svc)
        self._write_status()

    def _start(self, spec: str, svc: service.Service) -> None:
        """Start one service; one that fails (Redis unreachable while the machine boots in a network
        outage, say) is tried again every START_RETRY seconds, never given up: the daemon must not
        need a restart to join once its path is back."""
        try:
            svc.start()
        except Exception as exc:  # noqa: BLE001 (reported and retried; the other services run)
            error = f"did not start: {exc} (tried again every {START_RETRY:g} s)"
            if self.state.get(spec, {}).get("error") != error:
                log(f"{spec}: {error}")
            self.state[spec] = {"running": False, "error": error}
            self.pending[spec] = (svc, time.monotonic() + START_RETRY)
            return
        self.state.pop(spec, None)
        self.services.append(svc)
        self.state[svc.name] = {"running": True, "spec": spec, "every": svc.every, "ticks": 0,
                                "last_tick": None, "error": None}
        log(f"{svc.name}: started")

    def _loop(self) -> None:
        due = {svc.name: 0.0 for svc in self.services}
        written = 0.0
        while not self.stopping.is_set():
            now = time.monotonic()
            for spec, (later, at) in list(self.pending.items()):
                if now >= at:
                    del self.pending[spec]
                    self._start(spec, later)
                    written = 0.0   # the status says so at once
            for svc in self.services:
                if now < due.setdefault(svc.name, 0.0):
                    continue
                st = self.state[svc.name]
                try:
                    svc.tick()
                    st["error"] = None
                except Exception as exc:  # noqa: BLE001 (one service never takes the daemon down)
                    if st.get("error") != str(exc):
                        log(f"{svc.name}: {exc}")
                    st["error"] = str(exc)
                st["ticks"] += 1
                st["last_tick"] = clock.iso(clock.now())
                due[svc.name] = time.monotonic() + svc.every
            if time.monotonic() - written > 10:
                self._write_status()
                written = time.monotonic()
            wait = min([*due.values(), *(at for _, at in self.pending.values())], default=now + 5) - time.monotonic()
            self.stopping.wait(max(0.05, min(wait, 5.0)))


def run(brain: Brain) -> None:
    Host(brain).run()


def up(brain: Brain, *, timeout: float = 120.0) -> int:
    """Start the daemon in the background; return its pid once it serves: its socket answers (the
    resident embedder's), or, with the embedder turned off, its status names it (services started)."""
    pid = resident.daemon_pid(brain.state_dir)
    if pid:
        raise DaemonRunning(f"a federation daemon runs already for this brain (pid {pid})")
    with open(log_path(brain), "ab") as fh:
        p = subprocess.Popen([sys.executable, "-m", "nika_brain.federation.daemon.host"], cwd=brain.root,
                             stdin=subprocess.DEVNULL, stdout=fh, stderr=fh, start_new_session=True,
                             env={**os.environ, "NIKA_BRAIN_DIR": str(brain.root)})
    # The socket is the resident embedder's: a daemon without it (the embedder turned off) serves
    # once it has started its services and written its status, which names its pid.
    socket = EMBEDDER in service.specs(brain)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.poll() is not None:
            tail = log_path(brain).read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise BrainError(f"the federation daemon exited at once: {tail[0]}")
        if socket and resident.request(brain.state_dir, "ping", timeout=2.0) is not None:
            return p.pid
        if not socket and _status_pid(brain) == p.pid:
            return p.pid
        time.sleep(0.1)
    return p.pid  # running, the embedder still loading


EMBEDDER = "nika_brain.federation.daemon.embedder:service"


def _status_pid(brain: Brain) -> int | None:
    """The pid daemon.json names (written once every service has started, then every 10 s)."""
    try:
        pid = json.loads(status_path(brain).read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None


def down(brain: Brain, *, timeout: float = 30.0) -> int | None:
    """Stop the daemon (SIGTERM, it stops its services); returns the pid stopped, None if none ran."""
    pid = resident.daemon_pid(brain.state_dir)
    if not pid:
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while resident.daemon_pid(brain.state_dir) == pid and time.monotonic() < deadline:
        time.sleep(0.05)
    if resident.daemon_pid(brain.state_dir) == pid:
        raise BrainError(f"the federation daemon (pid {pid}) did not stop within {timeout:g}s")
    return pid


def status(brain: Brain) -> dict:
    pid = resident.daemon_pid(brain.state_dir)
    try:
        doc = json.loads(status_path(brain).read_text())
    except (OSError, ValueError):
        doc = {}
    return {"running": pid is not None, "pid": pid, "started": doc.get("started") if pid else None,
            "services": doc.get("services", {}) if pid else {}}


def main() -> int:
    try:
        run(Brain.find())
    except BrainError as exc:
        print(f"nika-brain: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
