"""Where a kernel runs: one `Runtime` protocol, a registry, and the runtime state file.

A runtime starts the kernel's agent, says whether it is alive, hands it a prompt and stops it. It does
not confirm delivery: the service (federation.verbs) waits for the agent's own acknowledgement (the
UserPromptSubmit hook's record), the same way for every runtime. What a runtime needs to find its
kernel again (tmux session, pid, headless session id, cgroup plan) is kept in
`.nika/guarded/runtimes/<id>.json` (0600), written by the service: the supervisor declares a kernel
dead, releases its locks and fails its claims on what it says, so it lives where no agent writes
(issue 24, hole 8: `kernels/<id>/runtime.json`, its place before, was writable from a satellite under
Claude Code's sandbox). A runtime.json left there by an older version is read until the next save.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.state.kernels import Kernel, kernel_dir
from nika_brain.support import fsio, procs


class RuntimeMissing(BrainError):
    """A runtime's program (tmux, kubectl, the agent command) is not installed."""
    exit_code = 7


class NotTaken(BrainError):
    """The kernel cannot take the prompt now (dead, busy, silent, killed) or cannot answer it;
    `queued` is the queue id of a prompt that stays queued (None: nothing was queued)."""
    exit_code = 8

    def __init__(self, message: str, *, queued: str | None = None):
        super().__init__(message)
        self.queued = queued


EXIT_RUNTIME_MISSING = RuntimeMissing.exit_code
EXIT_NOT_TAKEN = NotTaken.exit_code


@dataclass(frozen=True)
class Launch:
    """What to run for a kernel: argv (launcher prefix + agent command), folder, scrubbed env."""
    argv: tuple[str, ...]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Liveness:
    alive: bool
    pid: int | None = None
    exit_status: int | None = None   # when dead and known (negative: killed by that signal)
    detail: str = ""


@runtime_checkable
class Runtime(Protocol):
    name: str

    def missing(self, brain: Brain) -> str | None:
        """Why this runtime cannot run here (a program not installed...), or None."""
    def start(self, brain: Brain, kernel: Kernel, launch: Launch) -> dict:
        """Start the kernel's agent; return the state to keep (merged into runtime.json)."""
    def alive(self, brain: Brain, kernel: Kernel, state: dict) -> Liveness: ...
    def deliver(self, brain: Brain, kernel: Kernel, state: dict, prompt: str, launch: Launch) -> dict:
        """Hand the prompt to the agent (no confirmation here); return state changes."""
    def stop(self, brain: Brain, kernel: Kernel, state: dict, grace: float) -> str | None:
        """Graceful stop, then forced after `grace` seconds; idempotent. May say which step ended
        the agent (asked, sigterm, sigkill, gone)."""


def _registry() -> dict[str, type]:
    from nika_brain.federation.kernels.runtimes.headless import HeadlessRuntime
    from nika_brain.federation.kernels.runtimes.kubernetes import KubernetesRuntime
    from nika_brain.federation.kernels.runtimes.tmux import TmuxRuntime
    return {"tmux": TmuxRuntime, "headless": HeadlessRuntime, "kubernetes": KubernetesRuntime}


def names() -> tuple[str, ...]:
    return tuple(_registry())


def get(name: str) -> Runtime:
    reg = _registry()
    if name not in reg:
        raise BrainError(f"unknown runtime: {name!r} (expected one of: {', '.join(reg)})")
    return reg[name]()


def require(brain: Brain, name: str) -> Runtime:
    rt = get(name)
    why = rt.missing(brain)
    if why:
        raise RuntimeMissing(f"runtime {name} is not available: {why}")
    return rt


# ---- runtime.json ----------------------------------------------------------------------------------

def state_path(brain: Brain, kernel_id: str) -> Path:
    return brain.guarded_dir / "runtimes" / f"{kernel_id}.json"


def _legacy_path(brain: Brain, kernel_id: str) -> Path:
    return kernel_dir(brain, kernel_id) / "runtime.json"


def load_state(brain: Brain, kernel_id: str) -> dict:
    path = state_path(brain, kernel_id)
    if not path.exists():
        path = _legacy_path(brain, kernel_id)   # an older version's, until the next save
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_state(brain: Brain, kernel_id: str, state: dict) -> None:
    path = state_path(brain, kernel_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fsio.atomic_write(path, json.dumps(state, indent=1, sort_keys=True), fsync=brain.config.fsync, mode=0o600)
    _legacy_path(brain, kernel_id).unlink(missing_ok=True)


def forget_state(brain: Brain, kernel_id: str) -> None:
    """A new kernel folder: no state of an earlier one under the same id counts."""
    state_path(brain, kernel_id).unlink(missing_ok=True)


pid_alive = procs.alive   # one answer everywhere (support/procs.py)
