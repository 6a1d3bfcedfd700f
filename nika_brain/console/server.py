"""`nika-brain console`: bind, print the URL with its token, serve until interrupted.

Loopback by default. Any other address serves the operator's decisions to a network, so it needs TLS
(`--tls-cert/--tls-key`) or an explicit `--insecure`. Refused inside an agent session: the console
is the operator.
"""
from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path
from typing import Callable

from nika_brain.brain import Brain
from nika_brain.errors import BrainError, Refused
from nika_brain.state import authority, gates

from . import auth


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_options(host: str, port: int, tls_cert: Path | None, tls_key: Path | None, insecure: bool) -> None:
    if not 0 <= port <= 65535:
        raise BrainError(f"--port must be 0..65535, not {port}")
    if (tls_cert is None) != (tls_key is None):
        raise BrainError("--tls-cert and --tls-key go together")
    for p in (tls_cert, tls_key):
        if p is not None and not p.is_file():
            raise BrainError(f"no such file: {p}")
    if not is_loopback(host) and tls_cert is None and not insecure:
        raise BrainError(f"--host {host} is not loopback: the console needs TLS there (--tls-cert/--tls-key), "
                         "or say --insecure")


def bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise BrainError(f"--host {host}: {exc.strerror}") from exc
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise BrainError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(host: str, port: int, token: str, tls: bool) -> str:
    shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"{'https' if tls else 'http'}://{shown}:{port}/?token={token}"


def serve(brain: Brain, *, host: str = "127.0.0.1", port: int = 8765, open_browser: bool = False,
          tls_cert: Path | None = None, tls_key: Path | None = None, insecure: bool = False,
          say: Callable[[str], None] = print) -> None:
    if gates.in_agent_session():
        raise Refused("refused: the console is the operator; it is not started from inside an agent session")
    check_options(host, port, tls_cert, tls_key, insecure)
    try:
        import uvicorn

        from .app import Console, build
    except ImportError as exc:
        from nika_brain.errors import MissingExtra
        raise MissingExtra(f"the console needs its extra: pip install 'nika-brain[console]' ({exc.name} "
                           "is missing)") from exc
    sock = bind(host, port)
    port = sock.getsockname()[1]
    token = auth.new_token()
    url = url_of(host, port, token, tls_cert is not None)
    console = Console(brain, token, port, secure=tls_cert is not None)
    app = build(console)
    kept = auth.keep(brain.root, url)   # before the URL is printed: whoever reads it finds it kept
    say(url)
    sys.stdout.flush()
    if not authority.available(brain):
        print(f"nika-brain: warning: this process cannot sign (no operator key at "
              f"{authority.key_paths(brain.root)[0]}): decisions will be refused; `nika-brain operator init`",
              file=sys.stderr)
    print(f"nika-brain: console for {brain.root}; the URL is also kept in {kept} (0600)", file=sys.stderr)
    if open_browser:
        import webbrowser
        webbrowser.open(url)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=2,
                            ssl_certfile=str(tls_cert) if tls_cert else None,
                            ssl_keyfile=str(tls_key) if tls_key else None)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        auth.forget(brain.root, url)
        sock.close()
