"""The headless runtime, the same way: each invocation is `<agent> -p ... --session-id/--resume`,
the stand-in agent runs the real hooks; the session carries over between invocations."""
from __future__ import annotations

import json

from nika_brain.federation.kernels import health, runtimes, verbs
from nika_brain.state import kernels

from .fedkit import configure, fbrain, until  # noqa: F401


def test_headless_five_verbs(fbrain, cli):  # noqa: F811
    brain = fbrain
    sp = cli("kernel", "spawn", "Public tenders watch", "--id", "epsilon", "--runtime", "headless",
             "--memory", "256M")
    assert sp.returncode == 0, sp.stderr
    first = cli("kernel", "invoke", "epsilon", "find new tenders", "--wait")
    assert first.returncode == 0, first.stderr
    assert "stand-in answer to: find new tenders" in first.stdout
    assert cli("kernel", "readjust", "epsilon", "only tenders in France").returncode == 0
    second = cli("kernel", "invoke", "epsilon", "and now", "--wait")
    assert "only tenders in France" in second.stdout
    state = runtimes.load_state(brain, "epsilon")
    assert state["runs"] == 2
    until(lambda: not runtimes.pid_alive(state["pid"]))  # its answer is written after the Stop hook
    result = json.loads(open(state["last_output"]).read())
    assert result["type"] == "result" and result["session_id"] == state["session_id"]
    o = json.loads(cli("kernel", "observe", "epsilon", "--json").stdout)
    assert len(o["sessions"]) == 1 and o["sessions"][0]["id"] == state["session_id"], \
        "the second invocation resumed the first session"
    taken = [e for e in o["events"] if e["event"] == "taken"]
    assert len(taken) == 2
    # scrubbed environment: its own credentials in, the caller's secrets out
    (kernels.kernel_dir(brain, "epsilon") / "credentials.env").write_text("KERNEL_TOKEN=k-secret\n")
    env = cli("kernel", "invoke", "epsilon", "env=KERNEL_TOKEN env=CALLER_SECRET env=NIKA_KERNEL_ID",
              "--wait", env={"CALLER_SECRET": "do-not-leak"})
    assert "[env KERNEL_TOKEN=present] [env CALLER_SECRET=absent] [env NIKA_KERNEL_ID=present]" in env.stdout
    no_wait = cli("kernel", "invoke", "epsilon", "sleep=1 a slow one")
    assert no_wait.returncode == 0 and "taken by epsilon" in no_wait.stdout
    after = cli("kernel", "invoke", "epsilon", "the next one", "--wait")  # waits for the slow one
    assert "stand-in answer to: the next one" in after.stdout
    # one invocation at a time on the session: the slow one answered before the next was taken
    taken = [e for e in health.read_events(brain, "epsilon")[0] if e["event"] in ("taken", "answered")]
    assert [e["event"] for e in taken][-4:] == ["taken", "answered", "taken", "answered"]
    until(lambda: not runtimes.pid_alive(runtimes.load_state(brain, "epsilon")["pid"]))
    kl = cli("kernel", "kill", "epsilon", "--reason", "done")
    assert kl.returncode == 0, kl.stderr
    assert kernels.load_kernel(brain, "epsilon").status == "killed"


def test_an_invocation_that_ends_before_taking_the_prompt_says_so_at_once(fbrain, tmp_path, cli):  # noqa: F811
    # an agent that fails before its UserPromptSubmit (no credentials, a broken install): the caller
    # learns it from the invocation's end and its last words, not after deliver_timeout (120 s here)
    agent = tmp_path / "broken-agent"
    agent.write_text("#!/bin/sh\necho 'Invalid API key: run /login' >&2\nexit 1\n")
    agent.chmod(0o755)
    configure(fbrain, tmp_path, agent_command=[str(agent)])
    assert cli("kernel", "spawn", "Public tenders watch", "--id", "zeta", "--runtime", "headless").returncode == 0
    r = cli("kernel", "invoke", "zeta", "find new tenders")
    assert r.returncode == runtimes.EXIT_NOT_TAKEN and "Traceback" not in r.stderr
    assert "invocation 1 ended (exit status 1) before taking it" in r.stderr, r.stderr
    assert "Invalid API key: run /login" in r.stderr and "stays queued" in r.stderr
    assert kernels.load_kernel(fbrain, "zeta").status == "active"   # a failed run is not a death


def test_a_prompt_taken_just_before_the_agent_died_is_seen_taken(fbrain):  # noqa: F811
    # the invocation records its UserPromptSubmit and is killed (its memory limit) between the
    # waiter's read of the events and its look at the process: the waiter reads once more
    k = verbs.kernel_spawn(fbrain, "Ingest sensor data", kernel_id="eta", runtime="headless")
    sha = health.prompt_sha("alloc=600 everything")

    class DiesAfterItsLastWords:
        def alive(self, brain, kernel, state):
            health.record_event(brain, kernel.id, "taken", session="s", sha=sha)
            return runtimes.Liveness(False, None, -9, "invocation killed by a signal")

    taken = lambda e: e.get("event") == "taken" and e.get("sha") == sha  # noqa: E731
    ev, _ = verbs._wait_event(fbrain, k.id, health.events_size(fbrain, k.id), taken, 60.0,
                              DiesAfterItsLastWords(), k, {})
    assert ev is not None and ev["sha"] == sha
