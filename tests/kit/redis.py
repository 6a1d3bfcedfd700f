"""A real `redis-server` for the test suite (and the bench): a free loopback port, no persistence.

`redis_server` is session-scoped: one server for the whole run, started in a temporary folder and
killed at the end. A machine without `redis-server` FAILS these tests with a message saying what to
install; the Redis backend is part of the product, so it is never skipped.
"""
from __future__ import annotations

import contextlib
import socket
from typing import Iterator

from tests.kit.servers import LocalServer

START_TIMEOUT = 120.0


class RedisUnavailable(RuntimeError):
    pass


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer(LocalServer):
    """`with RedisServer(folder) as url:` runs redis-server on a free port until the block ends."""

    exe_name = "redis-server"
    missing = ("redis-server is not on PATH: install it (apt-get install "
               "redis-server) - the Redis bus backend is tested against a real server")
    not_ready = "redis-server did not answer PING"
    unavailable = RedisUnavailable
    start_timeout = START_TIMEOUT

    def command(self, exe: str) -> list[str]:
        return [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--dir", str(self.folder)]

    def ready(self) -> bool:
        return _pong(self.port)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


@contextlib.contextmanager
def nothing_listening() -> Iterator[str]:
    """A redis URL on a loopback port where nothing listens (held bound, never accepted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))  # bound but not listening: connections are refused
        yield f"redis://127.0.0.1:{s.getsockname()[1]}/0"
