"""The default runtime: a tmux session `nika-os-<kernel_id>` running the agent in the kernel's folder.

nika-brain uses its own tmux server (`tmux -L nika-brain`, or `federation.tmux_socket`), so a user's
sessions and ours never mix. The pane stays after its process exits (remain-on-exit), so the exit
status of a dead agent can be read. Invoke types the prompt (newlines become spaces: Enter would
submit half of it) and presses Enter.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation import options
from nika_brain.federation.kernels.runtimes import Launch, Liveness, RuntimeMissing, pid_alive
from nika_brain.state.kernels import Kernel


def session_name(kernel_id: str) -> str:
    return f"nika-os-{kernel_id}"


class TmuxRuntime:
    name = "tmux"

    def missing(self, brain: Brain) -> str | None:
        if not shutil.which("tmux"):
            return "tmux is not installed (apt-get install tmux)"
        exe = options.get(brain, "agent_command")[0]
        if not (shutil.which(exe) or os.access(exe, os.X_OK)):
            return f"the agent command {exe!r} is not installed"
        return None

    def _tmux(self, brain: Brain, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        sock = options.get(brain, "tmux_socket")
        base = ["tmux", "-S", sock] if sock else ["tmux", "-L", "nika-brain"]
        try:
            p = subprocess.run([*base, *args], capture_output=True, text=True, timeout=15,
                               env={**os.environ, "TMUX": ""})
        except FileNotFoundError as exc:
            raise RuntimeMissing("tmux is not installed (apt-get install tmux)") from exc
        except subprocess.TimeoutExpired as exc:
            raise BrainError(f"tmux did not answer: {' '.join(args[:1])}") from exc
        if check and p.returncode != 0:
            raise BrainError(f"tmux {args[0]} failed: {p.stderr.strip() or p.returncode}")
        return p

    def start(self, brain: Brain, kernel: Kernel, launch: Launch) -> dict:
        name = session_name(kernel.id)
        if self._tmux(brain, "has-session", "-t", f"={name}", check=False).returncode == 0:
            raise BrainError(f"tmux session {name} exists already (kill it or the kernel first)")
        # The environment goes in through `env -i`: the tmux server's own environment must not leak.
        env_args = [f"{k}={v}" for k, v in sorted(launch.env.items())]
        cmd = shlex.join(["env", "-i", *env_args, *launch.argv])
        made = self._tmux(brain, "new-session", "-d", "-s", name, "-x", "200", "-y", "50", "-c",
                          str(launch.cwd), cmd, ";", "set-option", "-w", "-t", f"={name}:",
                          "remain-on-exit", "on", check=False)
        p = self._tmux(brain, "display-message", "-p", "-t", f"={name}:", "#{pane_pid}", check=False)
        if made.returncode != 0 or p.returncode != 0:
            self._tmux(brain, "kill-session", "-t", f"={name}", check=False)  # ours: it did not exist
            why = (made.stderr or p.stderr).strip() or "the agent exited at once"
            raise BrainError(f"tmux session {name} did not start: {why}")
        pid = int(p.stdout.strip() or 0) or None
        return {"tmux_session": name, "pid": pid, "started_at": time.time()}

    def alive(self, brain: Brain, kernel: Kernel, state: dict) -> Liveness:
        name = state.get("tmux_session") or session_name(kernel.id)
        p = self._tmux(brain, "display-message", "-p", "-t", f"={name}:",
                       "#{pane_dead} #{pane_pid} #{pane_dead_status} #{pane_dead_signal}", check=False)
        if p.returncode != 0:
            return Liveness(False, state.get("pid"), None, "tmux session gone")
        dead, pid, status, sig = (p.stdout.split() + ["", "", "", ""])[:4]
        pid_i = int(pid) if pid.isdigit() else None
        if dead == "1":
            code = -int(sig) if sig.isdigit() and int(sig) else \
                int(status) if status.lstrip("-").isdigit() else None
            return Liveness(False, pid_i, code, "agent process exited")
        if not pid_alive(pid_i):
            return Liveness(False, pid_i, None, "agent process gone")
        return Liveness(True, pid_i)

    def deliver(self, brain: Brain, kernel: Kernel, state: dict, prompt: str,
                launch: Launch) -> dict:  # noqa: ARG002
        name = state.get("tmux_session") or session_name(kernel.id)
        text = " ".join(prompt.split("\n"))
        self._tmux(brain, "send-keys", "-t", f"={name}:", "-l", text)
        self._tmux(brain, "send-keys", "-t", f"={name}:", "Enter")
        return {}

    def stop(self, brain: Brain, kernel: Kernel, state: dict, grace: float) -> None:
        name = state.get("tmux_session") or session_name(kernel.id)
        pid: int = state.get("pid") or 0
        if pid_alive(pid):
            try:
                os.killpg(pid, signal.SIGTERM)
            except OSError:
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass
            deadline = time.monotonic() + grace
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            if pid_alive(pid):
                for kill in (os.killpg, os.kill):
                    try:
                        kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
        self._tmux(brain, "kill-session", "-t", f"={name}", check=False)
