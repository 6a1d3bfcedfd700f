"""A kernel's own credentials: `kernels/<id>/credentials.env` (KEY=value lines, mode 0600).

Given to the kernel's process only, by the launcher (limits.py), never on a command line. Written
before the first start (`kernel spawn --env-file FILE`) and changed with `kernel env set|unset`; a
change applies at the next start (`kernel restart <id>`). Every write replaces the file atomically.
"""
from __future__ import annotations

import re
from pathlib import Path

from nika_brain.errors import BrainError
from nika_brain.support import fsio

FILE = "credentials.env"
HEADER = "# KEY=value lines: this kernel's own credentials, given to its process only\n"
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse(text: str, source: str) -> dict[str, str]:
    """KEY=value lines (blank lines and # comments skipped, `export ` allowed, quotes stripped)."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        key = key.strip().removeprefix("export ").strip()
        if not eq or not _KEY.match(key):
            raise BrainError(f"{source}:{n}: expected KEY=value")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if "\n" in value or "\0" in value:
            raise BrainError(f"{source}:{n}: a value is one line")
        out[key] = value
    return out


def read_file(path: Path) -> dict[str, str]:
    """The operator's env file for --env-file: a clear error when unreadable or malformed."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        raise BrainError(f"cannot read env file {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    return parse(text, str(path))


def load(folder: Path) -> dict[str, str]:
    try:
        return parse((folder / FILE).read_text(encoding="utf-8"), str(folder / FILE))
    except FileNotFoundError:
        return {}


def write(folder: Path, values: dict[str, str]) -> Path:
    path = folder / FILE
    fsio.atomic_write(path, HEADER + "".join(f"{k}={v}\n" for k, v in values.items()), mode=0o600)
    return path


def check_key(key: str) -> str:
    if not _KEY.match(key or ""):
        raise BrainError(f"not a variable name: {key!r} (letters, digits, _)")
    return key
