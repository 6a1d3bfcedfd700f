"""Two workflows at once, from two processes, in one real brain.

Disjoint scopes: both run side by side (their satellites meet at a rendezvous while both hold their
claims), both finish, both theme branches are merged. Overlapping scopes: the second is blocked with
the holder named, and goes through once the first has finished.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests.kit.brain import git_out as git
from tests.kit.orch import claims_of, journal, nb, open_claim_id, orch_brain, run_file, satellite_config, worktree


def _wf(name: str, scopes: list[str], angles: list[str]) -> str:
    steps = "".join(f"  - step: {i}\n    type: search\n    scope: {s}\n    story_angle: \"{a}\"\n"
                    for i, (s, a) in enumerate(zip(scopes, angles), 1))
    return f"name: {name}\nbranch: theme/{name}\nchain:\n{steps}"


def _spawn(brain, *args, env=None) -> subprocess.Popen:
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.Popen([sys.executable, "-m", "nika_brain", *args], cwd=brain.root, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def _wait_for(path, proc: subprocess.Popen) -> None:
    """Synchronisation, not a timing assertion: wait until a satellite says it is in."""
    deadline = time.monotonic() + 120
    while not path.exists():
        assert proc.poll() is None, f"launcher ended before {path.name}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def test_disjoint_scopes_run_side_by_side_and_both_merge(tmp_path, git_env):
    meet = tmp_path / "rendezvous"
    meet.mkdir()
    # Each first step announces itself and waits for the other's: a deadlock-free proof that both
    # workflows held a claim at the same moment (a serialised run would fail the step after 60 s).
    alpha = _wf("alpha", ["a/", "a/more/"], ["signal=alpha-in await=beta-in", "result=ok"])
    beta = _wf("beta", ["b/", "b/more/"], ["signal=beta-in await=alpha-in", "result=ok"])
    brain = orch_brain(tmp_path / "b", {"alpha": alpha, "beta": beta}, config=satellite_config())
    env = {"SATELLITE_RENDEZVOUS": str(meet)}
    procs = [_spawn(brain, "workflow-launch", name, "--mode", "swarm", env=env) for name in ("alpha", "beta")]
    results = [_finish(p) for p in procs]
    for code, out, err in results:
        assert code == 0 and "DONE" in out, (code, out, err)
    for name, top in (("alpha", "a"), ("beta", "b")):
        run = run_file(brain, name)
        assert run["status"] == "done" and run["report"]["delivered"] == ["1", "2"]
        cs = claims_of(brain, name)
        assert [c["result"]["status"] for c in cs] == ["ok", "ok"]
        assert (brain.root / top / f"{cs[0]['id']}.txt").is_file()
        assert (brain.root / top / "more" / f"{cs[1]['id']}.txt").is_file()
    merges = git(brain.root, "log", "--merges", "--format=%s").splitlines()
    assert sorted(merges) == ["Merge theme theme/alpha (alpha)", "Merge theme theme/beta (beta)"]
    assert not list((brain.root / "locks").glob("*.yml"))
    assert git(brain.root, "status", "--porcelain", "--untracked-files=no", "--", "a", "b") == ""


def test_overlapping_scopes_launched_together_block_one_naming_the_holder(tmp_path, git_env):
    alpha = _wf("alpha", ["shared/"], ["result=ok"])
    beta = _wf("beta", ["shared/b/"], ["result=ok"])
    brain = orch_brain(tmp_path / "b", {"alpha": alpha, "beta": beta})
    procs = {name: _spawn(brain, "workflow-launch", name) for name in ("alpha", "beta")}
    results = {name: _finish(p) for name, p in procs.items()}
    codes = sorted(code for code, _, _ in results.values())
    assert codes == [0, 4], results
    winner = next(n for n, (code, _, _) in results.items() if code == 0)
    loser = "beta" if winner == "alpha" else "alpha"
    held = open_claim_id(brain, winner)
    _, out, _ = results[loser]
    assert "BLOCKED_ON" in out and held in out, out
    assert run_file(brain, loser)["status"] == "blocked" and run_file(brain, loser)["claim"] is None
    assert claims_of(brain, loser) == [], "the blocked workflow opened no claim"
    assert any(r["type"] == "BLOCKED_ON" and held in r["reason"] for r in journal(brain, loser))

    scope_of = {"alpha": "shared", "beta": "shared/b"}  # each writes inside its own claim's scope
    first = worktree(brain, f"theme/{winner}") / scope_of[winner] / "first.txt"
    first.parent.mkdir(parents=True)
    first.write_text("first\n")
    nb(brain, "claim", "close", held, "--status", "ok", "--summary", "first", check=0)
    assert "DONE" in nb(brain, "workflow-launch", winner, check=0).stdout
    nb(brain, "workflow-launch", loser, check=0)
    second = open_claim_id(brain, loser)
    mine = worktree(brain, f"theme/{loser}") / scope_of[loser] / "second.txt"
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("second\n")
    nb(brain, "claim", "close", second, "--status", "ok", "--summary", "second", check=0)
    assert "DONE" in nb(brain, "workflow-launch", loser, check=0).stdout
    assert run_file(brain, "alpha")["status"] == run_file(brain, "beta")["status"] == "done"
    assert len(git(brain.root, "log", "--merges", "--format=%H").split()) == 2
    assert (brain.root / scope_of[winner] / "first.txt").read_text() == "first\n"
    assert (brain.root / scope_of[loser] / "second.txt").read_text() == "second\n"


def test_overlap_with_a_running_swarm_satellite_blocks_until_it_has_finished(tmp_path, git_env):
    meet = tmp_path / "rendezvous"
    meet.mkdir()
    alpha = _wf("alpha", ["src/"], ["signal=alpha-in await=go"])
    beta = _wf("beta", ["src/lib/"], ["result=ok"])
    brain = orch_brain(tmp_path / "b", {"alpha": alpha, "beta": beta}, config=satellite_config())
    env = {"SATELLITE_RENDEZVOUS": str(meet)}
    first = _spawn(brain, "workflow-launch", "alpha", "--mode", "swarm", env=env)
    _wait_for(meet / "alpha-in", first)
    held = open_claim_id(brain, "alpha")
    blocked = nb(brain, "workflow-launch", "beta", "--mode", "swarm", env=env, check=4)
    assert "BLOCKED_ON" in blocked.stdout and held in blocked.stdout
    # Both the open claim and the lock are named, the lock with the live orchestrator holding it.
    assert f"overlaps open claim {held}" in blocked.stdout
    assert f"src/ held by {held} (" in blocked.stdout and f":{first.pid}, token" in blocked.stdout
    (meet / "go").touch()
    code, out, err = _finish(first)
    assert code == 0 and "DONE" in out, (out, err)
    again = nb(brain, "workflow-launch", "beta", "--mode", "swarm", env=env, check=0)
    assert "DONE" in again.stdout
    (c,) = claims_of(brain, "beta")
    assert (brain.root / "src" / "lib" / f"{c['id']}.txt").is_file()
    made = json.loads((brain.root / "src" / f"{held}.txt").read_text())
    assert made["claim"] == held
