"""Whether Claude Code's OS sandbox is effective on this machine, for this brain.

Claude Code sandboxes every command an agent runs when its settings enable it and the platform can:
on Linux with bubblewrap (`bwrap`) and socat, on macOS with Seatbelt. Where it cannot, `auto` mode
runs the commands unsandboxed and `required` mode (failIfUnavailable) refuses to start. What holds
then is said by `doctor` and the README ("What each layer covers").
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple


class SandboxStatus(NamedTuple):
    effective: bool
    detail: str


def _bwrap_runs() -> str | None:
    """None when bubblewrap can build a sandbox here (namespaces allowed), else why not."""
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
            "--unshare-pid", "--die-with-parent", "true"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not run ({exc})"
    if proc.returncode != 0:
        return f"bwrap cannot create a sandbox here: {proc.stderr.strip()[:200] or proc.returncode}"
    return None


def platform_status() -> SandboxStatus:
    """Can this machine sandbox at all (independent of any settings)?"""
    if sys.platform == "darwin":
        return SandboxStatus(True, "macOS Seatbelt")
    if sys.platform != "linux":
        return SandboxStatus(False, f"no Claude Code sandbox on {sys.platform}")
    missing = [pkg for exe, pkg in (("bwrap", "bubblewrap"), ("socat", "socat"))
               if not shutil.which(exe)]
    if missing:
        return SandboxStatus(False, "missing " + ", ".join(missing) +
                             f" (install: apt-get install {' '.join(missing)})")
    why = _bwrap_runs()
    if why:
        return SandboxStatus(False, why)
    return SandboxStatus(True, "bubblewrap and socat present, bwrap builds a sandbox here")


def enabled_in(settings: Path) -> bool | None:
    """sandbox.enabled of a Claude Code settings file; None when the file is absent or unreadable."""
    try:
        data = json.loads(settings.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    box = data.get("sandbox") if isinstance(data, dict) else None
    return bool(isinstance(box, dict) and box.get("enabled"))


def brain_status(root: Path) -> SandboxStatus:
    """Effective for agent sessions of this brain: the platform can, and its settings enable it."""
    plat = platform_status()
    files = [root / ".claude" / "settings.json"]
    kernels = root / "kernels"
    if kernels.is_dir():
        files += sorted(p / ".claude" / "settings.json" for p in kernels.iterdir() if p.is_dir())
    states = {f: enabled_in(f) for f in files}
    off = [str(f.relative_to(root)) for f, on in states.items() if on is False]
    missing = states[files[0]] is None
    problems = []
    if not plat.effective:
        problems.append(plat.detail)
    if missing:
        problems.append("the brain's .claude/settings.json is not installed (`nika-brain claude install`)")
    if off:
        problems.append("sandbox not enabled in " + ", ".join(off))
    if problems:
        return SandboxStatus(False, "; ".join(problems))
    on = sum(1 for v in states.values() if v)
    return SandboxStatus(True, f"{plat.detail}; enabled in {on} settings file(s)")
