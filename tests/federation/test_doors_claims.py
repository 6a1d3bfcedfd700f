"""A kernel closes its own claim through its door (claims/ and locks/ are read-only in its sandbox), and
only its own: a claim whose scope lies outside the kernel's folder and scope is refused by the door."""
from __future__ import annotations

import json

from nika_brain.federation.doors.service import DoorService, ask, refusals_path, socket_path
from nika_brain.state import claims
from tests.claudecli.test_real_claude import two_kernels
from tests.kit.orch import nb


def _open(brain, scope: str) -> str:
    return json.loads(nb(brain, "claim", "open", "--workflow", "ledger", "--step", "1", "--scope", scope,
                         "--json").stdout)["id"]


def test_a_kernel_closes_its_own_claim_through_its_door_and_not_another(tmp_path, git_env):
    brain = two_kernels(tmp_path)
    mine, theirs = _open(brain, "kernels/k1/"), _open(brain, "kernels/k2/")
    doors = DoorService(brain)
    doors.start()
    try:
        refused = ask(socket_path(brain, "k1"), "claim_close", claim=theirs, status="ok", summary="x")
        bad = ask(socket_path(brain, "k1"), "claim_close", claim=mine, status="ok", tests_failed="3")
        done = ask(socket_path(brain, "k1"), "claim_close", claim=mine, status="ok", summary="tidied")
    finally:
        doors.stop()
    assert not refused["ok"] and "not kernel k1's to close" in refused["refused"], refused
    assert refused["exit"] == 6 and "kernels/k2/" in refused["refused"]
    assert not bad["ok"] and "counts" in bad["refused"], bad
    assert claims.load_claim(brain, theirs).is_open                    # the other claim is untouched
    assert done["ok"] and done["result"]["claim"] == mine and done["result"]["result"] == "ok", done
    closed = claims.load_claim(brain, mine)
    assert not closed.is_open and closed.result.summary == "tidied"
    journal = refusals_path(brain).read_text()
    assert "claim_close" in journal and "k1" in journal
