"""Helpers for the console tests: a brain with stand-in kernels and a run waiting on a gate, the
real `nika-brain console` process, and Debian's chromium driven by Playwright's Python driver (the
browser is the system's; nothing is downloaded)."""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from nika_brain.brain import Brain
from tests.federation.fedkit import fed_config
from tests.kit.brain import git_out

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
GREET = 'def greet(name):\n    return f"Hello, {name}!"\n'


class ConsoleProcess:
    """`python -m nika_brain console --port 0` in the brain; its first stdout line is the URL."""

    def __init__(self, root: Path, log: Path, *args: str, env: dict | None = None):
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-m", "nika_brain", "console", "--port", "0", *args],
                                     cwd=str(root), stdout=subprocess.PIPE, stderr=open(log, "w"), text=True,
                                     env={**os.environ, **(env or {})})
        self.url = self._first_line(60)
        self.base, _, query = self.url.partition("/?")
        self.token = query.removeprefix("token=")
        self.port = int(self.base.rsplit(":", 1)[1])
        self.cookie = f"nika_console_{self.port}={self.token}"

    def _first_line(self, timeout: float) -> str:
        sel = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            self.stop()
            raise AssertionError(f"the console printed no URL: {self.log.read_text()}")
        line = self.proc.stdout.readline().strip()
        if not line.startswith("http"):
            self.stop()
            raise AssertionError(f"the console's first line is not its URL: {line!r} {self.log.read_text()}")
        return line

    def request(self, path: str, *, method: str = "GET", data: bytes | None = None, cookie: bool = True,
                headers: dict | None = None) -> tuple[int, str]:
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=dict(headers or {}))
        if cookie:
            req.add_header("Cookie", self.cookie)
        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(req, timeout=60) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # a 303 is an answer the tests look at
        return None


def console_brain(root: Path, tmp: Path, run) -> Brain:
    """A brain made by `init` (the example workflow), the stand-in agent as kernels' agent, and the
    operator's key: what `nika-brain init` and `nika-brain operator init` do, called in this process
    (the console is under test here, not those two commands: tests/engine and tests/state run them)."""
    from nika_brain.engine.init import init
    from nika_brain.state import authority
    init(root, hooks=True)
    (root / "nika-brain.yml").write_text(fed_config(tmp), encoding="utf-8")
    git_out(root, "add", "nika-brain.yml")
    git_out(root, "commit", "-q", "-m", "federation: the stand-in agent")
    brain = Brain.at(root)
    authority.create_key(brain)
    return Brain.at(root)


def run_to_gate(run, root: Path) -> str:
    """The example workflow's first step done by hand (assisted mode): its code step has no tests,
    so a human gate opens. Returns the gate's id."""
    launched = run("workflow-launch", "workflows/example.yml", cwd=root)
    assert launched.returncode == 0, launched.stderr
    worktree = Path(run("workflow", "status", "example", "--worktree", cwd=root).stdout.strip())
    (worktree / "src" / "greeting").mkdir(parents=True)
    (worktree / "src" / "greeting" / "__init__.py").write_text(GREET)
    claim = run("workflow", "status", "example", "--claim", cwd=root).stdout.strip()
    run("claim", "close", claim, "--status", "ok", "--summary", "greet()", cwd=root)
    gate = run("workflow", "status", "example", "--gate", cwd=root).stdout.strip()
    assert gate, "the example's code step opens a gate"
    return gate


TEST_GREET = ('from src.greeting import greet\n\n\ndef test_greet():\n'
              '    assert greet("Ada") == "Hello, Ada!"\n')


def finish_run(run, root: Path) -> None:
    """The example's steps 2 and 3 done by hand (as the README's Quick start does) once its gate is
    decided: the run reaches DONE with its report."""
    worktree = Path(run("workflow", "status", "example", "--worktree", cwd=root).stdout.strip())
    for folder, name, text, summary in (("tests/greeting", "test_greet.py", TEST_GREET, "tests"),
                                        ("docs", "greeting.md", "# greet\n\n`greet(\"Ada\")`.\n", "documented")):
        claim = run("workflow", "status", "example", "--claim", cwd=root).stdout.strip()
        if not claim:
            assert run("workflow", "resume", "example", cwd=root).returncode == 0
            claim = run("workflow", "status", "example", "--claim", cwd=root).stdout.strip()
        (worktree / folder).mkdir(parents=True, exist_ok=True)
        (worktree / folder / name).write_text(text)
        closed = run("claim", "close", claim, "--status", "ok", "--summary", summary, cwd=root)
        assert closed.returncode == 0, closed.stdout + closed.stderr


def stop_kernels(root: Path, tmp: Path) -> None:
    subprocess.run(["tmux", "-S", str(tmp / "tmux.sock"), "kill-server"], capture_output=True)
    from nika_brain.federation.kernels import limits
    time.sleep(0.1)
    kdir = root / "kernels"
    for d in (kdir.iterdir() if kdir.is_dir() else ()):
        limits.remove_groups(limits.group_name(root, d.name))


BOUND = 120_000  # ms: generous (2 busy cores shared); the bench measures the real latencies


def new_page(browser, **options):
    """A page whose every wait (navigation, selector, condition) is bounded by BOUND."""
    page = browser.new_page(**options)
    page.set_default_timeout(BOUND)
    page.set_default_navigation_timeout(BOUND)
    return page


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
