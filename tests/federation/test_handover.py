"""Auto-handover end to end: the stand-in agent under real tmux runs the real hooks; its transcript
crosses 41 % of the window; a successor kernel is spawned, gets lineage and summary at SessionStart,
the old session is stopped and refuses prompts; a second crossing does not hand over twice; a spawn
that fails keeps the old session running. Plus the registry's hierarchy rules."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nika_brain.errors import BrainError
from nika_brain.federation.daemon import supervise
from nika_brain.federation.kernels import health, verbs
from nika_brain.federation.lineage import handover, registry
from nika_brain.state import kernels, sessions

from .fedkit import configure, fbrain, transcript_turn, until  # noqa: F401

GOAL = "IT operations: servers, backups, network and user accounts"


def hook(brain, event: str, payload: dict, env: dict | None = None) -> dict:
    import os

    full = {**os.environ, "NIKA_BRAIN_DIR": str(brain.root), **(env or {})}
    p = subprocess.run(
        [sys.executable, "-m", "nika_brain", "hook", event],
        input=json.dumps({"hook_event_name": event, **payload}),
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        check=False,
    )
    return json.loads(p.stdout) if p.stdout.strip() else {}


def session_of(brain, kernel_id):
    s = [x for x in sessions.list_sessions(brain) if x.kernel == kernel_id]
    return s[0] if s else None


def test_registry_hierarchy(brain):
    registry.add_entity(brain, "ops", "strategy", title="IT")
    registry.add_entity(brain, "ops-backups", "project", parent="ops")
    with pytest.raises(BrainError, match="parent of a job must be a project"):
        registry.add_entity(brain, "j", "job", parent="ops")
    with pytest.raises(BrainError, match="needs a parent"):
        registry.add_entity(brain, "t", "task")
    with pytest.raises(BrainError, match="has no parent"):
        registry.add_entity(brain, "s2", "strategy", parent="ops")
    with pytest.raises(BrainError, match="level must be one of"):
        registry.add_entity(brain, "x", "epic")
    registry.add_entity(brain, "nightly", "job", parent="ops-backups")
    registry.link_session(brain, "sess-1", kernel="alpha", entity="nightly")
    s = registry.show(brain, "sess-1")
    assert s["kind"] == "session" and s["root"] == "ops" and s["lineage"] == ["nightly", "ops-backups", "ops"]
    e = registry.show(brain, "ops-backups")
    assert e["children"] == ["nightly"] and e["sessions"] == ["sess-1"]
    with pytest.raises(BrainError, match="no session or entity"):
        registry.show(brain, "nothing")


def test_registry_cli(brain, cli):
    assert cli("registry", "add", "ops", "--level", "strategy").returncode == 0
    bad = cli("registry", "add", "t", "--level", "task", "--parent", "ops")
    assert bad.returncode == 1 and bad.stderr.startswith("nika-brain: ") and "Traceback" not in bad.stderr
    out = cli("registry", "show", "ops", "--json")
    assert json.loads(out.stdout)["level"] == "strategy"


def test_handover_end_to_end(fbrain, tmp_path):  # noqa: F811
    brain = configure(fbrain, tmp_path, handover={"window": 10000})  # 2,000 tokens a turn: 20 % each
    verbs.kernel_spawn(brain, GOAL, kernel_id="alpha", install_settings=True, env={"OPS_TOKEN": "t0k3n"})
    until(lambda: session_of(brain, "alpha"))
    old = session_of(brain, "alpha").id
    registry.add_entity(brain, "ops", "strategy", title="IT of BCUB3")
    registry.add_entity(brain, "ops-backups", "project", parent="ops")
    registry.link_session(brain, old, kernel="alpha", entity="ops-backups")

    assert "stand-in answer" in verbs.kernel_invoke(brain, "alpha", "check the backups", wait=True)["answer"]
    assert "stand-in answer" in verbs.kernel_invoke(brain, "alpha", "list the servers", wait=True)["answer"]
    assert not (brain.kernels_dir / "alpha-s2").exists()  # 40 %: not yet
    verbs.kernel_invoke(brain, "alpha", "restore the file server", wait=True)  # 60 %: handover

    # the kernel's hook (in its sandbox) asks; the federation daemon's supervisor does the handover
    daemon = supervise.service(brain)
    until(lambda: daemon.tick() or (sessions.raw(brain, old).get("handover") or {}).get("state") == "done")
    succ = kernels.load_kernel(brain, "alpha-s2")
    assert succ.goal == GOAL and succ.parent == "alpha"
    assert kernels.load_kernel(brain, "alpha").status == "handed-over"
    until(lambda: health.last_heartbeat(brain, "alpha-s2"))
    # the successor runs with the credentials the operator gave its predecessor (a real claude
    # without its key would sit on the login dialog)
    cred = brain.kernels_dir / "alpha-s2" / "credentials.env"
    assert "OPS_TOKEN=t0k3n" in cred.read_text() and cred.stat().st_mode & 0o777 == 0o600
    new = until(lambda: registry.get_handover(brain, "alpha-s2").get("successor_session"))
    linked = registry.show(brain, new)
    assert linked["root"] == "ops" and linked["predecessor"] == old and linked["kernel"] == "alpha-s2"
    assert registry.show(brain, old)["successor"] == "alpha-s2"
    from nika_brain.federation.vault import (
        summaries,  # the summary is in nika_federation_summaries
    )

    stored = summaries.get(brain, "alpha", f"handover:{old}")
    assert stored is not None and "Goal: " + GOAL in stored.text
    assert registry.get_handover(brain, "alpha-s2")["summary_id"] == f"alpha:handover:{old}"
    # what the successor's SessionStart gave it: the stand-in puts it in its first answer
    first = verbs.kernel_invoke(brain, "alpha-s2", "where were we", wait=True)["answer"]
    assert f"you succeed session {old}" in first and "parent entity: ops-backups" in first
    assert "restore the file server" in first and "Goal: " + GOAL in first
    assert "[env OPS_TOKEN=present]" in verbs.kernel_invoke(brain, "alpha-s2", "env=OPS_TOKEN", wait=True)["answer"]

    # the old session is stopped: its next prompt is refused with the reason
    ans = hook(brain, "UserPromptSubmit", {"session_id": old, "prompt": "more work", "cwd": str(brain.root)})
    assert ans["decision"] == "block" and ans["continue"] is False and "alpha-s2" in ans["reason"]
    # a second crossing: no second handover
    tpath = sessions.load(brain, old).transcript_path
    ans = hook(
        brain,
        "Stop",
        {"session_id": old, "transcript_path": tpath, "stop_hook_active": False, "cwd": str(brain.root)},
    )
    assert ans["continue"] is False
    assert not (brain.kernels_dir / "alpha-s3").exists()
    signals = [json.loads(x) for x in (brain.journal_dir / "signals.jsonl").read_text().splitlines()]
    assert [s["payload"]["to"] for s in signals if s["type"] == "HANDOVER"] == ["alpha-s2"]


def test_failed_spawn_keeps_the_old_session(brain, tmp_path):
    brain = configure(
        brain, tmp_path, handover={"window": 10000}, agent_command=[str(tmp_path / "no-such-agent")]
    )
    k = kernels.new_kernel("beta", GOAL, status="active", runtime="tmux")
    kernels.kernel_dir(brain, "beta").mkdir(parents=True)
    kernels.save_kernel(brain, k)
    transcript = tmp_path / "t.jsonl"
    transcript_turn(transcript, input_tokens=5000, model="stand-in", text="hi")
    sessions.bind(brain, "s-beta", kernel="beta", claim=None)
    payload = {
        "session_id": "s-beta",
        "transcript_path": str(transcript),
        "stop_hook_active": False,
        "cwd": str(brain.root),
    }
    asked = hook(brain, "Stop", payload, env={"NIKA_KERNEL_ID": "beta"})
    assert "handing over" in asked["systemMessage"] and "continue" not in asked
    assert handover.perform_requested(brain) == ["failed:s-beta"]   # the daemon's side, outside the kernel
    ans = hook(brain, "Stop", payload, env={"NIKA_KERNEL_ID": "beta"})
    assert "handover failed" in ans["systemMessage"] and "keeps running" in ans["systemMessage"]
    assert "continue" not in ans
    assert sessions.raw(brain, "s-beta")["handover"]["state"] == "failed"
    assert kernels.load_kernel(brain, "beta").status == "active"
    assert registry.get_handover(brain, "beta-s2") is None
    # and it is not retried on the next Stop (never twice), nor does the session get stopped
    assert "continue" not in hook(brain, "Stop", payload, env={"NIKA_KERNEL_ID": "beta"})
    ans = hook(
        brain,
        "UserPromptSubmit",
        {"session_id": "s-beta", "prompt": "go on", "cwd": str(brain.root)},
        env={"NIKA_KERNEL_ID": "beta"},
    )
    assert ans.get("decision") != "block"
