"""A real `chroma run` server for the federation tests (server mode): a free loopback port, its own
data folder, killed at the end. A machine without the `chroma` CLI FAILS these tests with a message
saying what to install; the server mode is part of the product, so it is never skipped.

Use: `from tests.federation.chroma_server import chroma_server  # noqa: F401` then take the
`chroma_server` fixture (a URL, `http://127.0.0.1:<port>`), or `with ChromaServer(folder) as url:`.
"""
from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kit.redis import free_port

START_TIMEOUT = 60.0


class ChromaUnavailable(RuntimeError):
    pass


def _alive(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1.0) as r:
            return r.status == 200
    except OSError:
        return False


class ChromaServer:
    def __init__(self, folder: Path | str):
        self.folder = Path(folder)
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        exe = shutil.which("chroma")
        if exe is None:
            raise ChromaUnavailable("the `chroma` CLI is not on PATH: pip install chromadb - the "
                                    "vault's server mode is tested against a real `chroma run`")
        self.folder.mkdir(parents=True, exist_ok=True)
        tail = ""
        for _attempt in range(3):  # the free port may be taken before the server binds it
            self.port = free_port()
            log = self.folder / f"chroma-{self.port}.log"
            with open(log, "wb") as out:
                self.proc = subprocess.Popen(
                    [exe, "run", "--path", str(self.folder / "data"), "--host", "127.0.0.1",
                     "--port", str(self.port)], cwd=self.folder, stdout=out,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline and self.proc.poll() is None:
                if _alive(self.port):
                    return self.url
                time.sleep(0.1)
            self.stop()
            tail = log.read_text(errors="replace")[-2000:]
        raise ChromaUnavailable(f"`chroma run` did not answer its heartbeat; its log ends with:\n{tail}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


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
