"""A server process on a free loopback port, started and waited for: the one loop behind the test
suite's real `redis-server` (tests/kit/redis.py) and `chroma run` (tests/federation/chroma_server.py)."""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer(ABC):
    """Subclasses name the executable, how to run it on a port, how to see it answer, and what to
    raise; `with Subclass(folder) as url:` runs it on a free port until the block ends."""

    exe_name = ""
    missing = ""          # the message when the executable is not on PATH
    not_ready = ""        # the message when it never answered (the log's tail follows)
    unavailable: type[Exception] = RuntimeError
    start_timeout = 120.0
    poll = 0.05

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    @abstractmethod
    def url(self) -> str:
        """Where clients reach the started server."""

    @abstractmethod
    def command(self, exe: str) -> list[str]:
        """The command line that starts the server on self.port."""

    @abstractmethod
    def ready(self) -> bool:
        """True once the server answers."""

    def start(self) -> str:
        exe = shutil.which(self.exe_name)
        if exe is None:
            raise self.unavailable(self.missing)
        self.folder.mkdir(parents=True, exist_ok=True)
        tail = ""
        for _attempt in range(3):  # another process may grab the free port before the server does
            self.port = free_port()
            log = self.folder / f"{self.exe_name}-{self.port}.log"
            with open(log, "wb") as out:
                self.proc = subprocess.Popen(self.command(exe), cwd=self.folder, stdout=out,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + self.start_timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                if self.ready():
                    return self.url
                time.sleep(self.poll)
            self.stop()
            tail = log.read_text(errors="replace")[-2000:]
        raise self.unavailable(f"{self.not_ready}; its log ends with:\n{tail}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
