"""The bubblewrap walls nika-brain starts its agents in: the part a kernel's sandbox
(federation/kernels/sandbox.py) and a satellite's wall (`satellite_wall`, used by
engine/satellites.launch) share. Here, below both the engine and the federation, because the engine
may not import the federation.

A satellite's wall (`satellite_wall`): the machine as usual, but
- the whole brain read-only (`locks/`, `claims/`, `gates/`, `proposals/`, `grants/`, `kernels/*/queue.jsonl`,
  `.nika/`, the brain's `.git`...), then writable again: its worktree and the folders its hooks write
  (`.nika/sessions`, `.nika/mutex`). A hard link from the worktree to a state file crosses a mount and
  fails (EXDEV), a write or an unlink in them fails (EROFS), whatever process makes it;
- the kernels' doors (`.nika/doors`), the other satellites' doors (`.nika/guarded/doors`, its own bound
  back), the kernels' credentials and homes, the operator's key folder, nika-brain's tmux server and
  the user's session sockets hidden;
- its own pid and ipc namespaces, no capabilities (root inside cannot unmount what hides the rest);
- the network and the user's Claude Code config as they are (Claude Code needs its login).
It changes locks, claims and kernels' queues through its door only (federation/doors/claim.py). Its
git commits fail there (`.git` is read-only): the orchestrator commits its work once it exits.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from nika_brain.brain import Brain

# What every wall does: its own /dev, /proc, pid and ipc namespaces, no capabilities.
ISOLATION = ["--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL"]
STATE_RW = ("sessions", "mutex")   # .nika/ folders the hooks write


def runs(*extra: str) -> str | None:
    """None when bubblewrap builds our kind of wall here (with `extra` options), else one line why not."""
    if not shutil.which("bwrap"):
        return "bubblewrap (bwrap) is not installed (apt-get install bubblewrap)"
    argv = ["bwrap", "--bind", "/", "/", *ISOLATION, *extra, "true"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not run ({exc})"
    if p.returncode != 0:
        return f"bwrap cannot build a sandbox here: {p.stderr.strip()[:200] or p.returncode}"
    return None


def hide(path: Path) -> list[str]:
    """bwrap options that make `path` empty inside (a folder: a tmpfs; a file or a socket: /dev/null)."""
    if path.is_symlink():
        path = path.resolve()
    if path.is_dir():
        return ["--tmpfs", str(path)]
    if path.exists():
        return ["--ro-bind", "/dev/null", str(path)]
    return []


def operator_key_paths() -> list[Path]:
    """The operator's key folder (for HOME, the passwd home and XDG_CONFIG_HOME) and nika-brain's tmux
    server (send-keys would reach every kernel's pane): hidden in every wall."""
    from nika_brain.state import authority
    op = authority.operator_dir()   # where the keys are: the passwd home's, whatever HOME says
    homes = {Path(os.path.expanduser("~")), op.parent.parent}
    out: list[Path] = [op, *(h / ".config" / "nika-brain" for h in sorted(homes))]
    if os.environ.get("XDG_CONFIG_HOME"):
        out.append(Path(os.environ["XDG_CONFIG_HOME"]) / "nika-brain")
    out.append(Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}")
    return out


def claude_config_paths() -> list[Path]:
    """The user's Claude Code config: hidden from kernels (they get their own), kept for satellites."""
    from nika_brain.state import authority
    homes = {Path(os.path.expanduser("~")), authority.operator_dir().parent.parent}
    return [p for h in sorted(homes) for p in (h / ".claude", h / ".claude.json")]


def session_sockets() -> list[Path]:
    """The user's session sockets that lead out of any sandbox (systemd and D-Bus under
    $XDG_RUNTIME_DIR: `systemd-run --user`; the ssh agent; a container engine), as they exist now."""
    out = [Path(os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}")]
    if os.environ.get("SSH_AUTH_SOCK"):
        out.append(Path(os.environ["SSH_AUTH_SOCK"]))
    out += [Path(p) for p in ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
                              "/run/podman/podman.sock")]
    return [p for p in out if p.exists()]


def satellite_wall(brain: Brain, worktree: Path, door_dir: Path | None = None,
                   writable: tuple[Path, ...] = ()) -> list[str]:
    """bwrap argv (ending with `--`) that runs what follows in a satellite's wall: the brain read-only
    but `worktree`, the hooks' state folders and `writable`; `door_dir` (the folder of its own door
    socket, under .nika/guarded/doors/) the only door it sees. For any session nika-brain starts in a
    worktree with a door (a swarm satellite, an assisted session). No --die-with-parent: a satellite
    outlives an orchestrator killed meanwhile (the next one adopts its result); its launcher ends it by
    its process group."""
    root, state = brain.root.resolve(), brain.state_dir.resolve()
    for sub in STATE_RW:
        (state / sub).mkdir(parents=True, exist_ok=True)
    kernel_doors, doors = state / "doors", brain.guarded_dir.resolve() / "doors"
    for d in (kernel_doors, doors):
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    argv = ["bwrap", "--bind", "/", "/", *ISOLATION, "--ro-bind", str(root), str(root)]
    for path in (Path(worktree).resolve(), *(Path(w).resolve() for w in writable)):
        argv += ["--bind", str(path), str(path)]
    for sub in STATE_RW:
        argv += ["--bind", str(state / sub), str(state / sub)]
    argv += ["--tmpfs", str(kernel_doors), "--tmpfs", str(doors)]
    if door_dir is not None:
        door_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        argv += ["--ro-bind", str(door_dir.resolve()), str(door_dir.resolve())]
    kernels = root / "kernels"
    for k in sorted(kernels.iterdir()) if kernels.is_dir() else ():
        for secret in (k / "credentials.env", k / "home"):
            argv += hide(secret)
    for p in (*operator_key_paths(), *session_sockets()):
        argv += hide(p)
    argv += ["--setenv", "NIKA_SANDBOX", "bwrap", "--chdir", str(Path(worktree).resolve()), "--"]
    return argv
