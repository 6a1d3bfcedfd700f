"""The OS sandbox nika-brain starts each kernel's agent in (bubblewrap, one mount namespace a kernel).

Whatever the agent or Claude Code do, from inside its sandbox a kernel sees:
- the machine as usual (its tools, /tmp, the brain's files it works on), but
- of `kernels/`, only its own folder: the parent is an empty tmpfs with `kernels/<id>/` bound back, so
  kernels spawned later are hidden too;
- of `.nika/` (vault, bus, embeddings cache, doors, other kernels' events), only what its
  hooks write (`sessions/`, `mutex/`, `federation/<id>/`); the rest is an empty tmpfs;
- the brain's decision folders (`gates/`, `grants/`, `breakers/`, `proposals/`, `runs/`, `doctrines/`)
  read-only, and its doctrine's snapshot (`.nika/doctrines/<id>/`, what its hooks enforce) read-only;
  so are `locks/`, `claims/`, `operator.pub` and `.git` (a kernel's shell cannot release, expire,
  unlink or widen another claim's lock or claim, rewrite the operator's pin, nor move or commit on the
  operator's branch; a hard link into them from its own folder crosses a mount and fails);
- nothing of the operator's key folder (`~/.config/nika-brain`, for HOME and the passwd home), of the user's Claude
  Code config (`~/.claude`, `~/.claude.json`) or of nika-brain's tmux server;
- its own HOME and CLAUDE_CONFIG_DIR under `kernels/<id>/home/` (memory, transcripts of its own);
- what governs its next start read-only, although it lies in its own folder (`SELF_READ_ONLY`: its
  record `kernel.yml` with its scope and doctrine field, its Claude Code settings `.claude/` (project
  settings and a settings.local.json it might add), the user settings of its own config dir, its
  credentials file) and the doctrine file its record names, wherever it lies: an agent that edited
  them would loosen its own walls at its next start;
- under a strict doctrine (`external_writes: ask|forbidden`), the whole brain read-only but its own
  folder, the folders of its scope and what its hooks write: a write outside its scope fails whatever
  process makes it (an interpreter, a script, a compiled tool), not only the ones the hook can read;
- its door: `DOOR_SOCKET`, a unix socket bound in from `.nika/doors/<id>/`, through which it reaches
  the vault, the summaries and the bus (federation/doors). The server knows the kernel by the socket.
Capabilities are dropped (root inside cannot unmount what hides the rest), pid and ipc are private.

`unavailable()` says why bwrap cannot run here (spawn then refuses unless the operator said
`--no-sandbox`, recorded as `sandbox: off` in the kernel record).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.bus import door
from nika_brain.claude import bwrap
from nika_brain.state.kernels import Kernel, kernel_dir

DOOR_DIR = os.path.dirname(door.SOCKET)      # fixed place inside every sandbox
DOOR_SOCKET = door.SOCKET
READ_ONLY = ("gates", "grants", "breakers", "proposals", "runs", "doctrines")   # operator decisions, run records
# Other claims' locks and the claims themselves: a kernel's shell could release, rewrite (`--ttl 1`),
# unlink or widen them as plain files (issue 24, holes 2, 3, 10); the pin every decision is checked
# against (issue 24, hole 1: a rewritten operator.pub makes nothing authentic on the operator's machine),
# and git's folder (`git reset --hard HEAD~2` moved the operator's branch back to older locks, claims
# and gates; a commit made with git's plumbing would change the operator.pub that machines without the
# operator's own pin trust). nika-brain never commits from inside a kernel.
READ_ONLY_STATE = ("locks", "claims")
READ_ONLY_PATHS = ("operator.pub", ".git")
STATE_RW = bwrap.STATE_RW                    # .nika/ folders the hooks write (plus federation/<id>)
STATE_RO = ("leases",)                       # .nika/ folders the hooks read: the lease mirror
# In the kernel's own folder, read-only: what its next start reads (its record, its Claude Code settings,
# its credentials). `.claude/` as a folder, so that no settings.local.json can be added either.
SELF_READ_ONLY = ("kernel.yml", ".claude", "credentials.env", "home/.claude/settings.json")
ROOT_READ_ONLY = (".claude",)                # the brain's own Claude Code settings (the operator's)
BASE = [*bwrap.ISOLATION, "--die-with-parent"]


def unavailable() -> str | None:
    """None when bubblewrap builds our kind of sandbox here, else one line saying why not."""
    import shutil
    if not shutil.which("bwrap"):
        return bwrap.runs()   # says it is not installed
    try:
        Path(DOOR_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create the door mount point {DOOR_DIR}: {exc.strerror}"
    return bwrap.runs("--die-with-parent", "--tmpfs", DOOR_DIR)


def door_dir(brain: Brain, kernel_id: str) -> Path:
    return brain.state_dir / "doors" / kernel_id


def home_dir(brain: Brain, kernel_id: str) -> Path:
    """The kernel's own HOME inside its sandbox (Claude Code config, memory and transcripts)."""
    return kernel_dir(brain, kernel_id) / "home"


def operator_paths() -> list[Path]:
    """Folders and files of the operator (keys, tmux server) and of the user's Claude Code that no
    kernel sees."""
    return [*bwrap.operator_key_paths(), *bwrap.claude_config_paths()]


_hide = bwrap.hide


def own_env(brain: Brain, kernel: Kernel) -> dict[str, str]:
    """HOME and CLAUDE_CONFIG_DIR the sandbox gives the agent: its own under `kernels/<id>/home/`,
    except those the operator set in the kernel's credentials file (`--env-file`, `kernel env set`),
    which the launcher has already put in the environment and the sandbox keeps."""
    from nika_brain.federation.kernels import credentials
    home = home_dir(brain, kernel.id)
    mine = {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude")}
    given = credentials.load(kernel_dir(brain, kernel.id))
    return {k: v for k, v in mine.items() if k not in given}


def prepare(brain: Brain, kernel: Kernel) -> None:
    """Create what the sandbox binds (its home, its door folder, its hooks' state folders)."""
    from nika_brain.federation.kernels import doctrine
    for d in (home_dir(brain, kernel.id) / ".claude", door_dir(brain, kernel.id),
              brain.state_dir / "federation" / kernel.id, doctrine.snapshot_dir(brain, kernel.id),
              *(brain.state_dir / s for s in (*STATE_RW, *STATE_RO)),
              *(brain.root / s for s in (*READ_ONLY, *READ_ONLY_STATE))):
        d.mkdir(parents=True, exist_ok=True)
    door_dir(brain, kernel.id).chmod(0o700)
    user = home_dir(brain, kernel.id) / ".claude" / "settings.json"
    if not user.exists():   # bound read-only: it must exist, or the agent could create one
        user.write_text("{}\n", encoding="utf-8")


def doctrine_file(brain: Brain, kernel: Kernel) -> Path | None:
    """The doctrine file the kernel's record names by path (not under `doctrines/`), if any."""
    field = (kernel.doctrine or "").strip()
    if not field.endswith((".yml", ".yaml")):
        return None
    path = (brain.root / field).resolve()
    kernels_dir, own = brain.kernels_dir.resolve(), kernel_dir(brain, kernel.id).resolve()
    if not path.is_file() or not path.is_relative_to(brain.root.resolve()):
        return None
    if path.is_relative_to(kernels_dir) and not path.is_relative_to(own):
        return None   # another kernel's folder stays hidden (its doctrine file is not bound in)
    return path


def writable_scope(brain: Brain, kernel: Kernel) -> list[Path]:
    """The brain folders (or files) a strict kernel may write besides its own folder: its scope's
    entries, up to their first wildcard (`docs/client/*` -> docs/client); a folder entry that is not
    there yet is created, so that the kernel can write in it."""
    root = brain.root.resolve()
    out: list[Path] = []
    for s in kernel.scope:
        head = s.strip().lstrip("/").split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
        head = head.rstrip("/")
        if not head:
            continue
        path = (root / head).resolve()
        if not path.is_relative_to(root) or path == root:
            continue
        if not path.exists() and (s.rstrip().endswith(("/", "*")) or not path.suffix):
            path.mkdir(parents=True, exist_ok=True)
        if path.exists():
            out.append(path)
    return out


def ensure_doors(brain: Brain, kernel_id: str, timeout: float = 60.0) -> None:
    """Start a standalone door service in the background unless one runs (the federation daemon hosts
    the doors under `federation up`: daemon/doors.py),
    and wait until this kernel's door is open."""
    import sys
    import time

    from nika_brain.errors import BrainError
    from nika_brain.federation.kernels import runtimes
    folder = brain.state_dir / "doors"
    sock = folder / kernel_id / "door.sock"
    try:
        pid = int((folder / "server.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pid = 0
    if not (pid and runtimes.pid_alive(pid)):
        with open(folder / "server.log", "ab") as log:
            subprocess.Popen([sys.executable, "-m", "nika_brain.federation.doors", str(brain.root)],
                             cwd=brain.root, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True)
    deadline = time.monotonic() + timeout
    while not sock.exists():
        if time.monotonic() > deadline:
            raise BrainError(f"kernel {kernel_id}: its door did not open ({brain.rel(sock)}; see "
                             f"{brain.rel(folder / 'server.log')})")
        time.sleep(0.02)


def wrap(brain: Brain, kernel: Kernel, tmux_socket: str | None = None) -> list[str]:
    """bwrap argv (ending with `--`) that runs what follows inside the kernel's sandbox (its door
    opened first)."""
    prepare(brain, kernel)
    ensure_doors(brain, kernel.id)
    root, state = brain.root, brain.state_dir
    own = kernel_dir(brain, kernel.id)
    from nika_brain.federation.kernels import doctrine
    strict = (doctrine.for_hook(brain, kernel.id) or doctrine.Doctrine()).external_writes != "allowed"
    argv = ["bwrap", "--bind", "/", "/", *BASE]
    if strict:   # the brain read-only, then its own folder, its scope and its hooks' state writable
        argv += ["--ro-bind", str(root), str(root)]
        for path in writable_scope(brain, kernel):
            if not path.is_relative_to(brain.kernels_dir.resolve()):   # another kernel's stays hidden
                argv += ["--bind", str(path), str(path)]
    argv += ["--tmpfs", str(brain.kernels_dir), "--bind", str(own), str(own),
             "--tmpfs", str(state)]
    for name in SELF_READ_ONLY:
        if (own / name).exists():
            argv += ["--ro-bind", str(own / name), str(own / name)]
    for name in ROOT_READ_ONLY:
        if (root / name).exists():
            argv += ["--ro-bind", str(root / name), str(root / name)]
    named = doctrine_file(brain, kernel)
    if named is not None:
        argv += ["--ro-bind", str(named), str(named)]
    for sub in (*STATE_RW, f"federation/{kernel.id}"):
        argv += ["--bind", str(state / sub), str(state / sub)]
    for sub in STATE_RO:
        argv += ["--ro-bind", str(state / sub), str(state / sub)]
    for sub in (*READ_ONLY, *READ_ONLY_STATE):
        argv += ["--ro-bind", str(root / sub), str(root / sub)]
    snap = str(doctrine.snapshot_dir(brain, kernel.id))
    argv += ["--ro-bind", snap, snap]
    for name in READ_ONLY_PATHS:
        if (root / name).exists():
            argv += ["--ro-bind", str(root / name), str(root / name)]
    hidden = operator_paths()
    if tmux_socket:
        hidden.append(Path(tmux_socket))
    for p in hidden:
        argv += _hide(p)
    argv += ["--bind", str(door_dir(brain, kernel.id)), DOOR_DIR]
    for key, value in own_env(brain, kernel).items():
        argv += ["--setenv", key, value]
    argv += ["--setenv", "NIKA_SANDBOX", "bwrap", "--chdir", str(own), "--"]
    return argv


def claude_sandbox(kernel: Kernel) -> dict[str, str]:
    """Claude Code's own sandbox setting for a kernel's settings: off inside ours. A nested bwrap needs
    namespace rights that would also let the agent unmount what hides the other kernels (tested:
    with capabilities kept, `umount` reopens a hidden folder), so ours drops them and takes its place;
    elsewhere (--no-sandbox) Claude Code's applies as configured."""
    return {"sandbox": "off"} if kernel.sandbox == "bwrap" else {}


_WHY: list[str | None] = []   # unavailable(), asked once a process


def choose(kernel: Kernel, sandboxed: bool) -> Kernel:
    """The kernel with its `sandbox` set: bwrap (refused when bwrap cannot run here) or off."""
    from dataclasses import replace

    from nika_brain.errors import BrainError
    if kernel.runtime == "kubernetes":
        return kernel   # the pod is its sandbox
    if not sandboxed:
        return replace(kernel, sandbox="off")
    if not _WHY:
        _WHY.append(unavailable())
    if _WHY[0]:
        raise BrainError(f"kernel {kernel.id}: no OS sandbox here ({_WHY[0]}); the operator may spawn it "
                         "unsandboxed with --no-sandbox (recorded in its record and `kernel list`)")
    return replace(kernel, sandbox="bwrap")
