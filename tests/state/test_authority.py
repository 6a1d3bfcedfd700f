"""The operator's authority: signatures an agent cannot make, checked on every decision read.

An agent session is simulated here the way Claude Code's sandbox presents the machine to it: the
public key is readable, the private key folder is not there. tests/claudecli/ shows the real
sandbox doing it.
"""
from __future__ import annotations

import shutil

import pytest

from nika_brain.errors import BrainError
from nika_brain.state import authority, gates, validate
from nika_brain.support.yamlsafe import load_file
from tests.kit.orch import nb, orch_brain, run_file

GATED = """name: gated
branch: theme/gated
chain:
  - step: 1
    type: code
    scope: src/
    gate: human
    story_angle: "after a human go"
"""


@pytest.fixture
def brain(tmp_path, git_env, monkeypatch):
    return orch_brain(tmp_path / "b", {"gated": GATED})


def as_agent(brain) -> None:
    """What the sandbox's denyRead leaves an agent: the public key, no private folder."""
    authority.ensure_key(brain)  # `claude install` creates it before any agent runs
    shutil.rmtree(authority.private_dir())
    assert authority.key_paths(brain.root)[1].is_file()


def test_signatures_bind_the_fields_the_kind_and_the_brain(brain, tmp_path):
    sig = authority.sign(brain, "gate", {"id": "g1", "status": "approved"})
    assert authority.verify(brain, "gate", {"id": "g1", "status": "approved"}, sig)
    assert not authority.verify(brain, "gate", {"id": "g1", "status": "rejected"}, sig)
    assert not authority.verify(brain, "breaker-reset", {"id": "g1", "status": "approved"}, sig)
    other = orch_brain(tmp_path / "other", {})
    assert not authority.verify(other, "gate", {"id": "g1", "status": "approved"}, sig)
    assert not authority.verify(brain, "gate", {"id": "g1", "status": "approved"}, "zz")
    key, _ = authority.key_paths(brain.root)
    assert key.stat().st_mode & 0o777 == 0o600 and key.parent.stat().st_mode & 0o777 == 0o700
    assert not str(key).startswith(str(brain.root))  # outside the brain


def test_a_gate_edited_by_hand_is_invalid_not_approved(brain):
    out = nb(brain, "workflow-launch", "gated", check=5)
    gid = run_file(brain, "gated")["gate"]
    path = brain.root / "gates" / f"{gid}.yml"
    text = path.read_text().replace("status: pending", "status: approved")
    path.write_text(text.replace("decided_at: null", "decided_at: '2026-01-01T00:00:00Z'"))
    # The orchestrator reads the decision and does not believe it.
    again = nb(brain, "workflow-launch", "gated", check=5)
    assert "without the operator's signature" in again.stdout + again.stderr, out.stdout
    assert run_file(brain, "gated")["status"] == "gated"
    report = validate.validate(brain.root)
    assert any("not an authentic decision" in str(p) and gid in str(p) for p in report.problems)
    assert nb(brain, "validate").returncode != 0
    # The operator's own decision is signed and moves the run on.
    path.write_text(text.replace("status: approved", "status: pending"))
    nb(brain, "gate", "approve", gid, check=0)
    assert load_file(path)["signature"]
    nb(brain, "workflow-launch", "gated", check=0)
    assert run_file(brain, "gated")["status"] in ("running", "done")


def test_without_the_private_key_nothing_is_decided(brain):
    nb(brain, "workflow-launch", "gated", check=5)
    gid = run_file(brain, "gated")["gate"]
    nb(brain, "lock", "acquire", "src/other/", "--owner", "other-claim", "--no-pid", check=0)
    as_agent(brain)
    for args in (("gate", "approve", gid), ("gate", "reject", gid),
                 ("preflight", "reset", "src/"),
                 ("lock", "release", "src/other/", "--owner", "other-claim")):
        out = nb(brain, *args, env={"NIKA_CLAIM": "my-claim"})
        assert out.returncode == 6, (args, out.stdout, out.stderr)
        assert "operator's authority" in out.stderr and "Traceback" not in out.stderr
    assert gates.load_gate(brain, gid).pending
    assert list((brain.root / "locks").glob("*.yml"))
    with pytest.raises(BrainError, match="operator's authority"):
        authority.sign(brain, "spawn", {"kernel": "k9"})


def test_outside_a_door_even_the_lock_owners_release_needs_the_key(brain):
    """`$NIKA_CLAIM` names the claim, it proves nothing: without the claim's door (the session
    nika-brain starts for it) the release is the operator's, who holds the key."""
    nb(brain, "lock", "acquire", "src/mine/", "--owner", "my-claim", "--no-pid", check=0)
    nb(brain, "lock", "acquire", "src/op/", "--owner", "my-claim", "--no-pid", check=0)
    nb(brain, "lock", "release", "src/op/", env={"NIKA_CLAIM": "my-claim"}, check=0)   # the operator
    as_agent(brain)
    out = nb(brain, "lock", "release", "src/mine/", env={"NIKA_CLAIM": "my-claim"})
    assert out.returncode == 6 and "`nika-brain claude start my-claim`" in out.stderr, out.stderr
    assert len(list((brain.root / "locks").glob("*.yml"))) == 1
