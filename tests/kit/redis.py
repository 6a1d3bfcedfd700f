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


class Proxy:
    """One machine's own path to a shared redis-server: a loopback TCP relay on its own port, which the
    test cuts (every connection closed at once, new ones refused) and restores on the same port. Only
    the clone configured with `proxy.url` loses Redis; the others keep talking to the server."""

    def __init__(self, target_port: int):
        import threading
        self.target = target_port
        self.port = 0
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.restore()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def restore(self) -> None:
        import threading
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        self.port = ls.getsockname()[1]
        self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            ls, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if ls is not None:
            ls.close()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    close = cut

    def _accept(self, ls: socket.socket) -> None:
        import threading
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(("127.0.0.1", self.target), timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not ls:
                    client.close()
                    server.close()
                    return
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
