"""kernels.py (kernel.yml, lineage, readjust directives) and sessions.py (the session record)."""
from __future__ import annotations

import json
import threading

import pytest

from nika_brain.errors import BrainError
from nika_brain.state import kernels, sessions
from tests.kit.claude import hook_brain


@pytest.fixture
def brain(tmp_path, git_env):
    return hook_brain(tmp_path / "brain")[0]


def test_load_and_list_kernels(brain):
    k = kernels.load_kernel(brain, "beta")
    assert (k.id, k.goal, k.tags, k.card, k.parent, k.status) == ("beta", "goal of beta", ("ops",),
                                                                  "satellite-boot", "alpha", "active")
    assert k.folder == brain.root / "kernels" / "beta"
    assert [x.id for x in kernels.list_kernels(brain)] == ["alpha", "beta", "gamma"]
    assert kernels.load_kernel(brain, "gamma").card == "kernel-writer"


@pytest.mark.parametrize("text,key,message", [
    ("id: other\ngoal: g\n", "id", "does not match"),
    ("id: alpha\n", "goal", "missing required key"),
    ("id: alpha\ngoal: g\nstatus: sleeping\n", "status", "must be one of"),
    ("id: alpha\ngoal: g\ntags: x\n", "tags", "expected a list"),
])
def test_kernel_yml_errors_name_file_line_and_key(brain, text, key, message):
    path = brain.root / "kernels" / "alpha" / "kernel.yml"
    path.write_text(text)
    with pytest.raises(BrainError) as err:
        kernels.load_kernel(brain, "alpha")
    assert err.value.file == str(path) and err.value.key == key and message in err.value.message
    assert err.value.line is not None


@pytest.mark.parametrize("kid", ["../alpha", "", "a/b", ".hidden"])
def test_kernel_ids_cannot_escape_the_folder(brain, kid):
    with pytest.raises(BrainError, match="not a valid kernel id"):
        kernels.load_kernel(brain, kid)


def test_lineage_stops_at_cycles_and_unknown_parents(brain):
    (brain.root / "kernels" / "alpha" / "kernel.yml").write_text("id: alpha\ngoal: g\nparent: gamma\n")
    (brain.root / "kernels" / "gamma" / "kernel.yml").write_text("id: gamma\ngoal: g\nparent: beta\n")
    assert [k.id for k in kernels.lineage(brain, kernels.load_kernel(brain, "beta"))] == ["alpha", "gamma"]
    (brain.root / "kernels" / "gamma" / "kernel.yml").write_text("id: gamma\ngoal: g\nparent: sess-42\n")
    assert [k.id for k in kernels.lineage(brain, kernels.load_kernel(brain, "beta"))] == ["alpha", "gamma"]


def test_directives_are_append_only_and_seen_per_session(brain):
    d1 = kernels.readjust(brain, "alpha", "  use the staging database  ", by="op")
    d2 = kernels.readjust(brain, "alpha", "no deploys on Friday", by="op")
    assert d1.text == "use the staging database" and d1.id != d2.id
    lines = (brain.root / "kernels" / "alpha" / "directives.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == [d1.id, d2.id]
    assert kernels.unseen_directives(brain, "alpha", "s1") == [d1, d2]
    kernels.mark_seen(brain, "s1", [d1])
    assert kernels.unseen_directives(brain, "alpha", "s1") == [d2]
    assert kernels.unseen_directives(brain, "alpha", "s2") == [d1, d2]  # a successor sees them all
    with open(brain.root / "kernels" / "alpha" / "directives.jsonl", "a") as fh:
        fh.write('{"id": "torn", "te')  # a writer killed mid-line
    assert kernels.list_directives(brain, "alpha") == [d1, d2]


@pytest.mark.parametrize("text,kid,message", [("", "alpha", "needs text"), ("x" * 5000, "alpha", "at most"),
                                              ("hi", "nobody", "no such kernel")])
def test_readjust_refuses(brain, text, kid, message):
    with pytest.raises(BrainError, match=message):
        kernels.readjust(brain, kid, text, by="op")


def test_session_record_round_trip_and_foreign_keys_kept(brain):
    s = sessions.bind(brain, "s1", kernel="alpha", claim=None, source="startup", lineage=[])
    assert (s.kernel, s.claim, s.source) == ("alpha", None, "startup")
    sessions.update(brain, "s1", lambda d: d.update(handover={"to": "s2"}))  # a federation key
    sessions.heartbeat(brain, "s1", used=50_000, window=200_000, pct=25.0, event="Stop")
    sessions.end(brain, "s1", reason="clear")
    again = sessions.bind(brain, "s1", kernel=None, claim="c9", source="resume")
    assert (again.kernel, again.claim, again.ended_at, again.context_pct) == ("alpha", "c9", None, 25.0)
    assert sessions.raw(brain, "s1")["handover"] == {"to": "s2"}
    assert [x.id for x in sessions.list_sessions(brain)] == ["s1"]


def test_parallel_updates_lose_nothing(brain):
    # Claude Code runs the hooks of parallel tool calls at the same time.
    paths = [f"src/f{i}.py" for i in range(40)]
    threads = [threading.Thread(target=sessions.add_touched, args=(brain, "s1", [p])) for p in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(sessions.load(brain, "s1").touched) == sorted(paths)


@pytest.mark.parametrize("sid", ["../x", "", "a/b", ".x", "x" * 200, None])
def test_session_ids_never_become_paths(brain, sid):
    assert not sessions.valid_id(sid)
    with pytest.raises(BrainError, match="invalid session id"):
        sessions.session_path(brain, sid)


def test_corrupt_session_record_is_reported_not_guessed(brain):
    path = sessions.session_path(brain, "s1")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(BrainError) as err:
        sessions.load(brain, "s1")
    assert err.value.file == str(path)
    assert sessions.list_sessions(brain) == []
