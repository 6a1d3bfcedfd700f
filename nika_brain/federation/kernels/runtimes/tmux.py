"""The default runtime: a tmux session `nika-os-<kernel_id>` running the agent in the kernel's folder.

nika-brain uses its own tmux server (`tmux -L nika-brain`, or `federation.tmux_socket`), so a user's
sessions and ours never mix. The pane stays after its process exits (remain-on-exit), so the exit
status of a dead agent can be read. Invoke types the prompt (newlines become spaces: Enter would
submit half of it) and presses Enter -- only once the agent's session has started (the service waits
for its SessionStart hook), never into whatever is on screen; `dialog()` names a Claude Code dialog the
agent is stuck on (trust, API key, login, onboarding, update) so the service can report it with the
command to attach. Stop asks the agent to exit as a user would (Ctrl-C twice), then signals.
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


# What Claude Code shows when it waits for its user (checked against v2.1.332's screens).
DIALOGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("workspace trust", ("Quick safety check", "Do you trust the files in this folder",
                         "Yes, I trust this folder")),
    ("API key", ("Detected a custom API key",)),
    ("login", ("Select login method", "Log in with your", "/login", "Invalid API key",
               "Please run /login")),
    ("onboarding", ("Choose the text style", "Let's get started")),
    ("update", ("Update available", "Updating Claude Code", "update now")),
    ("network", ("Unable to connect to Anthropic services",)),
)
ASK_WAIT = 1.0    # seconds the agent gets to exit after Ctrl-C twice
TERM_WAIT = 0.6   # then after SIGTERM, before SIGKILL


TYPED_WAIT = 2.0  # seconds deliver waits for the typed text to show before it presses Enter
RULE = "\u2500"   # Claude Code draws its input box between two rules of these


def _squeeze(text: str) -> str:
    return "".join(text.split())


def _shows(screen: str, text: str) -> bool:
    """Whether the screen shows the typed text (whitespace and line wraps aside: its last 40
    characters), or Claude Code's placeholder for a long paste."""
    tail = _squeeze(text)[-40:]
    return bool(tail) and tail in _squeeze(screen) or "[Pasted text" in screen


def input_box(screen: str) -> str | None:
    """What Claude Code's input box holds ("" when empty), None when the screen shows none: the
    lines between the last two rules, without the prompt mark."""
    lines = screen.splitlines()
    rules = [i for i, line in enumerate(lines) if line.strip() and set(line.strip()) == {RULE}]
    if len(rules) < 2:
        return None
    inside = lines[rules[-2] + 1:rules[-1]]
    text = " ".join(x.strip().lstrip("\u276f>").strip() for x in inside)
    return text.strip()


def dialog(screen: str) -> str | None:
    """The Claude Code dialog `screen` shows, by name, or None."""
    for name, marks in DIALOGS:
        if any(m in screen for m in marks):
            return name
    return None


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
        pid = state.get("pid")
        if pid and pid_alive(pid):  # the pane's process runs: no tmux call (the daemon asks often)
            return Liveness(True, pid)
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

    def base(self, brain: Brain) -> list[str]:
        sock = options.get(brain, "tmux_socket")
        return ["tmux", "-S", sock] if sock else ["tmux", "-L", "nika-brain"]

    def attach_command(self, brain: Brain, kernel: Kernel, state: dict) -> str:
        name = state.get("tmux_session") or session_name(kernel.id)
        return shlex.join([*self.base(brain), "attach", "-t", name])

    def screen(self, brain: Brain, kernel: Kernel, state: dict) -> str:
        name = state.get("tmux_session") or session_name(kernel.id)
        p = self._tmux(brain, "capture-pane", "-p", "-t", f"={name}:", check=False)
        return p.stdout if p.returncode == 0 else ""

    def waiting_on(self, brain: Brain, kernel: Kernel, state: dict) -> str | None:
        """The dialog the agent waits on, with how to answer it, or None."""
        what = dialog(self.screen(brain, kernel, state))
        if what is None:
            return None
        return (f"kernel {kernel.id} is waiting on Claude Code's {what} dialog; answer it: "
                f"{self.attach_command(brain, kernel, state)}")

    def deliver(self, brain: Brain, kernel: Kernel, state: dict, prompt: str,
                launch: Launch) -> dict:  # noqa: ARG002
        """Type the text, wait until the agent has read it (it shows on screen), then press Enter.
        Claude Code takes one read holding text and Enter for a paste, the Enter a newline in it: the
        prompt then sits in its input box, never submitted (what a loaded machine does to two quick
        send-keys). confirm() is the service's second look when no UserPromptSubmit came."""
        name = state.get("tmux_session") or session_name(kernel.id)
        text = " ".join(prompt.split("\n"))
        self._tmux(brain, "send-keys", "-t", f"={name}:", "-l", text)
        deadline = time.monotonic() + TYPED_WAIT
        while time.monotonic() < deadline and not _shows(self.screen(brain, kernel, state), text):
            time.sleep(0.05)
        self._tmux(brain, "send-keys", "-t", f"={name}:", "Enter")
        return {}

    def confirm(self, brain: Brain, kernel: Kernel, state: dict, prompt: str, retype: bool) -> str | None:
        """The prompt was typed and no UserPromptSubmit came yet: look at the screen. Still in the
        input box -> Enter again ("enter"); the input box empty and the text nowhere on screen (the
        keys were lost) and `retype` -> typed again ("retyped"); otherwise nothing (None): taken
        and its hook slow, or a dialog, or an agent that shows no input box."""
        name = state.get("tmux_session") or session_name(kernel.id)
        screen = self.screen(brain, kernel, state)
        box = input_box(screen)
        text = " ".join(prompt.split("\n"))
        if box is not None and box and _shows(box, text):
            self._tmux(brain, "send-keys", "-t", f"={name}:", "Enter")
            return "enter"
        if box == "" and retype and not _shows(screen, text) and dialog(screen) is None:
            self.deliver(brain, kernel, state, prompt, None)  # type: ignore[arg-type]
            return "retyped"
        return None

    def stop(self, brain: Brain, kernel: Kernel, state: dict, grace: float) -> str:
        """Ask the agent to exit (Ctrl-C twice, as its user would), then SIGTERM, then SIGKILL to its
        process group; returns the step that ended it: asked, sigterm, sigkill or gone."""
        name = state.get("tmux_session") or session_name(kernel.id)
        pid: int = state.get("pid") or 0
        how = "gone"
        if pid_alive(pid):
            steps = (("asked", None, min(grace, ASK_WAIT)), ("sigterm", signal.SIGTERM, min(grace, TERM_WAIT)),
                     ("sigkill", signal.SIGKILL, 1.0))
            for step, sig, wait in steps:
                how = step
                if sig is None:
                    for _ in range(2):
                        self._tmux(brain, "send-keys", "-t", f"={name}:", "C-c", check=False)
                else:
                    self._signal(pid, sig)
                if self._exited(brain, name, pid, wait):
                    break
        self._tmux(brain, "kill-session", "-t", f"={name}", check=False)
        return how

    @staticmethod
    def _signal(pid: int, sig: int) -> None:
        try:
            os.killpg(pid, sig)
        except OSError:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def _exited(self, brain: Brain, name: str, pid: int, wait: float) -> bool:
        deadline = time.monotonic() + wait
        while True:
            if not pid_alive(pid):
                return True
            p = self._tmux(brain, "display-message", "-p", "-t", f"={name}:", "#{pane_dead}", check=False)
            if p.returncode != 0 or p.stdout.strip() == "1":
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
