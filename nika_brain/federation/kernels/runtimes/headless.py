"""The headless runtime: no resident process; each invocation runs `<agent> -p <prompt>
--output-format json` with `--session-id <uuid>` the first time and `--resume <uuid>` after, in the
kernel's folder, under the kernel's limits and scrubbed environment (mode 3, servers without a
terminal). Each run's JSON result goes to `kernels/<id>/runs/<n>.json`, its exit status beside it.
A kernel is alive between invocations; an invocation killed by a signal (its memory limit) is death.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid

from nika_brain.brain import Brain
from nika_brain.federation.kernels.runtimes import Launch, Liveness, NotTaken, pid_alive
from nika_brain.state.kernels import Kernel, kernel_dir


class HeadlessRuntime:
    name = "headless"

    def missing(self, brain: Brain) -> str | None:
        from nika_brain.federation import options
        exe = options.get(brain, "agent_command")[0]
        return None if shutil.which(exe) or os.access(exe, os.X_OK) else \
            f"the agent command {exe!r} is not installed"

    def start(self, brain: Brain, kernel: Kernel, launch: Launch) -> dict:  # noqa: ARG002
        (kernel_dir(brain, kernel.id) / "runs").mkdir(mode=0o700, exist_ok=True)
        return {"session_id": str(uuid.uuid4()), "runs": 0, "started_at": time.time(), "pid": None}

    def _exit_file(self, brain: Brain, kernel: Kernel, n: int):
        return kernel_dir(brain, kernel.id) / "runs" / f"{n}.exit"

    def alive(self, brain: Brain, kernel: Kernel, state: dict) -> Liveness:
        n = state.get("runs", 0)
        if not n or pid_alive(state.get("pid")):
            return Liveness(True, state.get("pid"))
        try:
            code = int(self._exit_file(brain, kernel, n).read_text().strip())
        except (OSError, ValueError):
            return Liveness(False, state.get("pid"), None, "invocation vanished without an exit status")
        if code >= 128 + 1 and code - 128 in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT):
            return Liveness(False, state.get("pid"), -(code - 128), "invocation killed by a signal")
        return Liveness(True, None, code)

    def ended(self, brain: Brain, kernel: Kernel, state: dict) -> str | None:
        """The invocation last delivered has ended (whatever its status): what it left, for a
        prompt it never took (its UserPromptSubmit never came, e.g. a hook or the agent failed first)."""
        n = state.get("runs", 0)
        if not n or pid_alive(state.get("pid")):
            return None
        try:
            code = self._exit_file(brain, kernel, n).read_text().strip() or "unknown"
        except OSError:
            code = "unknown"
        out = kernel_dir(brain, kernel.id) / "runs" / f"{n}.json"
        try:
            last = next((ln for ln in reversed(out.read_text(errors="replace").splitlines()) if ln.strip()), "")
        except OSError:
            last = ""
        said = f", last said: {last.strip()[:200]}" if last else ""
        return f"its invocation {n} ended (exit status {code}) before taking it (output: {out}{said})"

    def deliver(self, brain: Brain, kernel: Kernel, state: dict, prompt: str, launch: Launch) -> dict:
        # One invocation at a time per session: two `--resume` of one session would interleave.
        from nika_brain.federation import options
        deadline = time.monotonic() + options.get(brain, "deliver_timeout")
        while pid_alive(state.get("pid")):
            if time.monotonic() >= deadline:
                raise NotTaken(f"kernel {kernel.id} is still answering invocation {state.get('runs')}; "
                               "the prompt stays queued")
            time.sleep(0.05)
        n = state.get("runs", 0) + 1
        sid = state["session_id"]
        how = ["--resume", sid] if state.get("runs") else ["--session-id", sid]
        out = kernel_dir(brain, kernel.id) / "runs" / f"{n}.json"
        out.parent.mkdir(mode=0o700, exist_ok=True)
        cmd = [*launch.argv, "-p", prompt, "--output-format", "json", *how]
        wrapped = ["sh", "-c", '"$@"; echo $? > "$0"', str(self._exit_file(brain, kernel, n)), *cmd]
        with open(out, "wb") as fh:
            p = subprocess.Popen(wrapped, cwd=launch.cwd, env=launch.env, stdin=subprocess.DEVNULL,
                                 stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        return {"runs": n, "pid": p.pid, "last_output": str(out)}

    def stop(self, brain: Brain, kernel: Kernel, state: dict, grace: float) -> None:  # noqa: ARG002
        pid: int = state.get("pid") or 0
        if not pid_alive(pid):
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 1.0)):
            try:
                os.killpg(pid, sig)
            except OSError:
                pass
            deadline = time.monotonic() + wait
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
