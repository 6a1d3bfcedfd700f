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

from .harness import claude_binary, stop_doors
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
    stop_doors(brain.root)


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


# ---- the federation daemon with the real CLI: handover at 41 %, one task stolen between two kernels --


def _daemon_brain(tmp_path: Path, **daemon) -> Brain:
    sock = tmp_path / "tmux.sock"
    fed = {"agent_command": [claude_binary()], "tmux_socket": str(sock), "supervisor": "manual",
           "deliver_timeout": 90, "kill_grace": 5, "daemon": daemon}
    return make_brain(tmp_path / "brain", "version: 1\nlock_poll: 0.01\nfederation: " + json.dumps(fed) + "\n")


def _fresh_config(tmp_path: Path, name: str) -> Path:
    cfg = tmp_path / name
    cfg.mkdir()
    (cfg / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True, "numStartups": 3}))
    return cfg


@pytest.fixture
def daemon_down():
    brains: list[Brain] = []
    yield brains.append
    import subprocess
    for b in brains:
        nb(b, "federation", "down", env=_cli_env())
        sock = json.loads((b.root / "nika-brain.yml").read_text().split("federation: ", 1)[1])["tmux_socket"]
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True)
        stop_doors(b.root)


def _last_user_text(body: dict) -> str:
    from .standin import _flatten
    msgs = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return _flatten(msgs[-1].get("content")) if msgs else ""


def test_handover_at_41_percent_with_the_real_cli_run_by_the_daemon(tmp_path, daemon_down):
    """The Stop hook of the real claude measures the context its transcript shows against the window
    Claude Code reports; past 41 % it asks, the daemon's supervisor spawns the successor (a real claude
    too, with the predecessor's credentials), which gets the lineage and summary at SessionStart; the
    predecessor's process is stopped once the successor is ready; prompts for it follow the successor."""
    from nika_brain.state import sessions
    brain = _daemon_brain(tmp_path, disable=["nika_brain.federation.daemon.embedder",
                                             "nika_brain.federation.daemon.stealing",
                                             "nika_brain.federation.daemon.schedule",
                                             "nika_brain.federation.daemon.retention"])
    daemon_down(brain)
    cfg = _fresh_config(tmp_path, "claude-config")
    tokens = {"next": 1200}

    def respond(body):
        said = _last_user_text(body)
        standin.usage = {**standin.usage, "input_tokens": tokens["next"]}
        for prompt in ("open the ledger", "close the quarter", "where were we", "one more entry"):
            if prompt in said:
                return [text(f"answered: {prompt}")]
        return [text("ok")]

    with MessagesStandin(respond=respond) as standin:
        spawn = nb(brain, "kernel", "spawn", "keep the ledger", "--id", "alpha",
                   "--env-file", _env_file(tmp_path, standin.url, cfg), env=_cli_env())
        assert spawn.returncode == 0, spawn.stderr
        up = nb(brain, "federation", "up", "--detach", env=_cli_env())
        assert up.returncode == 0, up.stderr
        first = nb(brain, "kernel", "invoke", "alpha", "open the ledger", "--wait", "--timeout", "120",
                   env=_cli_env())
        assert first.returncode == 0, first.stderr + _screen(brain, "alpha")
        (old,) = [s for s in sessions.list_sessions(brain) if s.kernel == "alpha"]
        # The window Claude Code reports (its status line runs after the turn, on its own time): a CI
        # run read nika-brain's 200k guess before it came, while the model runs with 1M.
        rec = until(lambda: (r := sessions.load(brain, old.id)).reported_window and r,
                    what="the window Claude Code reports")
        window = rec.reported_window
        assert window and rec.context_used and 100 * rec.context_used / window < 41, rec
        assert not (brain.kernels_dir / "alpha-s2").exists()

        tokens["next"] = int(window * 0.45)  # the next turn's context: 45 % of what Claude Code reports
        cross = nb(brain, "kernel", "invoke", "alpha", "close the quarter", "--wait", "--timeout", "120",
                   env=_cli_env())
        assert cross.returncode == 0, cross.stderr
        tokens["next"] = 1200
        # nobody runs anything: the daemon does the handover and starts the successor
        until(lambda: kernels.load_kernel(brain, "alpha").status == "handed-over", timeout=180)
        succ = kernels.load_kernel(brain, "alpha-s2")
        assert succ.parent == "alpha" and succ.goal == "keep the ledger"
        until(lambda: any(e["event"] == "session" for e in health.read_events(brain, "alpha-s2")[0]),
              timeout=180)
        old_pid = runtimes.load_state(brain, "alpha")["pid"]
        until(lambda: any(e["event"] == "stopped" for e in health.read_events(brain, "alpha")[0]), timeout=120)
        assert not runtimes.pid_alive(old_pid)
        ho = sessions.raw(brain, old.id)["handover"]
        assert ho["state"] == "done" and ho["pct"] >= 41 and ho["source"] == "claude-code", ho

        # the successor's real claude put its SessionStart context (lineage, summary) before the model
        nxt = nb(brain, "kernel", "invoke", "alpha-s2", "where were we", "--wait", "--timeout", "120",
                 env=_cli_env())
        assert nxt.returncode == 0 and nxt.stdout.strip() == "answered: where were we", nxt.stderr
        sent = standin.sent_text()
        assert f"nika-brain handover: you succeed session {old.id} of kernel alpha" in sent
        assert "Goal: keep the ledger" in sent and "close the quarter" in sent
        # a prompt for the handed-over kernel follows its successor
        late = nb(brain, "kernel", "invoke", "alpha", "one more entry", "--wait", "--timeout", "120",
                  env=_cli_env())
        assert late.returncode == 0, late.stderr
        assert late.stdout.strip() == "answered: one more entry"
        assert health.prompt_sha("one more entry") in {e.get("sha") for e in health.read_events(brain, "alpha-s2")[0]
                                                        if e["event"] == "taken"}


def test_two_real_kernels_and_one_stolen_task(tmp_path, daemon_down):
    """The seed's stealing, by the daemon, between two real claude kernels: IT operations is in a turn
    (its model is still answering); a client-report task lands in its queue; the client-missions kernel
    is idle and the only one the triage finds fit: it claims it, is granted it, and its real claude
    answers it. Nobody started `kernel work`."""
    import threading

    from nika_brain.federation.stealing import protocol as stealing
    from nika_brain.federation.triage import bench
    from tests.federation.triagekit import FR_ROUTES

    brain = _daemon_brain(tmp_path, stealing_poll=0.2,
                          disable=["nika_brain.federation.daemon.schedule",
                                   "nika_brain.federation.daemon.retention"])
    daemon_down(brain)
    release = threading.Event()

    def respond(body):
        said = _last_user_text(body)
        if "inventaire complet" in said:
            release.wait(300)  # IT operations stays in its turn until the test lets it go
            return [text("inventaire terminé")]
        if "compte rendu" in said:
            return [text("compte rendu envoyé au client")]
        return [text("ok")]

    _, routes = bench.read_routes(FR_ROUTES)
    ids = {"it": "kernel-alpha-bcub3-it", "client": "kernel-gamma-client-mission"}
    with MessagesStandin(respond=respond) as standin:
        try:
            for kid in ids.values():
                e = next(r for r in routes if r.id == kid)
                ex = tmp_path / f"{kid}.examples"
                ex.write_text("\n".join(e.examples) + "\n")
                cfg = _fresh_config(tmp_path, f"config-{kid}")
                envf = _env_file(tmp_path, standin.url, cfg).rename(tmp_path / f"{kid}.env")
                tags = [x for d in e.domains for x in ("--tags", d)]
                out = nb(brain, "kernel", "spawn", e.goal, "--id", kid, *tags, "--examples", ex,
                         "--env-file", envf, env=_cli_env())
                assert out.returncode == 0, out.stderr
            up = nb(brain, "federation", "up", "--detach", env=_cli_env())
            assert up.returncode == 0, up.stderr
            for kid in ids.values():  # both sessions started, both workers serving
                until(lambda k=kid: any(e["event"] == "session" for e in health.read_events(brain, k)[0]),
                      timeout=180)
            # IT operations enters a long turn
            busy = nb(brain, "kernel", "invoke", ids["it"], "fais l'inventaire complet du parc",
                      env=_cli_env())
            assert busy.returncode == 0, busy.stderr
            assert health.turn_in_progress(brain, ids["it"])
            task = "rédige le compte rendu de la réunion d'hier et envoie-le au client"
            enq = nb(brain, "kernel", "enqueue", ids["it"], task, "--id", "t-report", env=_cli_env())
            assert enq.returncode == 0, enq.stderr

            from nika_brain import bus
            b = bus.open_bus(brain)
            state = until(lambda: (lambda st: st if st["state"] == "done" else None)(
                stealing.task_state(b, "t-report")), timeout=240)
            assert health.prompt_sha(task) in {e.get("sha") for e in health.read_events(brain, ids["client"])[0]
                                               if e["event"] == "taken"}, (state, _screen(brain, ids["client"]))
            assert state["done"]["kernel"] == ids["client"], state
            # the bus holds a reference; the answer itself is in the owner's folder (issue 20)
            from nika_brain.federation.stealing.texts import Texts
            answer = stealing.result(b, Texts(brain), "t-report")
            assert answer["answer"] == "compte rendu envoyé au client", (state, answer)
            assert "compte rendu envoyé" not in json.dumps(state, ensure_ascii=False)
            assert [g["to"] for g in stealing.grants(b, "t-report")] == [ids["client"]]
            # IT operations' agent never got the task; its own turn is still in progress
            assert health.prompt_sha(task) not in {e.get("sha") for e in health.read_events(brain, ids["it"])[0]}
            assert health.turn_in_progress(brain, ids["it"])
        finally:
            release.set()
        until(lambda: not health.turn_in_progress(brain, ids["it"]), timeout=120)


def test_a_prompt_whose_enter_was_taken_into_a_paste_is_submitted_by_the_confirmation(tmp_path, realfed,
                                                                                     monkeypatch):
    """The flaky stolen task, made certain: on a loaded machine the text and the Enter that invoke
    types reach Claude Code in one read; it takes that for a paste, the Enter for a newline in it,
    and the prompt sits in its input box, never submitted (no UserPromptSubmit). Here the keys are
    typed exactly so (one write); the delivery counts the prompt as delivered only once its
    UserPromptSubmit hook fired, sees the text still in the input box, presses Enter again, and
    records what it did."""
    import subprocess

    from nika_brain.federation.kernels import verbs
    from nika_brain.federation.kernels.runtimes import tmux

    brain, cfg = realfed
    with MessagesStandin(respond=lambda body: [text("compte rendu envoyé au client")]) as standin:
        spawn = nb(brain, "kernel", "spawn", "keep the ledger", "--id", "alpha",
                   "--env-file", _env_file(tmp_path, standin.url, cfg), env=_cli_env())
        assert spawn.returncode == 0, spawn.stderr
        typed: list[str] = []

        def one_write(self, brain, kernel, state, prompt, launch):   # text and Enter in one read
            typed.append(prompt)
            subprocess.run([*self.base(brain), "send-keys", "-t", f"={state['tmux_session']}:", "-l",
                            prompt + "\r"], check=True)
            return {}

        monkeypatch.setattr(tmux.TmuxRuntime, "deliver", one_write)
        task = "rédige le compte rendu de la réunion d'hier et envoie-le au client"
        got = verbs.kernel_invoke(brain, "alpha", task, wait=True, timeout=120)
        assert got["answer"] == "compte rendu envoyé au client", _screen(brain, "alpha")
        (d,) = [e for e in health.read_events(brain, "alpha")[0] if e["event"] == "delivery"]
        assert d["taken"] is True and d["tries"][:1] == ["enter"] and "retyped" not in d["tries"], d
        assert typed == [task]   # pressed Enter again, never typed twice
        taken = [e for e in health.read_events(brain, "alpha")[0] if e["event"] == "taken"]
        assert [e["sha"] for e in taken] == [health.prompt_sha(task)]
