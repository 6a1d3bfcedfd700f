"""Every shared fixture of the suite, registered once by tests/conftest.py (`pytest_plugins`):
test modules use them by name and import none of them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from nika_brain.brain import Brain
from tests.kit.brain import IDENTITY, LEAKY, make_brain, new_brain
from tests.kit.claude import hook_brain
from tests.kit.github_standin import GitHubStandin
from tests.kit.passwd import MISSING, nss_wrapper_installed, passwd_env
from tests.kit.redis import RedisServer, RedisUnavailable

# Every `python -m nika_brain` a test starts (the CLI, git hooks, satellites) must import the checkout
# under test, not whatever nika-brain is installed: the checkout goes first on PYTHONPATH.
CHECKOUT = str(Path(__file__).resolve().parents[2])
if os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] != CHECKOUT:
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (CHECKOUT, os.environ.get("PYTHONPATH")) if p)


# Every test gets a passwd database of its own (tests/kit/passwd.py): its processes see a home of their
# own, so no test writes keys under the real ~/.config/nika-brain; the pytest process itself is pointed
# there in code.
@pytest.fixture(autouse=True)
def operator_home(tmp_path_factory, monkeypatch) -> Path:
    """This test's passwd home (its operator keys live under it); an empty one stands for an agent."""
    if not nss_wrapper_installed():
        pytest.fail(MISSING, pytrace=False)
    from nika_brain.state import operator_home
    base = tmp_path_factory.mktemp("passwd")
    home = base / "home"
    for name, value in passwd_env(base / "nss", home).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(operator_home, "passwd_home", lambda: str(home))
    return home


def agent_env(tmp_path: Path) -> dict[str, str]:
    """An agent's view under the sandbox: the operator's key folder is not there (a home without it)."""
    return passwd_env(tmp_path / "agent-nss", tmp_path / "agent-home")


@pytest.fixture
def git_env(tmp_path_factory, monkeypatch) -> dict[str, str]:
    """Fixed git identity, empty HOME, no system git config, no leaked NIKA_* variables."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name, value in IDENTITY.items():
        monkeypatch.setenv(name, value)
    for name in LEAKY:
        monkeypatch.delenv(name, raising=False)
    return dict(os.environ)


@pytest.fixture
def brain(tmp_path, git_env) -> Brain:
    return make_brain(tmp_path / "brain")


@pytest.fixture
def cli(brain, git_env) -> Callable[..., subprocess.CompletedProcess]:
    """Run the real `nika-brain` (`python -m nika_brain ARGS`) in the brain; never raises on exit codes.

    `env` adds variables (a value of None removes one); `cwd` defaults to the brain root. The timeout is
    a bound only a hang reaches (a spawn rebuilding the goals index took over 120 s at load 20).
    """
    def run(*args: object, env: dict[str, str | None] | None = None, cwd: Path | str | None = None,
            input: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
        full = dict(os.environ)
        for name, value in (env or {}).items():
            if value is None:
                full.pop(name, None)
            else:
                full[name] = str(value)
        return subprocess.run([sys.executable, "-m", "nika_brain", *map(str, args)],
                              cwd=str(cwd or brain.root), env=full, input=input,
                              capture_output=True, text=True, timeout=timeout)
    return run


@pytest.fixture
def ibrain(tmp_path, git_env) -> Brain:
    """A brain made by `init` (template, hooks, one commit) in tmp_path/ibrain."""
    return new_brain(tmp_path / "ibrain")



@pytest.fixture
def hb(tmp_path, git_env):
    brain, claim_id = hook_brain(tmp_path / "brain")
    return brain, claim_id


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> Iterator[str]:
    """The URL of a real redis-server for this test session."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        url = server.start()
    except RedisUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
def github_standin():
    """A started GitHubStandin for one test, stopped afterwards."""
    with GitHubStandin() as standin:
        yield standin


@pytest.fixture(scope="session", autouse=True)
def door_services_end_with_the_session(tmp_path_factory) -> Iterator[None]:
    """A kernel's door service (`python -m nika_brain.federation.doors BRAIN`, kernels/sandbox.py)
    exits once no kernel of its brain is live; a test that ends with a kernel still "active" in its
    brain left it running after the suite (seven a run). Those whose brain lies under this session's
    temporary folder are stopped when the session ends."""
    yield
    import signal
    base = tmp_path_factory.getbasetemp().resolve()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        if len(args) < 2 or "nika_brain.federation.doors" not in args[:-1]:
            continue
        if Path(args[-1]).resolve().is_relative_to(base):
            try:
                os.kill(int(proc.name), signal.SIGTERM)
            except OSError:
                pass
