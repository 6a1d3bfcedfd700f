"""A real `chroma run` server for the federation tests (server mode): a free loopback port, its own
data folder, killed at the end. A machine without the `chroma` CLI FAILS these tests with a message
saying what to install; the server mode is part of the product, so it is never skipped.

Use: `from tests.federation.chroma_server import chroma_server  # noqa: F401` then take the
`chroma_server` fixture (a URL, `http://127.0.0.1:<port>`), or `with ChromaServer(folder) as url:`.
"""
from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest

from tests.kit.servers import LocalServer

START_TIMEOUT = 180.0


class ChromaUnavailable(RuntimeError):
    pass


def _alive(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1.0) as r:
            return r.status == 200
    except OSError:
        return False


class ChromaServer(LocalServer):
    exe_name = "chroma"
    missing = ("the `chroma` CLI is not on PATH: pip install chromadb - the "
               "vault's server mode is tested against a real `chroma run`")
    not_ready = "`chroma run` did not answer its heartbeat"
    unavailable = ChromaUnavailable
    start_timeout = START_TIMEOUT
    poll = 0.1

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, exe: str) -> list[str]:
        return [exe, "run", "--path", str(self.folder / "data"), "--host", "127.0.0.1",
                "--port", str(self.port)]

    def ready(self) -> bool:
        return _alive(self.port)


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory) -> Iterator[str]:
    server = ChromaServer(tmp_path_factory.mktemp("chroma-server"))
    try:
        url = server.start()
    except ChromaUnavailable as exc:
        pytest.fail(str(exc))
    try:
        yield url
    finally:
        server.stop()
