"""spawn -> invoke -> readjust -> observe -> kill, end to end: the real CLI, real tmux (a private
server), the stand-in agent running the real hooks; delivery confirmed by the agent's own hook."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess

from nika_brain import bus
from nika_brain.federation.kernels import health, runtimes, supervisor, watchdog
from nika_brain.state import kernels, locks

from .fedkit import fbrain, until  # noqa: F401


def test_five_verbs_end_to_end(fbrain, cli, tmp_path):  # noqa: F811
    brain = fbrain
    examples = tmp_path / "ex.txt"
    examples.write_text("reboot the VPN\ncheck the backups\n")
    sp = cli("kernel", "spawn", "Operate the IT of BCUB3", "--id", "alpha", "--tags", "it", "--tags",
             "ops", "--examples", examples, "--scope", "it/", "--memory", "512M", "--cpu", "50%",
             "--region", "fr", "--doctrine", "validate every change")
    assert sp.returncode == 0, sp.stderr
    shown = cli("kernel", "show", "alpha").stdout
    assert "doctrine: validate every change" in shown and "example: reboot the VPN" in shown
    k = kernels.load_kernel(brain, "alpha")
    assert (k.status, k.tags, k.examples, k.scope, k.region) == \
        ("active", ("it", "ops"), ("reboot the VPN", "check the backups"), ("it/",), "fr")
    assert k.enforcement in ("cgroup-v2", "cgroup-v1", "prlimit")
    folder = kernels.kernel_dir(brain, "alpha")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "credentials.env").stat().st_mode) == 0o600
    assert (folder / "memory").is_dir() and (folder / ".claude" / "settings.json").is_file()
    goals = [m for _, m in bus.open_bus(brain).read(bus.GOALS) if m.get("kernel") == "alpha"]
    assert [m["event"] for m in goals] == ["spawned"] and \
        goals[0]["examples"][0] == kernels.text_ref("reboot the VPN")  # a hash, not the text

    # the agent's SessionStart hook published the first heartbeat
    hb = until(lambda: health.last_heartbeat(brain, "alpha"))
    assert hb["kernel"] == "alpha" and hb["source"] == "hook:SessionStart"

    # scrubbed environment: a secret of the caller does not reach the kernel; its own credential does
    (folder / "credentials.env").write_text("KERNEL_TOKEN=own-secret\n")
    pid = runtimes.load_state(brain, "alpha")["pid"]
    env = (open(f"/proc/{pid}/environ", "rb").read()).split(b"\0")
    assert b"NIKA_KERNEL_ID=alpha" in env and not any(e.startswith(b"GIT_AUTHOR") for e in env)

    got = cli("kernel", "invoke", "alpha", "list the servers", "--wait", "--timeout", "180")
    assert got.returncode == 0, got.stderr
    assert "stand-in answer to: list the servers" in got.stdout

    rd = cli("kernel", "readjust", "alpha", "prioritise the backup audit")
    assert rd.returncode == 0, rd.stderr
    directives = bus.open_bus(brain).read(bus.DIRECTIVES)
    sig = directives[-1][1]   # a signal: id, reference, hash; the text stays in the kernel's folder
    assert "text" not in sig and sig["sha"] == kernels.text_ref("prioritise the backup audit")
    assert sig["ref"] == f"kernels/alpha/directives.jsonl#{sig['id']}"
    got = cli("kernel", "invoke", "alpha", "what now", "--wait")
    assert "prioritise the backup audit" in got.stdout, "the directive reached the session"

    ob = cli("kernel", "observe", "alpha", "--json")
    assert ob.returncode == 0, ob.stderr
    o = json.loads(ob.stdout)
    assert o["metrics"]["queue_depth"] == 0 and o["metrics"]["context_pct"] is not None
    assert o["metrics"]["ttfa_s"] is not None and o["directives"][0]["text"] == "prioritise the backup audit"
    assert any(e["event"] == "taken" for e in o["events"]) and len(o["sessions"]) == 1
    human = cli("kernel", "observe", "alpha")
    assert "last heartbeat" in human.stdout and "directive" in human.stdout

    st = json.loads(cli("federation", "status", "--json").stdout)
    assert st["kernels"][0]["state"] == "alive" and st["bus"].startswith("embedded")
    listed = cli("kernel", "list")
    row = r"^alpha\tactive\ttmux@[\w.-]+\tmemory=512M cpu=50%.*\tsandbox="   # machine and sandbox shown
    assert re.search(row, listed.stdout, re.M), listed.stdout

    locks.acquire(brain, "it/servers.md", "alpha", pid=None)
    kl = cli("kernel", "kill", "alpha", "--reason", "test over")
    assert kl.returncode == 0, kl.stderr
    k = kernels.load_kernel(brain, "alpha")
    assert k.status == "killed" and "test over" in k.status_reason
    assert locks.list_locks(brain) == [] and folder.is_dir()
    assert not runtimes.pid_alive(pid)
    tmux = subprocess.run(["tmux", "-S", str(tmp_path / "tmux.sock"), "has-session", "-t", "=nika-os-alpha"],
                          capture_output=True)
    assert tmux.returncode != 0
    assert [m["event"] for _, m in bus.open_bus(brain).read(bus.GOALS) if m.get("kernel") == "alpha"] == \
        ["spawned", "removed"]  # (the triage, when present, also announces its rebuilt registry)
    assert any(m.get("kind") == "killed" for _, m in bus.open_bus(brain).read(bus.HEALTH))
    assert "| `alpha` | killed (test over" in (brain.root / "BRAIN-INDEX.md").read_text()

    # a prompt for a killed kernel is refused (never queued forever): exit 8 names `kernel start`
    late = cli("kernel", "invoke", "alpha", "are you there")
    assert late.returncode == 8 and "kernel start alpha" in late.stderr and late.stderr.count("\n") == 1
    assert json.loads(cli("kernel", "observe", "alpha", "--json").stdout)["queue"] == []
    # started again: same id, history kept, and it takes prompts
    again = cli("kernel", "start", "alpha")
    assert again.returncode == 0, again.stderr
    assert kernels.load_kernel(brain, "alpha").status == "active"
    took = cli("kernel", "invoke", "alpha", "back again", "--wait", "--timeout", "60")
    assert took.returncode == 0 and "stand-in answer to: back again" in took.stdout, took.stderr


def test_queued_prompt_is_delivered_when_the_kernel_runs_again(fbrain):  # noqa: F811
    from nika_brain.federation.kernels import verbs
    brain = fbrain
    verbs.kernel_spawn(brain, "Client missions", kernel_id="gamma", restart="on-failure",
                       max_restarts=1, install_settings=True)
    until(lambda: health.last_heartbeat(brain, "gamma"))
    os.kill(runtimes.load_state(brain, "gamma")["pid"], 9)
    until(lambda: not runtimes.get("tmux").alive(brain, kernels.load_kernel(brain, "gamma"),
                                                 runtimes.load_state(brain, "gamma")).alive)
    try:
        verbs.kernel_invoke(brain, "gamma", "draft the report")
        raise AssertionError("a dead process took a prompt")
    except Exception as exc:
        assert "stays queued" in str(exc)
    assert supervisor.check_once(brain) == {"gamma": "restarted"}
    assert kernels.load_kernel(brain, "gamma").restarts == 1
    until(lambda: supervisor.check_once(brain) and not verbs.queue.pending(brain, "gamma"), timeout=120)
    events, _ = health.read_events(brain, "gamma")
    assert any(e["event"] == "taken" and e["sha"] == health.prompt_sha("draft the report") for e in events)
    # bounded: the second death is final
    os.kill(runtimes.load_state(brain, "gamma")["pid"], 9)
    until(lambda: supervisor.check_once(brain).get("gamma") == "dead")
    assert kernels.load_kernel(brain, "gamma").status == "dead"


def test_spawn_starts_the_supervisor_which_sees_a_death_and_exits(fbrain, tmp_path):  # noqa: F811
    from nika_brain.federation.kernels import verbs

    from .fedkit import configure
    brain = configure(fbrain, tmp_path, supervisor="auto")
    verbs.kernel_spawn(brain, "Watch the markets", kernel_id="eps")
    pid = until(lambda: watchdog.running_pid(brain))
    until(lambda: health.last_heartbeat(brain, "eps"))
    os.kill(runtimes.load_state(brain, "eps")["pid"], 9)
    until(lambda: kernels.load_kernel(brain, "eps").status == "dead", timeout=120)
    # the status is written before the supervisor stops what is left and publishes: wait for it
    until(lambda: any(m.get("kind") == "dead" for _, m in bus.open_bus(brain).read(bus.HEALTH, count=10_000)))
    until(lambda: not runtimes.pid_alive(pid), timeout=120)  # nothing left to watch: it ends
    assert watchdog.running_pid(brain) is None


def test_a_prompt_typed_into_a_busy_agent_is_confirmed_later_never_typed_twice(fbrain, tmp_path):  # noqa: F811
    from nika_brain.federation.kernels import verbs
    from nika_brain.state import prompts as queue

    from .fedkit import configure
    brain = configure(fbrain, tmp_path, deliver_timeout=1)
    verbs.kernel_spawn(brain, "Long jobs", kernel_id="busy")
    until(lambda: health.last_heartbeat(brain, "busy"))
    verbs.kernel_invoke(brain, "busy", "sleep=10 a long task")  # busy far past the 1 s below
    try:
        verbs.kernel_invoke(brain, "busy", "the second one")
        raise AssertionError("a busy agent acknowledged at once")
    except verbs.BrainError as exc:
        assert exc.exit_code == 8 and "stays queued" in str(exc)
    assert [x.get("sent") is not None for x in queue.pending(brain, "busy")] == [True]

    def settled():
        supervisor.check_once(brain)  # confirms, and must not type it again meanwhile
        return not queue.pending(brain, "busy")
    until(settled, timeout=120)
    sha = health.prompt_sha("the second one")
    taken = [e for e in health.read_events(brain, "busy")[0] if e.get("sha") == sha]
    assert len(taken) == 1, "taken exactly once"


def test_invoke_wait_returns_at_once_when_the_kernel_dies_or_a_hook_consumes_the_prompt(fbrain, cli):  # noqa: F811
    from nika_brain.federation.kernels import verbs
    brain = fbrain
    verbs.kernel_spawn(brain, "Client missions", kernel_id="delta", install_settings=True)
    # a hook erases the prompt (`/kernel new ...` writes a proposal): no turn follows, no answer
    eaten = cli("kernel", "invoke", "delta", "/kernel new veille sur les appels d'offres", "--wait",
                "--timeout", "600")
    assert eaten.returncode == 8 and "consumed by a hook" in eaten.stderr, eaten.stderr
    assert eaten.stderr.count("\n") == 1
    # the agent crashes mid-turn: --wait says so at once (not after its 600 s timeout)
    crash = cli("kernel", "invoke", "delta", "crash now", "--wait", "--timeout", "600")
    assert crash.returncode == 8 and "before answering" in crash.stderr, crash.stderr
    # --ttl without --temporary is refused, nothing written
    bad = cli("kernel", "spawn", "burst", "--id", "eps", "--ttl", "2h")
    assert bad.returncode == 1 and "--temporary" in bad.stderr and not (brain.kernels_dir / "eps").exists()


def test_credentials_before_the_first_start_and_kernel_env(fbrain, cli, tmp_path):  # noqa: F811
    brain = fbrain
    bad = tmp_path / "bad.env"
    bad.write_text("GOOD=1\nthis is not an assignment\n")
    out = cli("kernel", "spawn", "Client missions", "--id", "zeta", "--env-file", str(bad))
    assert out.returncode == 1 and "bad.env:2: expected KEY=value" in out.stderr and out.stderr.count("\n") == 1
    assert not (brain.kernels_dir / "zeta").exists()
    good = tmp_path / "zeta.env"
    good.write_text("# the operator's\nZETA_TOKEN='s3cr3t'\nexport OTHER=2\n")
    out = cli("kernel", "spawn", "Client missions", "--id", "zeta", "--env-file", str(good))
    assert out.returncode == 0 and "credentials: OTHER, ZETA_TOKEN" in out.stdout, out.stderr
    cred = brain.kernels_dir / "zeta" / "credentials.env"
    assert stat.S_IMODE(cred.stat().st_mode) == 0o600 and "ZETA_TOKEN=s3cr3t" in cred.read_text()
    took = cli("kernel", "invoke", "zeta", "env=ZETA_TOKEN env=LATER", "--wait", "--timeout", "60")
    assert "[env ZETA_TOKEN=present]" in took.stdout and "[env LATER=absent]" in took.stdout, took.stderr
    assert "s3cr3t" not in took.stdout
    setv = cli("kernel", "env", "set", "zeta", "LATER=now")
    assert setv.returncode == 0 and "kernel restart zeta" in setv.stdout
    assert cli("kernel", "env", "unset", "zeta", "ZETA_TOKEN").returncode == 0
    assert cli("kernel", "restart", "zeta").returncode == 0
    took = cli("kernel", "invoke", "zeta", "env=ZETA_TOKEN env=LATER", "--wait", "--timeout", "60")
    assert "[env ZETA_TOKEN=absent]" in took.stdout and "[env LATER=present]" in took.stdout, took.stderr
    assert stat.S_IMODE(cred.stat().st_mode) == 0o600
    for args in (["set", "zeta", "NOEQUALS"], ["set", "zeta", "1BAD=x"], ["unset", "zeta", "MISSING"],
                 ["set", "nosuch", "A=b"]):
        r = cli("kernel", "env", *args)
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, (args, r.stderr)


def test_a_kernel_being_killed_is_not_found_dead_and_restarted_meanwhile(fbrain):  # noqa: F811
    """The supervisor and an operator's kill/restart race on one kernel: the supervisor saw its process
    gone (the operator is stopping it), and must not mark it dead nor start it again once the
    operator's verb, holding the kernel's lifecycle mutex, has decided."""
    import threading

    from nika_brain.federation.kernels import verbs
    brain = fbrain
    verbs.kernel_spawn(brain, "Client missions", kernel_id="zeta", restart="on-failure",
                       max_restarts=3, install_settings=True)
    until(lambda: health.last_heartbeat(brain, "zeta"))
    seen = kernels.load_kernel(brain, "zeta")
    state = runtimes.load_state(brain, "zeta")
    done: dict = {}
    with verbs.lifecycle(brain, "zeta"):  # the operator's verb, in the middle of its stop
        os.kill(state["pid"], 9)
        until(lambda: not runtimes.get("tmux").alive(brain, seen, state).alive)
        t = threading.Thread(target=lambda: done.update(what=supervisor.check_once(brain)))
        t.start()
        t.join(0.5)
        assert t.is_alive(), "the supervisor waits for the operator's verb"
        kernels.set_status(brain, "zeta", "killed", reason="mission over (by test)")
    t.join(60)
    assert not t.is_alive() and "zeta" not in done["what"], done
    k = kernels.load_kernel(brain, "zeta")
    assert (k.status, k.restarts) == ("killed", 0)
    events, _ = health.read_events(brain, "zeta")
    assert not any(e["event"] == "run-exit" for e in events), "no death recorded for a kill"


def test_invoke_wait_into_a_kernel_in_a_turn_returns_this_prompts_own_answer(fbrain, tmp_path,  # noqa: F811
                                                                             monkeypatch):
    """Typed into a running turn, Claude Code takes a prompt at once (its UserPromptSubmit fires) and
    answers it inside that turn (the stand-in's --steer does the same): the Stop ending that turn is
    not the new prompt's answer. `invoke --wait` (and `ask --wait`) type it only once the running
    turn has ended, and the supervisor's redelivery leaves it to its invoker meanwhile."""
    import base64
    import sys
    import threading

    from nika_brain.errors import BrainError
    from nika_brain.federation.kernels import verbs
    from nika_brain.state import prompts as queue

    from .fedkit import STANDIN, configure
    brain = configure(fbrain, tmp_path, agent_command=[sys.executable, str(STANDIN), "--steer"])
    verbs.kernel_spawn(brain, "Long jobs", kernel_id="steer")
    gate = tmp_path / "release-the-long-one"
    hold = base64.b64encode(f"while [ ! -e {gate} ]; do sleep 0.05; done".encode()).decode()
    verbs.kernel_invoke(brain, "steer", f"the long one sh={hold}")   # a turn that runs until the gate
    assert health.turn_in_progress(brain, "steer")
    got: dict = {}

    def invoke_b() -> None:
        try:
            got["out"] = verbs.kernel_invoke(brain, "steer", "the short one", wait=True, timeout=300)
        except BrainError as exc:
            got["error"] = str(exc)

    def typed_or_waiting(prompt: str) -> bool:
        supervisor.check_once(brain)   # the redelivery runs meanwhile: it must not type B into the turn
        if any(e.get("sha") == health.prompt_sha(prompt) for e in health.read_events(brain, "steer")[0]):
            return True   # typed into the running turn and taken there
        return any(x["prompt"] == prompt and queue.held(x) for x in queue.pending(brain, "steer"))

    t = threading.Thread(target=invoke_b)
    t.start()
    until(lambda: typed_or_waiting("the short one"), timeout=120)
    supervisor.check_once(brain)
    gate.touch()
    t.join(timeout=300)
    assert not t.is_alive() and "error" not in got, got
    assert got["out"]["answer"].splitlines()[0] == "stand-in answer to: the short one", got["out"]["answer"]
    answers = [e["text"].splitlines()[0].split(" [sh rc=")[0] for e in health.read_events(brain, "steer")[0]
               if e.get("event") == "answered"]
    assert answers == [f"stand-in answer to: the long one sh={hold}", "stand-in answer to: the short one"]
    assert not queue.pending(brain, "steer")

    # ask --wait: the same, its route's prompt typed once the running turn has ended
    from nika_brain.federation.asking import route
    monkeypatch.setattr(route, "decide", lambda _b, _p, _sent=None: {"decision": "kernel", "kernels": ["steer"]})
    gate2 = tmp_path / "release-the-second-long-one"
    hold2 = base64.b64encode(f"while [ ! -e {gate2} ]; do sleep 0.05; done".encode()).decode()
    verbs.kernel_invoke(brain, "steer", f"another long one sh={hold2}")
    t = threading.Thread(target=lambda: got.update(ask=route.ask(brain, "the asked one", wait=True, timeout=300)))
    t.start()
    until(lambda: typed_or_waiting("the asked one"), timeout=120)
    gate2.touch()
    t.join(timeout=300)
    (r,) = got["ask"]["routes"]
    assert r["status"] == "answered" and r["answer"].splitlines()[0] == "stand-in answer to: the asked one", r
