"""The real Claude Code CLI as a kernel under the tmux runtime (interactive, as its users run it),
against the Messages API STAND-IN (tests/claudecli/standin.py: a local HTTP server, not Claude).

The kernel's Claude config is fresh: a `.claude.json` that has done Claude Code's first-run onboarding
(as any installed `claude` has) and has never seen the kernel's folder, so without nika-brain the
agent would sit on its workspace-trust dialog and then on its API-key dialog. Credentials come only
from `kernel spawn --env-file`; the test process's own environment carries none.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from nika_brain.brain import Brain
from nika_brain.federation.kernels import health, runtimes
from nika_brain.state import kernels
from tests.kit.brain import make_brain
from tests.kit.orch import nb
from tests.kit.wait import until

from .harness import claude_binary
from .standin import MessagesStandin, text

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-standin-not-a-real-key-0123456789"


@pytest.fixture(autouse=True)
def _binary():
    claude_binary()


@pytest.fixture
def realfed(tmp_path):
    sock = tmp_path / "tmux.sock"
    fed = {"agent_command": [claude_binary()], "tmux_socket": str(sock), "supervisor": "manual",
           "deliver_timeout": 90, "kill_grace": 5, "triage": {"default": "alpha"}}
    brain = make_brain(tmp_path / "brain", "version: 1\nlock_poll: 0.01\nfederation: " + json.dumps(fed) + "\n")
    cfg = tmp_path / "claude-config"
    cfg.mkdir()
    (cfg / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True, "numStartups": 3,
                                                  "operatorNote": "kept-as-is"}, indent=2))
    yield brain, cfg
    import subprocess
    subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)


def _env_file(tmp_path: Path, url: str, cfg: Path) -> Path:
    f = tmp_path / "alpha.env"
    f.write_text(f"ANTHROPIC_BASE_URL={url}\nANTHROPIC_API_KEY={KEY}\nCLAUDE_CONFIG_DIR={cfg}\n"
                 "DISABLE_TELEMETRY=1\nDISABLE_AUTOUPDATER=1\nDISABLE_ERROR_REPORTING=1\n"
                 "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\n")
    return f


def _cli_env() -> dict[str, str]:
    # nothing of a Claude login or key in the operator's own environment: only the env file counts
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    env["PYTHONPATH"] = str(REPO)
    return env


def _screen(brain: Brain, kid: str) -> str:
    rt = runtimes.get("tmux")
    return rt.screen(brain, kernels.load_kernel(brain, kid), runtimes.load_state(brain, kid))


def test_spawn_with_env_file_in_a_fresh_config_takes_the_first_prompt_restart_and_kill(tmp_path, realfed):
    brain, cfg = realfed
    answers = iter(["first answer from the stand-in", "the answer ask brought back",
                    "answered after the directive", "second answer after restart"])
    with MessagesStandin(respond=lambda body: [text(next(answers, "done"))]) as standin:
        spawn = nb(brain, "kernel", "spawn", "keep the ledger", "--id", "alpha",
                   "--env-file", _env_file(tmp_path, standin.url, cfg), env=_cli_env())
        assert spawn.returncode == 0, spawn.stderr
        assert "trusted the kernel's folder in Claude Code's config" in spawn.stdout
        # the credentials file: 0600, the operator's lines, before the first start
        cred = brain.root / "kernels" / "alpha" / "credentials.env"
        assert oct(cred.stat().st_mode & 0o777) == "0o600" and f"ANTHROPIC_API_KEY={KEY}" in cred.read_text()
        # Claude Code's config: the one key added, the rest of the file untouched
        conf = json.loads((cfg / ".claude.json").read_text())
        folder = str((brain.root / "kernels" / "alpha").resolve())
        assert conf["projects"][folder]["hasTrustDialogAccepted"] is True
        assert conf["operatorNote"] == "kept-as-is" and conf["numStartups"] >= 3
        assert KEY[-20:] in conf["customApiKeyResponses"]["approved"]

        # the first invoke is taken (it waited for the SessionStart hook, never typed into a dialog)
        first = nb(brain, "kernel", "invoke", "alpha", "hello ledger", "--wait", "--timeout", "120",
                   env=_cli_env())
        assert first.returncode == 0, first.stderr + _screen(brain, "alpha")
        assert first.stdout.strip() == "first answer from the stand-in"
        events = [e["event"] for e in health.read_events(brain, "alpha")[0]]
        assert events.index("session") < events.index("taken") < events.index("answered")
        assert "Quick safety check" not in _screen(brain, "alpha")

        # the way in: ask triages (one kernel here, also the generalist), delivers, returns the answer
        ask = nb(brain, "ask", "tidy the ledger for me", "--wait", "--json", "--timeout", "120",
                 env=_cli_env())
        assert ask.returncode == 0, ask.stderr
        (route,) = json.loads(ask.stdout)["routes"]
        assert route["kernel"] == "alpha" and route["status"] == "answered"
        assert route["answer"] == "the answer ask brought back"

        # readjust mid-session: the directive reaches the model with the next prompt, no restart
        assert nb(brain, "kernel", "readjust", "alpha", "réponds en français désormais",
                  env=_cli_env()).returncode == 0
        assert "réponds en français désormais" not in standin.sent_text()
        nxt = nb(brain, "kernel", "invoke", "alpha", "next one", "--wait", "--timeout", "120", env=_cli_env())
        assert nxt.stdout.strip() == "answered after the directive", nxt.stderr
        assert "réponds en français désormais" in standin.sent_text()

        # restart: same id, history kept, a new session that takes the next prompt
        old_pid = runtimes.load_state(brain, "alpha")["pid"]
        again = nb(brain, "kernel", "restart", "alpha", env=_cli_env())
        assert again.returncode == 0, again.stderr
        assert runtimes.load_state(brain, "alpha")["pid"] != old_pid
        second = nb(brain, "kernel", "invoke", "alpha", "after restart", "--wait", "--timeout", "120",
                    env=_cli_env())
        assert second.returncode == 0, second.stderr + _screen(brain, "alpha")
        assert second.stdout.strip() == "second answer after restart"
        assert [e["event"] for e in health.read_events(brain, "alpha")[0]].count("answered") == 4

        # kill: the agent is asked to exit (Ctrl-C twice) and leaves; no signal was needed
        pid = runtimes.load_state(brain, "alpha")["pid"]
        kill = nb(brain, "kernel", "kill", "alpha", "--reason", "test over", env=_cli_env())
        assert kill.returncode == 0, kill.stderr
        assert "(asked)" in kill.stdout, kill.stdout
        stopped = [e for e in health.read_events(brain, "alpha")[0] if e["event"] == "killed"]
        assert stopped[-1]["how"] == "asked"
        assert not runtimes.pid_alive(pid)


def test_a_kernel_stuck_on_a_dialog_is_reported_with_the_attach_command(tmp_path, realfed):
    """The defect of issue 19: invoke typed the prompt into the trust dialog and lost it. Here the
    agent is the real `claude` behind a wrapper nika-brain does not recognise as Claude Code, so
    nothing is recorded in its config and the trust dialog shows: invoke must not type, must say
    which dialog with the command to attach, and must keep the prompt queued."""
    brain, cfg = realfed
    wrapper = tmp_path / "agent-wrapper"
    wrapper.write_text(f"#!/bin/sh\nexec {claude_binary()} \"$@\"\n")
    wrapper.chmod(0o755)
    fed = json.loads((brain.root / "nika-brain.yml").read_text().split("federation: ", 1)[1])
    fed.update(agent_command=[str(wrapper)], deliver_timeout=60)
    (brain.root / "nika-brain.yml").write_text("version: 1\nlock_poll: 0.01\nfederation: " + json.dumps(fed) + "\n")
    brain = Brain.at(brain.root)
    with MessagesStandin([[text("never asked")]]) as standin:
        spawn = nb(brain, "kernel", "spawn", "keep the ledger", "--id", "beta",
                   "--env-file", _env_file(tmp_path, standin.url, cfg), env=_cli_env())
        assert spawn.returncode == 0, spawn.stderr
        assert "trusted" not in spawn.stdout
        until(lambda: "Quick safety check" in _screen(brain, "beta"), timeout=120)
        out = nb(brain, "kernel", "invoke", "beta", "do not lose me", env=_cli_env())
        assert out.returncode == 8, out.stderr
        assert "workspace trust dialog" in out.stderr and "attach -t nika-os-beta" in out.stderr
        assert "stays queued" in out.stderr and out.stderr.count("\n") == 1
        assert "do not lose me" not in _screen(brain, "beta")  # nothing typed into the dialog
        from nika_brain.state import prompts as queue
        assert [x["prompt"] for x in queue.unsent(brain, "beta")] == ["do not lose me"]
    from nika_brain.federation.kernels.runtimes import tmux
    assert tmux.dialog("  Detected a custom API key in your environment") == "API key"
    assert tmux.dialog("Select login method:") == "login"
    assert tmux.dialog("❯ ") is None


def test_a_prompt_queued_before_readiness_is_delivered_when_the_session_starts(tmp_path, realfed):
    brain, cfg = realfed
    with MessagesStandin(respond=lambda body: [text("queued one answered")]) as standin:
        spawn = nb(brain, "kernel", "spawn", "keep the ledger", "--id", "gamma",
                   "--env-file", _env_file(tmp_path, standin.url, cfg), env=_cli_env())
        assert spawn.returncode == 0, spawn.stderr
        from nika_brain.state import prompts as queue
        queue.enqueue(brain, "gamma", "the queued prompt", by="test")
        sup = [sys.executable, "-m", "nika_brain", "federation", "supervise", "--once"]
        import subprocess

        def delivered() -> bool:
            subprocess.run(sup, cwd=brain.root, env=_cli_env(), capture_output=True, timeout=200)
            return not queue.pending(brain, "gamma")
        until(delivered, timeout=180)
        until(lambda: any(e["event"] == "answered" for e in health.read_events(brain, "gamma")[0]),
              timeout=120)
        taken = [e for e in health.read_events(brain, "gamma")[0] if e["event"] in ("session", "taken")]
        assert [e["event"] for e in taken][:2] == ["session", "taken"]
