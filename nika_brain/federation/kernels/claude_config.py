"""What `kernel spawn` records in Claude Code's own configuration, so a kernel's first prompt is never
typed into one of its dialogs.

Claude Code keeps its state in `$CLAUDE_CONFIG_DIR/.claude.json` (default `~/.claude.json`, HOME as the
kernel's process sees it). Spawning is the operator's decision, so spawn records there what the
operator would otherwise answer by hand on the kernel's screen:

- the kernel folder as trusted: `projects[<folder>].hasTrustDialogAccepted = true` (the workspace-trust
  dialog, "Quick safety check: Is this a project you created or one you trust?");
- an API key the operator gave the kernel (`--env-file`, `kernel env set`): its last 20 characters in
  `customApiKeyResponses.approved` (the "Detected a custom API key" dialog), as Claude Code does itself.

Each is a read-modify-write of that one key, under a lock, written to a temporary file and renamed
over the config (atomic); every other key of the file is kept as it was. Nothing else is answered for
the user: a login, onboarding or update screen is reported by the runtime (tmux.dialog) with the
command to attach to the kernel.
"""
from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from nika_brain.errors import BrainError
from nika_brain.support import fsio

KEY_TAIL = 20  # how many trailing characters of a key Claude Code records as approved


def config_path(env: Mapping[str, str]) -> Path:
    """Claude Code's config file as the kernel's process finds it (its env: scrubbed + credentials)."""
    cfg_dir = env.get("CLAUDE_CONFIG_DIR")
    if cfg_dir:
        return Path(cfg_dir).expanduser() / ".claude.json"
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".claude.json"


def _update(path: Path, change: Callable[[dict], bool]) -> bool:
    """Read the config, apply `change` (True when it changed something), write it back atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".nika-lock")
    with open(lock, "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raw = ""
        except OSError as exc:
            raise BrainError(f"cannot read Claude Code's config {path}: {exc.strerror}") from exc
        try:
            data = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise BrainError(f"Claude Code's config {path} is not JSON; fix or remove it, then "
                             "`nika-brain kernel restart <id>`") from None
        if not isinstance(data, dict):
            raise BrainError(f"Claude Code's config {path} is not a JSON object")
        if not change(data):
            return False
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
        fsio.atomic_write(path, json.dumps(data, indent=2, ensure_ascii=False), mode=mode)
        return True


def trust_folder(env: Mapping[str, str], folder: Path) -> Path:
    """Record `folder` as trusted; returns the config file written (or already saying so)."""
    path = config_path(env)
    key = str(Path(folder).resolve())

    def change(data: dict) -> bool:
        projects = data.setdefault("projects", {})
        if not isinstance(projects, dict):
            raise BrainError(f"Claude Code's config {path}: `projects` is not an object")
        entry = projects.setdefault(key, {})
        if not isinstance(entry, dict) or entry.get("hasTrustDialogAccepted") is True:
            return False
        entry["hasTrustDialogAccepted"] = True
        return True

    _update(path, change)
    return path


def approve_key(env: Mapping[str, str], api_key: str) -> bool:
    """Record the operator's API key (its tail, as Claude Code does) as approved; True if added."""
    path = config_path(env)
    tail = api_key[-KEY_TAIL:]

    def change(data: dict) -> bool:
        resp = data.setdefault("customApiKeyResponses", {})
        if not isinstance(resp, dict):
            return False
        approved = resp.setdefault("approved", [])
        resp.setdefault("rejected", [])
        if not isinstance(approved, list) or tail in approved:
            return False
        approved.append(tail)
        if isinstance(resp["rejected"], list) and tail in resp["rejected"]:
            resp["rejected"].remove(tail)
        return True

    return _update(path, change)


def is_claude(argv: list[str] | tuple[str, ...]) -> bool:
    """Whether the agent command is Claude Code (only then is its config written)."""
    return bool(argv) and os.path.basename(argv[0]) == "claude"
