"""Claims: one YAML per step execution; opened, closed once with a result, never reopened."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from nika_brain.errors import EXIT_REFUSED, BrainError, Invalid
from nika_brain.state import claims
from nika_brain.support import clock
from nika_brain.support.yamlsafe import dumps, load_file

T0 = datetime(2031, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
BASE = "sess-20310506-0708-auth-flow-step-2"


def open_one(brain, **kw):
    args = dict(workflow="auth-flow", step=2, satellite_type="code", scope=["src/auth/", "tests/"],
                now=T0)
    args.update(kw)
    return claims.open_claim(brain, **args)


def refused(fn, *args, **kwargs) -> BrainError:
    with pytest.raises(BrainError) as info:
        fn(*args, **kwargs)
    assert info.value.exit_code == EXIT_REFUSED, str(info.value)
    return info.value


def test_open_writes_the_claim_file(brain):
    c = open_one(brain, satellite_level="leaf", zone="app", story_angle="login works",
                 agent="satellite-boot", on_done="step-3", on_partial="gate", on_fail="retry")
    assert c.id == BASE
    path = brain.claims_dir / f"{BASE}.yml"
    assert claims.claim_path(brain, c.id) == path
    assert load_file(path) == {
        "id": BASE, "workflow": "auth-flow", "theme": "auth-flow", "step": 2,
        "satellite_type": "code", "satellite_level": "leaf", "agent": "satellite-boot",
        "scope": ["src/auth/", "tests/"], "zone": "app", "story_angle": "login works",
        "on_done": "step-3", "on_partial": "gate", "on_fail": "retry", "status": "open",
        "opened": "2031-05-06T07:08:09Z", "closed": None, "parent": None, "children": [],
        "session": None, "touched": [], "result": None,
    }
    assert claims.load_claim(brain, c.id) == c
    assert c.is_open and c.result is None


def test_theme_and_step_become_a_safe_file_name(brain):
    c = open_one(brain, theme="Auth Flow/../../etc", step="x")
    assert c.id == "sess-20310506-0708-Auth-Flow-..-..-etc-step-x"
    assert claims.claim_path(brain, c.id).parent == brain.claims_dir
    assert [p.name for p in brain.claims_dir.iterdir()] == [f"{c.id}.yml"]


@pytest.mark.parametrize("bad", ["../x", "²", "", "a" * 65, "-1", -1, True, "1\n"])
def test_a_step_id_that_is_not_one_is_refused_before_anything_is_written(brain, bad):
    with pytest.raises(Invalid):
        open_one(brain, step=bad)
    assert not brain.claims_dir.exists() or list(brain.claims_dir.iterdir()) == []


def test_a_step_id_is_text_whether_written_as_a_number_or_not(brain):
    c = open_one(brain, step=2)
    assert c.step == "2" and claims.load_claim(brain, c.id).step == "2"
    assert "step: 2\n" in claims.claim_path(brain, c.id).read_text()


def test_close_records_the_result(brain):
    c = open_one(brain)
    closed = claims.close_claim(brain, c.id, "partial", "half of it", tests_passed=7, tests_failed=2,
                                now=T0 + timedelta(minutes=5))
    again = claims.load_claim(brain, c.id)
    assert again == closed
    assert (again.status, again.closed) == ("closed", T0 + timedelta(minutes=5))
    assert again.result == claims.Result("partial", "half of it", 7, 2)
    data = load_file(claims.claim_path(brain, c.id))
    assert data["result"] == {"status": "partial", "summary": "half of it",
                              "tests": {"passed": 7, "failed": 2}}
    assert data["closed"] == "2031-05-06T07:13:09Z"


def test_closed_claim_is_final(brain):
    c = open_one(brain)
    claims.close_claim(brain, c.id, "ok", "done", now=T0)
    path = claims.claim_path(brain, c.id)
    before = path.read_bytes()
    err = refused(claims.close_claim, brain, c.id, "failed")
    assert "already closed (ok)" in str(err)
    refused(claims.update_open, brain, c.id, session="s-2")
    assert claims.record_touched(brain, c.id, ["src/x.py"]).touched == ()
    # Opening the same step again is a new execution, with its own id: the closed one stays closed.
    retry = open_one(brain)
    assert retry.id == f"{BASE}-r2" and retry.is_open
    assert path.read_bytes() == before


def test_retries_in_the_same_minute_get_distinct_ids(brain):
    ids = [open_one(brain, now=T0 + timedelta(seconds=s)).id for s in (0, 10, 50)]
    assert ids == [BASE, f"{BASE}-r2", f"{BASE}-r3"]
    assert open_one(brain, now=T0 + timedelta(seconds=60)).id == "sess-20310506-0709-auth-flow-step-2"
    assert len(claims.list_claims(brain)) == 4


def test_parent_children(brain):
    parent = open_one(brain, step=1, satellite_level="domain")
    kids = [open_one(brain, step=f"1.{i}", satellite_level="leaf", parent=parent.id) for i in (1, 2)]
    assert claims.load_claim(brain, parent.id).children == tuple(k.id for k in kids)
    assert all(k.parent == parent.id for k in kids)
    with pytest.raises(BrainError, match="no such claim: sess-missing"):
        open_one(brain, parent="sess-missing")
    assert len(claims.list_claims(brain)) == 3


@pytest.mark.parametrize("bad", ["../x", "../../etc/passwd", "a/b", "", ".hidden", "-x", "a b", "sess-x\n",
                                 "x" * 200, "/abs"])
def test_invalid_claim_ids_are_refused(brain, bad):
    for fn in (lambda: claims.load_claim(brain, bad), lambda: claims.close_claim(brain, bad, "ok"),
               lambda: claims.claim_path(brain, bad), lambda: open_one(brain, parent=bad or "/")):
        with pytest.raises(BrainError, match="not a valid claim id"):
            fn()
    assert not brain.claims_dir.exists() or list(brain.claims_dir.iterdir()) == []


def test_open_validates_its_input(brain):
    with pytest.raises(BrainError, match="satellite_type"):
        open_one(brain, satellite_type="poet")
    with pytest.raises(BrainError, match="satellite_level"):
        open_one(brain, satellite_level="root")
    with pytest.raises(BrainError, match="inside the brain"):
        open_one(brain, scope="../outside")
    c = open_one(brain)
    with pytest.raises(BrainError, match="result status"):
        claims.close_claim(brain, c.id, "meh")
    assert claims.load_claim(brain, c.id).is_open


def test_list_filters_and_ignores_non_claims(brain):
    a = open_one(brain, step=1)
    b = open_one(brain, step=2)
    claims.close_claim(brain, a.id, "failed", now=T0)
    (brain.claims_dir / f".{b.id}.yml.x8a7s.tmp").write_text("id: [trunc")
    (brain.claims_dir / "notes.txt").write_text("hello")
    assert [c.id for c in claims.list_claims(brain)] == sorted([a.id, b.id])
    assert [c.id for c in claims.list_claims(brain, "open")] == [b.id]
    assert [c.id for c in claims.list_claims(brain, "closed")] == [a.id]


def write_claim(brain, claim_id: str, **changes) -> object:
    data = claims.to_dict(open_one(brain))
    claims.claim_path(brain, data["id"]).unlink()
    data.update(id=claim_id, **changes)
    path = brain.claims_dir / f"{claim_id}.yml"
    path.write_text(dumps(data))
    return path


@pytest.mark.parametrize("changes, message, key", [
    ({"status": "closed"}, "a closed claim needs a result", "result"),
    ({"satellite_type": "poet"}, "must be one of", "satellite_type"),
    ({"satellite_level": "root"}, "must be one of", "satellite_level"),
    ({"result": {"status": "great"}}, "must be one of", "result.status"),
    ({"result": {"status": "ok", "tests": {"passed": "many"}}}, "expected an integer", "result.tests.passed"),
    ({"children": ["a", 3]}, "expected a list of strings", "children"),
    ({"step": [1]}, "expected an integer or a string", "step"),
    ({"surprise": 1}, "unknown key", "surprise"),
])
def test_loader_names_file_line_and_key(brain, changes, message, key):
    path = write_claim(brain, "sess-20310506-0708-x-step-1", **changes)
    with pytest.raises(BrainError) as info:
        claims.load_path(path)
    err = info.value
    assert (err.file, err.key) == (str(path), key)
    assert message in str(err) and str(err).startswith(f"{path}:{err.line}: {key}: ")
    assert isinstance(err.line, int) and err.line >= 1


def test_id_must_match_the_file_name(brain):
    path = write_claim(brain, "sess-20310506-0708-x-step-1")
    moved = path.with_name("sess-other-step-1.yml")
    path.rename(moved)
    with pytest.raises(BrainError, match="id does not match the file name"):
        claims.load_path(moved)


# ---- the CLI ------------------------------------------------------------------------------------

def test_cli_open_show_close_list(brain, cli):
    env = {"NIKA_NOW": clock.iso(T0)}
    r = cli("claim", "open", "--workflow", "auth-flow", "--step", "2", "--type", "test",
            "--scope", "src/auth/", "--scope", "tests/", "--zone", "app", "--level", "leaf", env=env)
    assert (r.returncode, r.stdout) == (0, f"{BASE}\n"), r.stderr
    r = cli("claim", "open", "--workflow", "auth-flow", "--step", "2", "--scope", "src/", "--json",
            "--parent", BASE, env=env)
    child = json.loads(r.stdout)
    assert child["id"] == f"{BASE}-r2" and child["parent"] == BASE and child["status"] == "open"

    r = cli("claim", "show", BASE)
    assert r.returncode == 0
    assert r.stdout == claims.claim_path(brain, BASE).read_text()
    shown = json.loads(cli("claim", "show", BASE, "--json").stdout)
    assert (shown["satellite_type"], shown["satellite_level"], shown["scope"], shown["zone"],
            shown["children"]) == ("test", "leaf", ["src/auth/", "tests/"], "app", [f"{BASE}-r2"])

    r = cli("claim", "close", f"{BASE}-r2", "--status", "failed")  # children close before parents
    assert (r.returncode, r.stdout) == (0, f"closed {BASE}-r2: failed\nnext: nothing to route — claim "
                                           f"{BASE}-r2 is not the step of a workflow run\n"), r.stderr
    r = cli("claim", "close", BASE, "--status", "ok", "--summary", "all green", "--tests-passed", "12",
            "--tests-failed", "0")
    assert (r.returncode, r.stdout) == (0, f"closed {BASE}: ok\nnext: nothing to route — claim "
                                           f"{BASE} is not the step of a workflow run\n"), r.stderr
    assert claims.load_claim(brain, BASE).result == claims.Result("ok", "all green", 12, 0)

    r = cli("claim", "close", BASE, "--status", "failed")
    assert r.returncode == 6
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1 and "already closed" in r.stderr
    assert claims.load_claim(brain, BASE).result.status == "ok"

    lines = cli("claim", "list").stdout.splitlines()
    assert sorted(lines) == sorted([f"{BASE}-r2\tclosed failed\tsrc/",
                                    f"{BASE}\tclosed ok\tsrc/auth/ tests/"])
    assert cli("claim", "list", "--status", "open").stdout == ""
    assert sorted(c["id"] for c in json.loads(cli("claim", "list", "--status", "closed", "--json").stdout)) \
        == [BASE, f"{BASE}-r2"]


@pytest.mark.parametrize("args", [("claim", "show", "../x"), ("claim", "close", "../../etc/passwd",
                                                              "--status", "ok")])
def test_cli_refuses_path_traversal(brain, cli, args):
    r = cli(*args)
    assert r.returncode == 1
    assert r.stderr.startswith("nika-brain: not a valid claim id") and "Traceback" not in r.stderr


def test_cli_unknown_claim(brain, cli):
    r = cli("claim", "close", "sess-nothing-step-1", "--status", "ok")
    assert (r.returncode, r.stderr) == (1, "nika-brain: no such claim: sess-nothing-step-1\n")
