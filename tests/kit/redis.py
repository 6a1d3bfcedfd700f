"""A real `redis-server` for the test suite (and the bench): a free loopback port, no persistence.

`redis_server` is session-scoped: one server for the whole run, started in a temporary folder and
killed at the end. A machine without `redis-server` FAILS these tests with a message saying what to
install; the Redis backend is part of the product, so it is never skipped.
"""
from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

START_TIMEOUT = 20.0


class RedisUnavailable(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """`with RedisServer(folder) as url:` runs redis-server on a free port until the block ends."""

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self) -> str:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RedisUnavailable("redis-server is not on PATH: install it (apt-get install "
                                   "redis-server) - the Redis bus backend is tested against a real server")
        self.folder.mkdir(parents=True, exist_ok=True)
        log_tail = ""
        for _attempt in range(3):  # another process may grab the free port before the server does
            self.port = free_port()
            log = self.folder / f"redis-{self.port}.log"
            with open(log, "wb") as out:
                self.proc = subprocess.Popen(
                    [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--daemonize", "no", "--dir", str(self.folder)],
                    cwd=self.folder, stdout=out, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline and self.proc.poll() is None:
                if _pong(self.port):
                    return self.url
                time.sleep(0.05)
            self.stop()
            log_tail = log.read_text(errors="replace")[-2000:]
        raise RedisUnavailable(f"redis-server did not answer PING; its log ends with:\n{log_tail}")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def nothing_listening() -> Iterator[str]:
    """A redis URL on a loopback port where nothing listens (held bound, never accepted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))  # bound but not listening: connections are refused
        yield f"redis://127.0.0.1:{s.getsockname()[1]}/0"
