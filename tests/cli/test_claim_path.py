"""`claim close|show` take the claim's file path as the shell completes it (issue 17, item 5)."""
from __future__ import annotations

import pytest

from nika_brain.errors import BrainError
from nika_brain.state.claims import id_from_argument
from tests.kit.orch import PLAIN, nb, open_claim_id, orch_brain, run_file


def test_a_tab_completed_claim_path_closes_the_claim(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"plain": PLAIN})
    nb(brain, "workflow-launch", "plain", check=0)
    cid = open_claim_id(brain, "plain")
    shown = nb(brain, "claim", "show", f"./claims/{cid}.yml", check=0)
    assert cid in shown.stdout
    closed = nb(brain, "claim", "close", f"claims/{cid}.yml", "--status", "ok", check=0)
    assert f"closed {cid}: ok" in closed.stdout
    assert run_file(brain, "plain")["status"] == "done"


def test_only_a_path_into_a_claims_folder_is_taken_as_a_claim():
    assert id_from_argument("claims/sess-20260101-1200-x-step-1.yml") == "sess-20260101-1200-x-step-1"
    assert id_from_argument("/srv/brain/claims/sess-1.yml") == "sess-1"
    assert id_from_argument("sess-1") == "sess-1"
    for bad in ("locks/sess-1.yml", "claims/../gates/g.yml", "claims/.yml", "sess 1"):
        with pytest.raises(BrainError):
            id_from_argument(bad)
