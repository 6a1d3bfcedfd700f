"""How engine/satellites.launch follows the brain's `sandbox` setting for a satellite's wall
(claude/bwrap.satellite_wall), bubblewrap present or not. The wall itself, attacked from a satellite's
own process tree: tests/state/test_agent_attacks.py::test_a_satellite_without_claude_codes_sandbox_*."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from nika_brain.brain import Brain
from nika_brain.claude import bwrap
from nika_brain.engine import satellites
from tests.kit.brain import make_brain

CLAIM = SimpleNamespace(id="sess-20300101-0000-w-step-1", workflow="w", step="1")


def _brain(tmp_path, sandbox: str) -> Brain:
    return make_brain(tmp_path / "b", f"version: 1\nsandbox: \"{sandbox}\"\n")


@pytest.fixture
def no_bwrap(monkeypatch):
    calls = []
    monkeypatch.setattr(bwrap, "runs", lambda *a: calls.append(a) or "bubblewrap (bwrap) is not installed")
    monkeypatch.setattr(satellites, "_WALL_WHY", [])
    return calls


def test_required_refuses_to_launch_without_bwrap_in_one_line(tmp_path, no_bwrap):
    brain = _brain(tmp_path, "required")
    out = satellites._wall(brain, CLAIM, brain.root, brain.guarded_dir / "doors" / CLAIM.id / "door.sock")
    assert isinstance(out, satellites.SatelliteOutcome) and out.unavailable and out.returncode == 126
    assert "\n" not in out.summary and "sandbox: required" in out.summary and "not installed" in out.summary


def test_auto_launches_without_bwrap_with_a_warning_said_and_journaled(tmp_path, no_bwrap, capsys):
    brain = _brain(tmp_path, "auto")
    out = satellites._wall(brain, CLAIM, brain.root, brain.guarded_dir / "doors" / CLAIM.id / "door.sock")
    assert out == []
    err = capsys.readouterr().err
    assert err.startswith("warning: satellite of " + CLAIM.id + " runs without its wall"), err
    recs = [json.loads(x) for x in (brain.root / "journal" / "signals.jsonl").read_text().splitlines()]
    assert [(r["type"], r["claim"]) for r in recs] == [("SATELLITE_UNWALLED", CLAIM.id)]


def test_off_builds_no_wall_and_asks_nothing(tmp_path, no_bwrap):
    brain = _brain(tmp_path, "off")
    assert satellites._wall(brain, CLAIM, brain.root, brain.guarded_dir / "x.sock") == []
    assert no_bwrap == []


def test_the_wall_hides_the_operators_keys_and_other_doors_and_keeps_its_own(tmp_path):
    assert bwrap.runs() is None, f"bubblewrap must run here: {bwrap.runs()}"
    brain = _brain(tmp_path, "auto")
    wt = brain.root / ".nika" / "worktrees" / "theme__x"
    wt.mkdir(parents=True)
    mine, other = (brain.guarded_dir / "doors" / c for c in ("mine", "other"))
    for d in (mine, other, brain.state_dir / "doors" / "k1"):
        d.mkdir(parents=True)
        (d / "door.sock").write_text("")
    look = ("import os, sys; print(json.dumps({p: os.path.exists(p) for p in sys.argv[1:]}))")
    probe = [str(mine / "door.sock"), str(other / "door.sock"), str(brain.state_dir / "doors" / "k1" / "door.sock")]
    argv = bwrap.satellite_wall(brain, wt, mine) + [sys.executable, "-c", "import json; " + look, *probe]
    seen = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    assert seen == {probe[0]: True, probe[1]: False, probe[2]: False}
