"""One contract for every gate backend in the registry: a gate is announced without changing what it
says, stays pending until its human decides through the backend's own channel, and `gates.sync`
then records that decision, who made it and via what. The GitHub backend runs against
tests/kit/github_standin.py, A LOCAL HTTP STAND-IN for GitHub's REST API on a real loopback socket."""
from __future__ import annotations

import pytest

from nika_brain.brain import Brain
from nika_brain.engine import gatebackends
from nika_brain.errors import BrainError
from nika_brain.state import gates
from tests.kit.orch import orch_brain

WF = """name: g
branch: theme/g
chain:
  - step: 1
    type: search
    scope: notes/
"""


class CliHuman:
    via = "cli"

    def __init__(self, brain, standin):
        self.brain = brain

    def decide(self, gate, decision):
        gates.decide(self.brain, gate.id, decision, by="carol", env={})


class ReviewerOnGitHub:
    via = "github-pr"

    def __init__(self, brain, standin):
        self.standin = standin

    def decide(self, gate, decision):
        state = {"approve": "APPROVED", "reject": "CHANGES_REQUESTED"}[decision]
        self.standin.add_review(gate.pr, "carol", state)


@pytest.fixture(params=sorted(gatebackends.BACKENDS))
def setup(request, tmp_path, git_env, github_standin, monkeypatch):
    name = request.param
    config = f"gate_backend: {name}\n"
    if name == "github":
        config += f"github_repo: {github_standin.repo}\n"
        monkeypatch.setenv("NIKA_GITHUB_API", github_standin.url)
        monkeypatch.setenv("GITHUB_TOKEN", github_standin.token)
    brain = orch_brain(tmp_path / "b", {"g": WF}, config=config)
    human = {"cli": CliHuman, "github": ReviewerOnGitHub}[name](brain, github_standin)
    return brain, gatebackends.backend(brain), human


@pytest.mark.parametrize("decision,status", [("approve", "approved"), ("reject", "rejected")])
def test_backend_contract(setup, decision, status):
    brain, backend, human = setup
    opened = gates.open_gate(brain, "go-1", "ship it?", workflow="g", step="1")
    announced = backend.announce(brain, opened)
    assert (announced.id, announced.message, announced.status) == ("go-1", "ship it?", "pending")
    gates.save(brain, announced)
    assert backend.poll(brain, announced) == (None, None), "nobody decided yet"
    assert gatebackends.sync(brain) == []
    assert gates.load_gate(brain, "go-1").pending

    human.decide(announced, decision)
    gatebackends.sync(brain)
    g = gates.load_gate(brain, "go-1")
    assert (g.status, g.decided_by, g.via) == (status, "carol", human.via)
    assert gatebackends.sync(brain) == [], "a decided gate is not decided again"


def test_unknown_backend_is_one_clear_error(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"g": WF})
    with pytest.raises(BrainError) as info:
        gatebackends.backend(Brain.at(brain.root), "carrier-pigeon")
    assert "unknown gate backend 'carrier-pigeon'" in str(info.value)
