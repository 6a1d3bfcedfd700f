"""The pull-request review as the human gate, end to end through the real CLI.

GitHub is replaced by tests/kit/github_standin.py, A LOCAL HTTP STAND-IN for its REST API served over a
real loopback socket; the brain points at it with NIKA_GITHUB_API and authenticates with GITHUB_TOKEN.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from nika_brain.support.yamlsafe import load_file
from tests.kit.orch import claims_of, journal, nb, open_claim_id, orch_brain, run_file, satellite_config, worktree

REVIEW = """name: review
branch: theme/review
chain:
  - step: 1
    type: search
    scope: notes/
    story_angle: "result=partial"
    on_partial: gate:human → "step 1 partiel — merge anyway?"
  - step: 2
    type: search
    scope: docs/
    story_angle: "result=ok"
"""


def _config(standin) -> str:
    return f"gate_backend: github\ngithub_repo: {standin.repo}\n"


@pytest.fixture
def gh_env(github_standin, monkeypatch):
    monkeypatch.setenv("NIKA_GITHUB_API", github_standin.url)
    monkeypatch.setenv("GITHUB_TOKEN", github_standin.token)
    return github_standin


def _partial_step_one(brain, name="review", branch="theme/review"):
    nb(brain, "workflow-launch", name, check=0)
    claim = open_claim_id(brain, name)
    note = worktree(brain, branch) / "notes" / "half.md"
    note.parent.mkdir(parents=True)
    note.write_text("half done\n")
    nb(brain, "claim", "close", claim, "--status", "partial", "--summary", "half", check=0)
    run = run_file(brain, name)
    assert run["status"] == "gated"
    return load_file(brain.root / "gates" / f"{run['gate']}.yml")


def test_partial_result_opens_the_pr_and_its_approval_lets_the_workflow_go_on(tmp_path, git_env, gh_env):
    standin = gh_env
    brain = orch_brain(tmp_path / "b", {"review": REVIEW}, config=_config(standin))
    gate = _partial_step_one(brain)
    (pull,) = standin.pulls
    assert (pull["head"]["ref"], pull["base"]["ref"]) == ("theme/review", "main")
    assert pull["title"] == "[nika-brain] review: theme/review"
    assert gate["pr"] == pull["number"] and gate["status"] == "pending"
    (comment,) = standin.comments[pull["number"]]
    assert f"Human gate `{gate['id']}`" in comment["body"] and "step 1 partiel — merge anyway?" in comment["body"]
    assert all(h.get("authorization") == f"Bearer {standin.token}" for h in standin.request_headers)

    # No review yet, then only a comment: the gate stays pending and the workflow waits.
    assert nb(brain, "gate", "sync", check=0).stdout == ""
    standin.add_review(pull["number"], "carol", "COMMENTED", "looking")
    assert nb(brain, "gate", "sync", check=0).stdout == ""
    assert "GATE_PENDING" in nb(brain, "workflow-launch", "review", check=5).stdout

    standin.add_review(pull["number"], "alice", "APPROVED")
    synced = nb(brain, "gate", "sync", check=0)
    assert synced.stdout.strip() == f"gate {gate['id']}: approved by alice via github-pr"
    decided = load_file(brain.root / "gates" / f"{gate['id']}.yml")
    assert (decided["status"], decided["decided_by"], decided["via"]) == ("approved", "alice", "github-pr")

    nb(brain, "workflow-launch", "review", check=0)
    nb(brain, "claim", "close", open_claim_id(brain, "review"), "--status", "ok", check=0)
    assert "DONE" in nb(brain, "workflow-launch", "review", check=0).stdout
    run = run_file(brain, "review")
    assert run["status"] == "done" and run["report"]["gates"] == [gate["id"]]
    assert run["report"]["partial"] == ["1"] and run["report"]["delivered"] == ["2"]
    assert (brain.root / "notes" / "half.md").read_text() == "half done\n"
    assert standin.count("POST", f"/repos/{standin.repo}/pulls") == 1, "one pull request, opened once"


def test_changes_requested_rejects_the_gate_and_aborts_the_chain(tmp_path, git_env, gh_env):
    standin = gh_env
    brain = orch_brain(tmp_path / "b", {"review": REVIEW}, config=_config(standin))
    gate = _partial_step_one(brain)
    standin.add_review(gate["pr"], "alice", "APPROVED")
    standin.add_review(gate["pr"], "bob", "CHANGES_REQUESTED", "not like this")
    synced = nb(brain, "gate", "sync", check=0)
    assert synced.stdout.strip() == f"gate {gate['id']}: rejected by bob via github-pr"
    out = nb(brain, "workflow-launch", "review", check=6)
    assert "ABORT" in out.stdout and "rejected by bob" in out.stdout
    run = run_file(brain, "review")
    assert run["status"] == "aborted" and len(claims_of(brain, "review")) == 1, "step 2 never ran"
    assert any(r["type"] == "ABORT" and "rejected by bob" in r["reason"] for r in journal(brain, "review"))


def test_an_existing_pull_request_is_found_not_opened_again(tmp_path, git_env, gh_env):
    standin = gh_env
    brain = orch_brain(tmp_path / "b", {"review": REVIEW}, config=_config(standin))
    by_hand = standin.add_pull("theme/review", "main", "opened by a person")
    gate = _partial_step_one(brain)
    assert gate["pr"] == by_hand
    assert standin.count("POST", f"/repos/{standin.repo}/pulls") == 0
    assert len(standin.comments[by_hand]) == 1


def test_sync_of_one_pull_request_leaves_the_others_pending(tmp_path, git_env, gh_env):
    standin = gh_env
    other = REVIEW.replace("name: review", "name: other").replace("theme/review", "theme/other") \
        .replace("scope: notes/", "scope: other-notes/").replace("scope: docs/", "scope: other-docs/")
    brain = orch_brain(tmp_path / "b", {"review": REVIEW, "other": other}, config=_config(standin))
    first = _partial_step_one(brain)
    nb(brain, "workflow-launch", "other", check=0)
    nb(brain, "claim", "close", open_claim_id(brain, "other"), "--status", "partial", check=0)
    second = load_file(brain.root / "gates" / f"{run_file(brain, 'other')['gate']}.yml")
    assert first["pr"] != second["pr"], "one pull request per theme branch"
    standin.add_review(first["pr"], "alice", "APPROVED")
    standin.add_review(second["pr"], "alice", "APPROVED")
    only = nb(brain, "gate", "sync", "--pr", second["pr"], check=0)
    assert only.stdout.strip() == f"gate {second['id']}: approved by alice via github-pr"
    assert load_file(brain.root / "gates" / f"{first['id']}.yml")["status"] == "pending"
    rest = nb(brain, "gate", "sync", check=0)
    assert rest.stdout.strip() == f"gate {first['id']}: approved by alice via github-pr"
    assert nb(brain, "gate", "sync", check=0).stdout == "", "decided gates are not decided again"


def test_without_a_token_the_gate_waits_and_is_announced_on_the_next_launch(tmp_path, git_env, gh_env,
                                                                           monkeypatch):
    standin = gh_env
    brain = orch_brain(tmp_path / "b", {"review": REVIEW}, config=_config(standin))
    nb(brain, "workflow-launch", "review", check=0)
    claim = open_claim_id(brain, "review")
    monkeypatch.delenv("GITHUB_TOKEN")
    out = nb(brain, "claim", "close", claim, "--status", "partial", check=1)
    assert out.stderr.strip() == "nika-brain: token: no GitHub token: set GITHUB_TOKEN (or NIKA_GITHUB_TOKEN)"
    assert standin.pulls == []
    monkeypatch.setenv("GITHUB_TOKEN", standin.token)
    assert "GATE_PENDING" in nb(brain, "workflow-launch", "review", check=5).stdout
    run = run_file(brain, "review")
    gate = load_file(brain.root / "gates" / f"{run['gate']}.yml")
    assert gate["claim"] == claim and gate["pr"] == standin.pulls[0]["number"]
    assert len(claims_of(brain, "review")) == 1, "the closed step is routed, not run again"
    assert [r["type"] for r in journal(brain, "review")].count("STEP_DONE") == 1, "routed once"


def test_swarm_with_wait_syncs_the_review_by_itself(tmp_path, git_env, gh_env):
    standin = gh_env
    brain = orch_brain(tmp_path / "b", {"review": REVIEW}, config=_config(standin) + satellite_config())
    proc = subprocess.Popen([sys.executable, "-m", "nika_brain", "workflow-launch", "review", "--mode", "swarm",
                             "--wait", "--poll", "0.05", "--timeout", "240"], cwd=brain.root,
                            env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not standin.comments:  # synchronisation only: wait until the gate is announced
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the gate was never announced"
            time.sleep(0.02)
        (pr,) = standin.comments
        standin.add_review(pr, "alice", "APPROVED")
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (out, err)
    assert "GATE_PENDING" in out and "DONE" in out
    gate = load_file(next((brain.root / "gates").glob("*.yml")))
    assert (gate["status"], gate["via"], gate["decided_by"]) == ("approved", "github-pr", "alice")
    c1, c2 = claims_of(brain, "review")
    assert (brain.root / "notes" / f"{c1['id']}.txt").is_file() and (brain.root / "docs" / f"{c2['id']}.txt").is_file()
