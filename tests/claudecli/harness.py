"""Run the real Claude Code CLI headless against the Messages API stand-in.

`claude -p <prompt> --output-format stream-json --verbose` with a throw-away HOME (no user settings,
no login, no memory from elsewhere), the stand-in's URL as ANTHROPIC_BASE_URL and a dummy API key.
The CLI's JSON lines are parsed into `Run.events`: the init line (tools, sandbox state, permission
mode), hook_started / hook_response lines, assistant and user messages (tool results), and the final
result.

The binary is required, never optional: `claude_binary()` fails the test with the reason and the
install command when it is missing (CI installs the pinned version, see .ci/run).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

PIN = "2.1.332"          # keep in step with .ci/run and nika_brain.claude.settings.TESTED_CLAUDE
INSTALL = f"npm install -g @anthropic-ai/claude-code@{PIN}"
TIMEOUT = 120.0


def claude_binary() -> str:
    """The `claude` executable of the pinned version, or a failed test saying why."""
    path = os.environ.get("NIKA_TEST_CLAUDE") or shutil.which("claude")
    if not path:
        pytest.fail(f"the real Claude Code CLI is required by this test and is not on PATH; "
                    f"install it with `{INSTALL}` (.ci/run does)", pytrace=False)
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL, env={**os.environ, "DISABLE_AUTOUPDATER": "1"},
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"`{path} --version` did not run ({exc}); reinstall with `{INSTALL}`", pytrace=False)
    version = (out.stdout.split() or ["?"])[0]
    if out.returncode != 0 or version != PIN:
        pytest.fail(f"`{path} --version` says {out.stdout.strip() or out.stderr.strip()!r}; these "
                    f"tests are written against {PIN}: `{INSTALL}`", pytrace=False)
    return path


@dataclass
class Run:
    returncode: int
    events: list[dict[str, Any]]
    stderr: str
    argv: list[str] = field(default_factory=list)

    @property
    def init(self) -> dict[str, Any]:
        return next((e for e in self.events if e.get("type") == "system"
                     and e.get("subtype") == "init"), {})

    @property
    def result(self) -> dict[str, Any]:
        return next((e for e in reversed(self.events) if e.get("type") == "result"), {})

    @property
    def session_id(self) -> str | None:
        return self.init.get("session_id") or self.result.get("session_id")

    def hook_responses(self, event: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == "system"
                and e.get("subtype") == "hook_response"
                and (event is None or e.get("hook_event") == event)]

    def hook_events(self) -> list[str]:
        """Names of the hook events that ran (hook_started lines), in order."""
        return [e.get("hook_event", "?") for e in self.events if e.get("type") == "system"
                and e.get("subtype") == "hook_started"]

    def tool_results(self) -> dict[str, dict[str, Any]]:
        """tool_use_id -> {is_error, text} as the CLI printed them."""
        out: dict[str, dict[str, Any]] = {}
        for e in self.events:
            if e.get("type") != "user":
                continue
            content = (e.get("message") or {}).get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    c = block.get("content")
                    txt = c if isinstance(c, str) else "\n".join(
                        x.get("text", "") for x in c or [] if isinstance(x, dict))
                    out[block["tool_use_id"]] = {"is_error": bool(block.get("is_error")), "text": txt}
        return out

    def explain(self) -> str:
        """For assertion messages: what the CLI said, briefly."""
        tail = [json.dumps(e)[:400] for e in self.events[-6:]]
        return f"argv={self.argv}\nrc={self.returncode}\nstderr={self.stderr[-1500:]}\n" + "\n".join(tail)


def claude_env(home: Path, base_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment: nothing of the caller's Claude, nika or git session leaks in."""
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL",
            "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_CONFIG_NOSYSTEM", "PYTHONPATH")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update({
        "HOME": str(home), "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "sk-standin-not-a-key",
        "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "NO_COLOR": "1",
    })
    env.update(extra or {})
    return env


def run_claude(prompt: str, *, cwd: Path, home: Path, base_url: str, args: list[str] | None = None,
               env: dict[str, str] | None = None, timeout: float = TIMEOUT,
               wrap: list[str] | None = None) -> Run:
    """`claude -p prompt --output-format stream-json --verbose [args]` in `cwd` (behind `wrap`, e.g. a
    kernel's sandbox argv); never raises on exit codes."""
    binary = claude_binary()
    home.mkdir(parents=True, exist_ok=True)
    argv = [*(wrap or []), binary, "-p", prompt, "--output-format", "stream-json", "--verbose", *(args or [])]
    try:
        proc = subprocess.run(argv, cwd=str(cwd), env=claude_env(home, base_url, env),
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(f"claude did not finish in {timeout:.0f}s; last output: {out[-2000:]}",
                    pytrace=False)
    events = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return Run(proc.returncode, events, proc.stderr, argv)


def stop_doors(brain_root: Path) -> None:
    """End the door processes a kernel spawn started for this brain (`python -m
    nika_brain.federation.doors <root>`): they exit by themselves once no kernel of the brain is live,
    and a test that kills its tmux server leaves the records live, so each would poll until the
    temporary folder is deleted. Only the processes named with this brain's own folder."""
    import signal
    want = ["-m", "nika_brain.federation.doors", str(brain_root)]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            if argv[1:] == want:
                os.kill(int(proc.name), signal.SIGTERM)
        except (OSError, IndexError):
            continue
