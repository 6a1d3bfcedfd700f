"""The console's session token and CSRF token.

The token is made at start (random, 256 bits), printed once in the first URL (as Jupyter does) and
kept in the operator's `private/` folder (0600: `<brain-id>.console`), the folder every kernel's
sandbox, Read deny rule and hook refuse to agent sessions; it is removed when the console stops.
Opening the first URL sets it as an HttpOnly, SameSite=Strict cookie and drops it from the address.

Every request needs the token (cookie, or `?token=` once): else 401. A state-changing request (POST)
needs, in addition, the CSRF token: a form's hidden `csrf` field or the `X-CSRF-Token` header, an
HMAC of the session token that only a page served by this console carries: else 403.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from nika_brain.state import authority


def new_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_for(token: str) -> str:
    return hmac.new(token.encode(), b"nika-console-csrf", hashlib.sha256).hexdigest()


def same(given: str | None, expected: str) -> bool:
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())


def cookie_name(port: int) -> str:
    """One cookie per port: browsers share cookies across the ports of a host."""
    return f"nika_console_{port}"


def token_path(root: Path) -> Path:
    """Where the running console's URL is kept for the operator (the folder agents are denied)."""
    return authority.private_dir() / f"{authority.brain_id(root)}.console"


def keep(root: Path, url: str) -> Path:
    """Write the URL (with its token) 0600 into the operator's private folder (0700)."""
    path = token_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(url + "\n")
    os.replace(tmp, path)
    return path


def forget(root: Path, url: str) -> None:
    """Remove the kept URL if it is still ours (another console may have replaced it)."""
    path = token_path(root)
    try:
        if path.read_text().strip() == url:
            path.unlink()
    except OSError:
        pass
