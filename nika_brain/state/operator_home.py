"""Where the operator's folder is: the passwd database's home, never $HOME (an agent sets that).

Light on purpose (os, pwd, pathlib): the PreToolUse hook asks it on every call to keep agents out of the
operator's folder, and must not pay for authority's hashing and git imports."""
from __future__ import annotations

import os
from pathlib import Path


def passwd_home() -> str:
    """The user's home as the passwd database records it."""
    import pwd
    try:
        return pwd.getpwuid(os.getuid()).pw_dir or "/nonexistent"
    except KeyError:
        return "/nonexistent"


def operator_dir() -> Path:
    """The operator's config folder (from the passwd database; no variable moves it)."""
    return Path(passwd_home()) / ".config" / "nika-brain"
