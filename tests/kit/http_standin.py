"""The lifecycle both local HTTP stand-ins share (GitHub's REST API, Anthropic's Messages API): a
ThreadingHTTPServer on 127.0.0.1:<free port> in a daemon thread, reachable from the handler as
`self.server.standin`; use as a context manager."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar, TypeVar

S = TypeVar("S", bound="HTTPStandin")


class HTTPStandin:
    handler: ClassVar[type[BaseHTTPRequestHandler]]
    thread_name: ClassVar[str] = "http-standin"
    poll: ClassVar[float] = 0.05   # serve_forever's poll interval: how long stop() waits at most

    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def start(self: S) -> S:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler)
        self._server.daemon_threads = True
        self._server.standin = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(self.poll,),
                                        daemon=True, name=self.thread_name)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = None

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "stand-in not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"
