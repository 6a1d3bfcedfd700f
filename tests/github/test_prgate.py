"""The pull-request review gate against a LOCAL HTTP STAND-IN for GitHub's REST API
(tests/kit/github_standin.py), over a real loopback socket. GitHub itself is not contacted."""
from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
import yaml

from nika_brain.errors import BrainError
from nika_brain.github.client import GitHubReviewGate, decide
from tests.kit.github_standin import GitHubStandin

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gate(github_standin) -> GitHubReviewGate:
    return GitHubReviewGate(github_standin.url, github_standin.repo, github_standin.token,
                            timeout=60)  # generous: the stand-in shares 2 busy cores with the suite


@pytest.fixture
def pr(gate) -> int:
    return gate.find_or_open_pr("theme-a", "main", "Theme A", "gate: merge theme A?")


# --- find or open -------------------------------------------------------------------------------

def test_find_or_open_is_idempotent(gate, github_standin):
    first = gate.find_or_open_pr("theme-a", "main", "Theme A", "body")
    second = gate.find_or_open_pr("theme-a", "main", "Theme A", "body")
    assert first == second
    assert len(github_standin.pulls) == 1
    assert github_standin.count("POST", "/repos/nika/brain/pulls") == 1
    pull = github_standin.pulls[0]
    assert (pull["head"]["ref"], pull["base"]["ref"], pull["title"], pull["body"]) == \
        ("theme-a", "main", "Theme A", "body")


def test_finds_a_pull_request_someone_else_opened(gate, github_standin):
    existing = github_standin.add_pull("theme-a", "main", "opened by hand")
    assert gate.find_or_open_pr("theme-a", "main", "t", "b") == existing
    assert github_standin.count("POST", "/repos/nika/brain/pulls") == 0


def test_closed_or_other_base_pull_requests_are_not_reused(gate, github_standin):
    closed = github_standin.add_pull("theme-a", "main", state="closed")
    other_base = github_standin.add_pull("theme-a", "release")
    number = gate.find_or_open_pr("theme-a", "main", "t", "b")
    assert number not in (closed, other_base)
    assert len(github_standin.pulls) == 3


def test_lost_creation_race_returns_the_winner(gate, github_standin):
    winner = github_standin.add_pull("theme-a", "main", "opened concurrently")
    # Our first look-up answers "none" as if the other process had not created it yet.
    github_standin.reply_raw_next(200, b"[]")
    assert gate.find_or_open_pr("theme-a", "main", "t", "b") == winner
    assert len(github_standin.pulls) == 1


def test_create_validation_failure_is_a_brain_error(gate, github_standin):
    github_standin.reply_raw_next(200, b"[]")
    github_standin.reply_raw_next(422, b'{"message": "Validation Failed"}')
    github_standin.reply_raw_next(200, b"[]")
    with pytest.raises(BrainError, match=r"POST /repos/nika/brain/pulls: HTTP 422 Validation"):
        gate.find_or_open_pr("theme-a", "main", "t", "b")


def test_headers_sent(gate, github_standin):
    gate.find_or_open_pr("theme-a", "main", "t", "b")
    headers = github_standin.request_headers[0]
    assert headers["authorization"] == "Bearer standin-token"
    assert headers["accept"] == "application/vnd.github+json"
    assert headers["x-github-api-version"] == "2022-11-28"
    assert headers["user-agent"].startswith("nika-brain/")
    assert github_standin.requests[0] == (
        "GET", "/repos/nika/brain/pulls?head=nika%3Atheme-a&base=main&state=open")


# --- decision -----------------------------------------------------------------------------------

def test_no_reviews_is_pending(gate, pr):
    assert gate.decision(pr) == (None, None)


def test_one_approval(gate, github_standin, pr):
    github_standin.add_review(pr, "alice", "APPROVED")
    assert gate.decision(pr) == ("approved", "alice")


def test_reviews_older_than_the_gate_do_not_decide_it(gate, github_standin, pr):
    # One theme pull request carries every gate of a workflow: an approval given for an earlier
    # gate must not approve a gate opened after it.
    github_standin.add_review(pr, "alice", "APPROVED", submitted_at="2026-03-18T10:00:00Z")
    assert gate.decision(pr) == ("approved", "alice")
    assert gate.decision(pr, since="2026-03-18T10:00:01Z") == (None, None)
    github_standin.add_review(pr, "bob", "CHANGES_REQUESTED", submitted_at="2026-03-18T10:05:00Z")
    assert gate.decision(pr, since="2026-03-18T10:00:01Z") == ("rejected", "bob")


def test_approval_then_changes_requested_by_another_rejects(gate, github_standin, pr):
    github_standin.add_review(pr, "alice", "APPROVED")
    github_standin.add_review(pr, "bob", "CHANGES_REQUESTED")
    assert gate.decision(pr) == ("rejected", "bob")


def test_latest_review_of_the_same_reviewer_wins(gate, github_standin, pr):
    github_standin.add_review(pr, "alice", "CHANGES_REQUESTED")
    github_standin.add_review(pr, "alice", "APPROVED")
    assert gate.decision(pr) == ("approved", "alice")


def test_comments_are_ignored(gate, github_standin, pr):
    github_standin.add_review(pr, "carol", "COMMENTED")
    github_standin.add_review(pr, "dan", "PENDING")
    assert gate.decision(pr) == (None, None)
    github_standin.add_review(pr, "alice", "APPROVED")
    github_standin.add_review(pr, "alice", "COMMENTED")  # a later remark does not withdraw it
    assert gate.decision(pr) == ("approved", "alice")


def test_dismissal_withdraws_the_reviewer_standing(gate, github_standin, pr):
    github_standin.add_review(pr, "alice", "APPROVED")
    github_standin.add_review(pr, "alice", "CHANGES_REQUESTED")
    github_standin.reviews[pr][-1]["state"] = "DISMISSED"  # what GitHub shows after a dismissal
    # alice's older approval must not come back to life.
    assert gate.decision(pr) == (None, None)


def test_decision_reads_every_page(gate, github_standin, pr):
    for i in range(150):
        github_standin.add_review(pr, f"user{i % 7}", "COMMENTED")
    github_standin.add_review(pr, "alice", "APPROVED")       # review 151, on page 2
    assert gate.decision(pr) == ("approved", "alice")
    for _ in range(60):
        github_standin.add_review(pr, "bob", "COMMENTED")
    github_standin.add_review(pr, "alice", "CHANGES_REQUESTED")  # review 212, on page 3
    assert gate.decision(pr) == ("rejected", "alice")
    pages = [p for m, p in github_standin.requests if "/reviews" in p]
    assert pages[-3:] == [f"/repos/nika/brain/pulls/{pr}/reviews?per_page=100&page={n}"
                          for n in (1, 2, 3)]


def test_exactly_one_full_page(gate, github_standin, pr):
    for _ in range(99):
        github_standin.add_review(pr, "bob", "COMMENTED")
    github_standin.add_review(pr, "bob", "APPROVED")
    assert gate.decision(pr) == ("approved", "bob")
    assert github_standin.count("GET", f"/repos/nika/brain/pulls/{pr}/reviews") == 2


def test_decide_picks_the_latest_rejecter():
    reviews = [{"user": {"login": "a"}, "state": "CHANGES_REQUESTED"},
               {"user": {"login": "b"}, "state": "CHANGES_REQUESTED"},
               {"user": {"login": "a"}, "state": "CHANGES_REQUESTED"},
               {"user": None, "state": "APPROVED"}]  # a deleted ("ghost") account is skipped
    assert decide(reviews) == ("rejected", "a")


# --- comment ------------------------------------------------------------------------------------

def test_comment_is_posted(gate, github_standin, pr):
    comment_id = gate.comment(pr, "GATE_PENDING: merge theme A?")
    assert github_standin.comments[pr] == [
        {"id": comment_id, "body": "GATE_PENDING: merge theme A?", "user": {"login": "nika-bot"}}]


# --- failures -----------------------------------------------------------------------------------

def test_bad_token_is_a_401_brain_error(github_standin):
    bad = GitHubReviewGate(github_standin.url, github_standin.repo, "wrong-token")
    with pytest.raises(BrainError) as err:
        bad.find_or_open_pr("theme-a", "main", "t", "b")
    message = str(err.value)
    assert "GET /repos/nika/brain/pulls" in message and "HTTP 401 Bad credentials" in message
    assert "wrong-token" not in message
    assert github_standin.pulls == []


def test_unknown_pull_request_is_a_404_brain_error(gate):
    with pytest.raises(BrainError, match=r"GET /repos/nika/brain/pulls/77/reviews: HTTP 404"):
        gate.decision(77)


def test_other_repository_is_a_404_and_standin_stops_cleanly():
    with GitHubStandin(repo="acme/tools", token="x") as standin:
        wrong_repo = GitHubReviewGate(standin.url, "acme/other", "x")
        with pytest.raises(BrainError, match=r"GET /repos/acme/other/pulls: HTTP 404 Not Found"):
            wrong_repo.find_or_open_pr("theme-a", "main", "t", "b")
        url = standin.url
    with pytest.raises(BrainError, match="cannot reach"):
        GitHubReviewGate(url, "acme/tools", "x", timeout=2).decision(1)


def test_bad_json_is_a_brain_error(gate, github_standin, pr):
    github_standin.reply_raw_next(200, b"<html>proxy error</html>")
    with pytest.raises(BrainError, match="not JSON"):
        gate.decision(pr)


def test_dead_port_is_a_one_line_brain_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The socket is closed: nothing listens there any more, so the connection is refused.
    dead = GitHubReviewGate(f"http://127.0.0.1:{port}", "nika/brain", "t", timeout=2)
    with pytest.raises(BrainError) as err:
        dead.decision(1)
    message = str(err.value)
    assert "GET /repos/nika/brain/pulls/1/reviews" in message and "cannot reach" in message
    assert "\n" not in message and "Traceback" not in message
    # Raised `from None`: an uncaught error would not print the urllib chain either.
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_silent_server_times_out():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts connections at the kernel level but never answers
    try:
        slow = GitHubReviewGate(f"http://127.0.0.1:{listener.getsockname()[1]}", "nika/brain",
                                "t", timeout=0.3)
        with pytest.raises(BrainError, match="timed out after 0.3s"):
            slow.comment(1, "hello")
    finally:
        listener.close()


@pytest.mark.parametrize("token", ["", "   ", "two words", "line\nbreak"])
def test_missing_or_malformed_token_is_refused(token):
    with pytest.raises(BrainError, match="token"):
        GitHubReviewGate("https://api.github.com", "nika/brain", token)


@pytest.mark.parametrize("api, repo", [("file:///etc/passwd", "nika/brain"),
                                       ("https://api.github.com", "no-slash"),
                                       ("https://api.github.com", "a/b/c")])
def test_bad_configuration_is_refused(api, repo):
    with pytest.raises(BrainError):
        GitHubReviewGate(api, repo, "t")


def test_from_env(github_standin):
    env = {"NIKA_GITHUB_API": github_standin.url, "GITHUB_REPOSITORY": github_standin.repo,
           "GITHUB_TOKEN": "ignored", "NIKA_GITHUB_TOKEN": github_standin.token}
    configured = GitHubReviewGate.from_env(env=env)
    assert (configured.api_url, configured.repo) == (github_standin.url, "nika/brain")
    assert configured.find_or_open_pr("theme-a", "main", "t", "b") == 1
    with pytest.raises(BrainError, match="no GitHub token"):
        GitHubReviewGate.from_env("nika/brain", env={})
    with pytest.raises(BrainError, match="no GitHub repository"):
        GitHubReviewGate.from_env(env={"GITHUB_TOKEN": "t"})
    assert GitHubReviewGate.from_env("o/r", env={"GITHUB_TOKEN": "t"}).api_url == \
        "https://api.github.com"


def test_standin_serves_concurrent_clients(github_standin):
    # The gate may be polled from several kernels at once; the stand-in must not serialise them
    # into errors, and the gate must not share state between calls.
    gates = [GitHubReviewGate(github_standin.url, github_standin.repo, github_standin.token)
             for _ in range(4)]
    number = gates[0].find_or_open_pr("theme-a", "main", "t", "b")
    github_standin.add_review(number, "alice", "APPROVED")
    results = []
    threads = [threading.Thread(target=lambda g=g: results.append(g.decision(number)))
               for g in gates]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == [("approved", "alice")] * 4


# --- the GitHub Actions workflow ----------------------------------------------------------------

def test_workflow_runs_gate_sync_on_reviews_with_no_code_from_the_pull_request():
    flow = yaml.safe_load((ROOT / ".github/workflows/nika-gate.yml").read_text())
    on = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert on == {"pull_request_review": {"types": ["submitted", "dismissed"]}}
    steps = flow["jobs"]["sync"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    # nika-brain comes from the base branch; the head is data, checked out elsewhere.
    tool, brain = (s for s in steps if s.get("uses", "").startswith("actions/checkout"))
    assert tool["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"
    assert tool["with"]["path"] == "tool" and tool["with"]["persist-credentials"] is False
    assert brain["with"]["ref"] == "${{ github.event.pull_request.head.ref }}"
    assert "pip install ./tool" in runs and "pip install ." not in runs.replace("./tool", "")
    sync = next(s for s in steps if "gate sync" in s.get("run", ""))
    assert sync["run"] == 'nika-brain gate sync --backend github --pr "$PR_NUMBER"'
    assert "python -m" not in runs
    assert sync["working-directory"] == "brain"
    # The review is read from GitHub itself, not from an address or repository the branch names.
    assert sync["env"]["NIKA_GITHUB_API"] == "https://api.github.com"
    assert sync["env"]["NIKA_GITHUB_REPO"] == "${{ github.repository }}"
    assert sync["env"]["GITHUB_TOKEN"] == "${{ secrets.GITHUB_TOKEN }}"
    assert "git add -- gates" in runs and "git push" in runs


def test_the_environment_names_the_repository_over_the_brains_config(tmp_path, git_env, monkeypatch):
    from nika_brain.brain import Brain
    from nika_brain.engine.gatebackends import PullRequestGate
    from tests.kit.brain import make_brain
    brain = make_brain(tmp_path / "b", "version: 1\ngithub_repo: attacker/elsewhere\n"
                                       "github_api: http://127.0.0.1:9\n")
    monkeypatch.setenv("NIKA_GITHUB_REPO", "nika/brain")
    monkeypatch.setenv("NIKA_GITHUB_API", "https://api.github.com")
    monkeypatch.setenv("GITHUB_TOKEN", "t")
    gate = PullRequestGate(Brain.at(brain.root))
    assert (gate.client.repo, gate.client.api_url) == ("nika/brain", "https://api.github.com")
