"""What a satellite gets and how its work is judged: the brief, the test command, swarm launching."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.engine import index
from nika_brain.engine.claimdoors import tell as _tell_door
from nika_brain.errors import BrainError
from nika_brain.gitrepo import git
from nika_brain.state import agents
from nika_brain.state.claims import Claim
from nika_brain.state.workflows import Step, Workflow
from nika_brain.support import fsio

_PASSED = re.compile(r"(\d+) passed")
_FAILED = re.compile(r"(\d+) (?:failed|errors?)")


_BRIEF_ENV = None


def render_brief(brain: Brain, wf: Workflow, step: Step, claim: Claim, *, worktree: Path | None,
                 context: dict | None = None) -> str:
    import jinja2  # only the brief needs a template engine

    agent = step.agent or wf.agent or brain.config.default_agent
    try:
        body = agents.load_card(brain, agent).body.strip()
    except BrainError:
        body = ""
    global _BRIEF_ENV
    if _BRIEF_ENV is None:  # compiled once per process: a swarm run renders one brief per step
        _BRIEF_ENV = jinja2.Environment(loader=jinja2.PackageLoader("nika_brain", "templates"),
                                        keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    return _BRIEF_ENV.get_template("brief.md.j2").render(
        wf=wf, step=step, claim=claim, worktree=worktree, agent=agent, card_body=body[:4000],
        run_context=context or {})


@dataclass(frozen=True)
class TestRun:
    command: str
    returncode: int
    passed: int
    failed: int
    tail: str
    missing: str = ""   # the program or module the command needs and does not find ("" when it ran)

    @property
    def green(self) -> bool:
        return self.returncode == 0 and self.failed == 0


def run_tests(command: str, cwd: Path, *, timeout: float = 3600.0, env: dict | None = None) -> TestRun:
    """Run a step's test command in the shell; 0 failures means exit code 0 and no 'N failed'."""
    try:
        proc = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return TestRun(command, 124, 0, 1, f"timed out after {timeout:.0f}s")
    out = proc.stdout + proc.stderr
    passed = sum(int(n) for n in _PASSED.findall(out[-4000:]))
    failed = sum(int(n) for n in _FAILED.findall(out[-4000:]))
    if proc.returncode != 0 and failed == 0:
        failed = 1  # a red exit code with no count is still a failure
    missing = _missing_runner(command, proc.returncode, cwd, env) if proc.returncode != 0 else ""
    return TestRun(command, proc.returncode, passed, failed, out[-1500:], missing)


_FIND_MODULE = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)"


def _missing_runner(command: str, returncode: int, cwd: Path, env: dict | None) -> str:
    """What a failed test command could not find: a program (the shell's exit 127: the first command
    word not on PATH) or, for `python -m <module>`, the module (asked of that interpreter). "" when
    it ran and failed."""
    import shutil
    try:
        words = shlex.split(command)
    except ValueError:
        return ""
    run_env = {**os.environ, **(env or {})}
    starts = [0] + [i + 1 for i, w in enumerate(words) if w in ("&&", "||", ";", "|")]
    programs = []
    for i in starts:
        while i < len(words) and "=" in words[i] and not words[i].startswith(("=", "-")):
            i += 1   # VAR=value prefixes
        if i < len(words):
            programs.append((i, words[i]))
    if returncode == 127:
        for _, program in programs:
            if program not in _SHELL_WORDS and shutil.which(program, path=run_env.get("PATH")) is None \
                    and not (cwd / program).is_file():
                return program
        return ""
    for i, program in programs:
        if words[i + 1:i + 2] == ["-m"] and len(words) > i + 2 and os.path.basename(program).startswith("python"):
            try:
                probe = subprocess.run([program, "-c", _FIND_MODULE, words[i + 2]], cwd=cwd, capture_output=True,
                                       timeout=60, env=run_env)
            except (OSError, subprocess.SubprocessError):
                continue
            if probe.returncode == 3:
                return f"{words[i + 2]} (a Python module, for {program})"
    return ""


_SHELL_WORDS = {"cd", "export", "set", "unset", "exec", "env", "true", "false", "test", "[", "source", ".",
                "if", "then", "fi", "for", "do", "done", "while", "!", "(", ")", "{", "}", "echo", "exit"}


DEFAULT_COMMAND = ("claude", "-p", "{brief}", "--output-format", "json", "--permission-mode",
                   "acceptEdits")


def session_settings(brain: Brain, kernel: object = None) -> Path:
    """The settings file every session nika-brain starts runs under, whatever its folder.

    Claude Code reads project settings only from the folder it starts in, and a satellite starts in
    a theme worktree that has none: so it is always given `--settings` explicitly. A kernel's own
    settings (its isolation) when the run belongs to one, else the brain's; the brain's are
    installed first when missing or not ours (hooks, deny rules, sandbox)."""
    from nika_brain.claude import settings as claude_settings
    if isinstance(kernel, str) and kernel and (brain.kernels_dir / kernel).is_dir():
        path = brain.kernels_dir / kernel / ".claude" / "settings.json"
        if not (path.parent / claude_settings.SIDECAR).is_file():
            claude_settings.install(path.parent.parent, kernel_id=kernel, brain_dir=brain.root,
                                    sandbox=brain.config.sandbox)
        return path
    path = brain.root / ".claude" / "settings.json"
    if not (path.parent / claude_settings.SIDECAR).is_file():
        claude_settings.install(brain.root, brain_dir=brain.root, sandbox=brain.config.sandbox)
    return path


@dataclass(frozen=True)
class SatelliteOutcome:
    returncode: int
    status: str | None     # ok | partial | failed, from the satellite's JSON, or None
    summary: str
    unavailable: bool = False  # no satellite could be started at all (the brain's setup, not the step)


_CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
                    "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX")


def claude_credentials(env: dict[str, str] | None = None) -> str | None:
    """Where Claude Code would find its credentials (a variable, its login file, an apiKeyHelper), or
    None: a `claude` with none stops at its login prompt, which is the brain's setup, not the step's
    failure. Read from what Claude Code reads, never from its output text."""
    env = dict(os.environ) if env is None else env
    for var in _CREDENTIAL_VARS:
        if env.get(var):
            return var
    home = Path(env.get("HOME") or Path.home())
    folder = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else home / ".claude"
    if (folder / ".credentials.json").is_file():
        return str(folder / ".credentials.json")
    for settings in (folder / "settings.json", home / ".claude.json"):
        try:
            text = settings.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if '"apiKeyHelper"' in text or '"primaryApiKey"' in text:
            return str(settings)
    return None


def launch(brain: Brain, claim: Claim, brief: str, brief_file: Path, cwd: Path, *,
           kernel_settings: Path | None = None, timeout: float = 3600.0) -> SatelliteOutcome:
    """Run the satellite command (Claude Code headless by default) and read its JSON result.

    The command may use {brief}, {brief_file}, {claim}, {worktree}, {brain}. The satellite may close
    its claim itself with `nika-brain claim close`; otherwise its last JSON object on stdout decides:
    {"status": ok|partial|failed, "summary": ...} or Claude's {"type": "result", "is_error": ...}.
    """
    template = brain.config.satellite_command or DEFAULT_COMMAND
    if not brain.config.satellite_command and shutil.which(DEFAULT_COMMAND[0]) is None:
        # Nothing can run the step here: not the step's failure (no breaker count), the brain's setup.
        return SatelliteOutcome(127, None, "no satellite can run here: nika-brain.yml sets no "
                                "satellite_command and `claude` is not on PATH — install Claude Code "
                                "(and log in) or set satellite_command", unavailable=True)
    if not brain.config.satellite_command and not claude_credentials():
        return SatelliteOutcome(127, None, "no satellite can run here: `claude` is installed but has no "
                                "credentials (no ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN or "
                                "CLAUDE_CODE_OAUTH_TOKEN, no .credentials.json in its config folder) — run "
                                "`claude` once and /login, export ANTHROPIC_API_KEY, or set satellite_command",
                                unavailable=True)
    values = {"brief": brief, "brief_file": str(brief_file), "claim": claim.id, "worktree": str(cwd),
              "brain": str(brain.root)}
    try:
        argv = [part.format(**values) for part in template]
    except (KeyError, IndexError, ValueError) as exc:
        return SatelliteOutcome(2, "failed", f"satellite_command in nika-brain.yml has a bad placeholder "
                                f"({exc}): use {{brief}}, {{brief_file}}, {{claim}}, {{worktree}}, {{brain}}, "
                                "and {{ }} for a literal brace")
    door_sock = brain.guarded_dir / "doors" / claim.id / "door.sock"   # doors/claim.socket_path
    door_sock.unlink(missing_ok=True)   # a previous launch's: the command waits for this door's own
    wall = _wall(brain, claim, cwd, door_sock)
    if isinstance(wall, SatelliteOutcome):
        return wall
    if not brain.config.satellite_command and kernel_settings is not None:
        from nika_brain.claude import settings as claude_settings
        own = brain.guarded_dir / "satellites" / claim.id / "settings.json"
        own.parent.mkdir(parents=True, exist_ok=True)
        argv += ["--settings", str(claude_settings.satellite_settings(brain.root, kernel_settings, own,
                                                                      walled=bool(wall)))]
    if wall and _not_found(argv[0], cwd):   # said as without the wall (bwrap's execvp line is not the reason)
        return SatelliteOutcome(127, "failed", f"satellite could not start: command not found: "
                                f"{shlex.join(argv[:1])} (set satellite_command in nika-brain.yml)")
    argv = wall + argv
    env = {**{k: v for k, v in os.environ.items() if k != git.RERUN}, "NIKA_BRAIN_DIR": str(brain.root),
           "NIKA_CLAIM": claim.id, "NIKA_WORKTREE": str(cwd), "NIKA_AGENT": "1", "NIKA_DOOR": str(door_sock)}
    out_path, err_path = _files(brain, claim.id)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    index.flush(brain)   # the satellite finds the index as its claim's opening left it
    # Its output goes to files, not pipes, and its pid and start time are recorded: an orchestrator
    # killed meanwhile leaves a satellite whose result the next one still reads (see `alive`).
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            # its own process group: a timeout ends the whole wall (the pid namespace with it)
            proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=err, env=env, stdin=subprocess.DEVNULL,
                                    process_group=0)
        except (FileNotFoundError, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                return SatelliteOutcome(127, "failed", f"satellite could not start: command not found: "
                                        f"{shlex.join(argv[:1])} (set satellite_command in nika-brain.yml)")
            return SatelliteOutcome(126, "failed", f"satellite could not start: {shlex.join(argv[:1])}: "
                                    f"{exc.strerror or exc}")
    _record(brain, claim.id, proc.pid)
    try:
        _tell_door(brain, f"open {claim.id} {proc.pid}")   # it answers this process and its descendants only
        return _wait(brain, claim, proc, timeout)
    finally:
        _tell_door(brain, f"close {claim.id}")
        door_sock.unlink(missing_ok=True)


def _wait(brain: Brain, claim: Claim, proc: subprocess.Popen, timeout: float) -> SatelliteOutcome:
    # A blocking wait (Popen.wait with a timeout polls, up to 50 ms late); a timer kills it at the limit.
    timer = threading.Timer(timeout, _kill_group, (proc,))
    timer.daemon = True
    timer.start()
    try:
        returncode = proc.wait()
    finally:
        timed_out = not timer.is_alive()
        timer.cancel()
    if timed_out:
        return SatelliteOutcome(124, "failed", f"satellite timed out after {timeout:g}s "
                                "(satellite_timeout in nika-brain.yml)")
    return collect(brain, claim.id, returncode)


def _not_found(program: str, cwd: Path) -> bool:
    if os.sep in program:
        return not os.access(cwd / program, os.X_OK)
    return shutil.which(program) is None


def _kill_group(proc: subprocess.Popen) -> None:
    import signal
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


_WALL_WHY: list[str | None] = []   # why bubblewrap cannot build a satellite's wall here, asked once a process


def _wall(brain: Brain, claim: Claim, cwd: Path, door_sock: Path) -> list[str] | SatelliteOutcome:
    """The bwrap argv prefix the satellite runs behind (claude/bwrap.satellite_wall), as the brain's
    `sandbox` says: `off` none (what then guards a satellite: README, "What each layer covers");
    `required` refuses to launch when bubblewrap cannot build it here; `auto` launches without it,
    journaled (SATELLITE_UNWALLED) and said on stderr."""
    mode = brain.config.sandbox
    if mode == "off":
        return []
    from nika_brain.claude import bwrap
    if not _WALL_WHY:
        _WALL_WHY.append(bwrap.runs())
    why = _WALL_WHY[0]
    if why is None:
        return bwrap.satellite_wall(brain, cwd, door_sock.parent)
    if mode == "required":
        return SatelliteOutcome(126, None, f"no satellite can run here: sandbox: required in nika-brain.yml and "
                                f"{why}; install bubblewrap, or set sandbox: auto (or off) to run satellites "
                                "without their wall", unavailable=True)
    import sys

    from nika_brain.engine import signals
    line = (f"warning: satellite of {claim.id} runs without its wall ({why}): it could write locks/, "
            "claims/ and .git directly; install bubblewrap, or set sandbox: required to refuse")
    print(line, file=sys.stderr)
    signals.emit(brain, "SATELLITE_UNWALLED", workflow=claim.workflow, step=claim.step, claim=claim.id,
                 reason=line)
    return []


def _files(brain: Brain, claim_id: str) -> tuple[Path, Path]:
    folder = brain.state_dir / "satellites"
    return folder / f"{claim_id}.out", folder / f"{claim_id}.err"


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22), None when it is
    gone or a zombie: with the pid it names one process, never a later one that reused the pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return None if not fields or fields[0] in ("Z", "X") else fields[19]


def _record(brain: Brain, claim_id: str, pid: int) -> None:
    # Says which live process runs the claim: written atomically (a kill leaves it whole), not fsynced,
    # since after a power loss no process of it is alive, whatever the file holds (`alive` reads a
    # damaged one as none).
    fsio.atomic_write(brain.state_dir / "satellites" / f"{claim_id}.json",
                      json.dumps({"pid": pid, "start": _start_time(pid)}), fsync=False)


def alive(brain: Brain, claim_id: str) -> int | None:
    """The pid of the claim's satellite when that very process still runs (pid and start time)."""
    try:
        rec = json.loads((brain.state_dir / "satellites" / f"{claim_id}.json").read_text())
        pid, start = int(rec["pid"]), rec.get("start")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    now = _start_time(pid)
    return pid if now is not None and now == start else None


def launched(brain: Brain, claim_id: str) -> bool:
    return (brain.state_dir / "satellites" / f"{claim_id}.json").exists()


def collect(brain: Brain, claim_id: str, returncode: int | None = None) -> SatelliteOutcome:
    """The result a satellite wrote (its last JSON line), read from its output file."""
    out_path, err_path = _files(brain, claim_id)
    stdout = out_path.read_text(errors="replace") if out_path.exists() else ""
    stderr = err_path.read_text(errors="replace") if err_path.exists() else ""
    _record_window(brain, stdout)
    status, summary = _parse_result(stdout)
    if status is None and returncode != 0:
        last = (stderr.strip().splitlines() or ["no result"])[-1]
        status, summary = "failed", (f"satellite exited {returncode}: {last}" if returncode is not None
                                     else f"satellite ended with no result: {last}")
    return SatelliteOutcome(-1 if returncode is None else returncode, status, summary)


def _record_window(brain: Brain, stdout: str) -> None:
    """Claude's result line reports the model's context window: keep it on the session."""
    from nika_brain.state import sessions
    for line in reversed(stdout.strip().splitlines()[-50:]):
        if '"modelUsage"' in line:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("type") == "result":
                try:
                    sessions.record_result(brain, obj)
                except (BrainError, OSError):
                    pass  # bookkeeping: never fail the step for it
                return


def _parse_result(stdout: str) -> tuple[str | None, str]:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if obj.get("status") in ("ok", "partial", "failed"):
            return obj["status"], str(obj.get("summary", ""))
        if obj.get("type") == "result":
            ok = not obj.get("is_error") and obj.get("subtype") == "success"
            return ("ok" if ok else "failed"), str(obj.get("result", ""))[:500]
    return None, ""
