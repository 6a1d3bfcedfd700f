"""BRAIN-INDEX.md: golden rendering, determinism, the claim cache, Mermaid states, template override."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from nika_brain.brain import Brain
from nika_brain.engine import index
from nika_brain.errors import BrainError
from tests.kit.brain import (
    GOLDEN,
    PYTHON_NIKA,
    populate_golden,
    put_claim,
    put_gate,
    put_kernel,
    put_lock,
    put_run,
    put_workflow,
    write,
)


@pytest.fixture(autouse=True)
def no_remembered_text(monkeypatch):
    """These tests are about the model and the summary cache: every file counts as just written, and
    the remembered text (tests/engine/test_index_memo.py) never answers."""
    monkeypatch.setattr(index, "_RACY_NS", 10**18)
    monkeypatch.setattr(index, "_memo", lambda brain, fingerprint, strict: None)


def test_golden_index(brain):
    populate_golden(brain.root)
    assert index.render(brain) == (GOLDEN / "BRAIN-INDEX.md").read_text(encoding="utf-8")


def test_golden_index_is_the_same_from_a_warm_cache(brain):
    populate_golden(brain.root)
    index.regenerate(brain)
    assert (brain.state_dir / "cache" / "index.json").is_file()
    assert index.render(brain) == (GOLDEN / "BRAIN-INDEX.md").read_text(encoding="utf-8")


def test_regenerating_without_a_change_leaves_the_file_byte_identical(brain):
    populate_golden(brain.root)
    assert index.regenerate(brain) is True
    first = brain.index_path.read_bytes()
    st = os.stat(brain.index_path)
    assert index.regenerate(brain) is False
    assert brain.index_path.read_bytes() == first
    st2 = os.stat(brain.index_path)
    assert (st2.st_ino, st2.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)  # not even rewritten


def test_a_state_change_changes_the_index(brain):
    populate_golden(brain.root)
    index.regenerate(brain)
    put_claim(brain.root, "sess-20260317-1300-beta-step-2", workflow="beta", step=2, scope=["src/beta/part2/"],
              opened="2026-03-17T13:00:00Z")
    assert index.regenerate(brain) is True
    text = brain.index_path.read_text()
    assert "| `sess-20260317-1300-beta-step-2` | beta | 2 | src/beta/part2/ | 0s |" in text
    assert "Ages as of 2026-03-17T13:00:00Z" in text


def test_ages_are_measured_against_the_newest_time_in_the_state(brain):
    put_claim(brain.root, "c-old", opened="2026-03-10T00:00:00Z")
    put_claim(brain.root, "c-new", status="closed", opened="2026-03-12T00:00:00Z",
              closed="2026-03-13T05:30:00Z", result="ok")
    text = index.render(brain)
    assert "Ages as of 2026-03-13T05:30:00Z" in text
    assert "| `c-old` | example | 1 | src/ | 3d5h |" in text
    assert "c-new" not in text.split("## Held locks")[0].split("## Active claims")[1]  # closed


def test_an_empty_brain_renders_with_no_reference_time(brain):
    text = index.render(brain)
    assert "Ages as of -" in text
    assert "_No open claim._" in text and "_No lock held._" in text and "_No kernel._" in text


def test_the_cache_is_used_for_unchanged_files_and_refreshed_for_changed_ones(brain):
    put_claim(brain.root, "c1", workflow="wf-one")
    put_claim(brain.root, "c2", workflow="wf-two")
    index.render(brain)
    cache_path = brain.state_dir / "cache" / "index.json"
    cache = json.loads(cache_path.read_text())
    # Tamper with the cached summary of c1 (its file is untouched): the render must trust the cache.
    cache["kinds"]["claims"]["c1.yml"][4]["workflow"] = "from-the-cache"
    cache_path.write_text(json.dumps(cache))
    text = index.render(brain)
    assert "from-the-cache" in text and "wf-two" in text
    # Rewrite c1: its new content invalidates the entry.
    put_claim(brain.root, "c1", workflow="wf-rewritten")
    text = index.render(brain)
    assert "wf-rewritten" in text and "from-the-cache" not in text
    # A removed claim leaves the index and the cache.
    (brain.claims_dir / "c2.yml").unlink()
    text = index.render(brain)
    assert "wf-two" not in text
    assert set(json.loads(cache_path.read_text())["kinds"]["claims"]) == {"c1.yml"}


def _tamper(brain, name: str, workflow: str) -> None:
    """Change the cached summary of a claim whose file stays as it is: what shows is what the cache says."""
    cache_path = brain.state_dir / "cache" / "index.json"
    cache = json.loads(cache_path.read_text())
    cache["kinds"]["claims"][name][4]["workflow"] = workflow
    cache_path.write_text(json.dumps(cache))


def test_a_copied_brain_reuses_the_cache_by_content(brain, tmp_path):
    put_claim(brain.root, "c1", workflow="wf-one")
    index.render(brain)
    _tamper(brain, "c1.yml", "from-the-cache")
    # A plain copy (new inodes, new mtimes, as a clone or a fresh checkout gives): same bytes, so the
    # cached summary is taken without parsing the file again.
    copy = shutil.copytree(brain.root, tmp_path / "copy", copy_function=shutil.copyfile)
    assert "from-the-cache" in index.render(Brain.at(copy))


def test_a_same_size_edit_with_its_mtime_put_back_is_seen(brain):
    put_claim(brain.root, "c1", workflow="wf-aaa")
    path = brain.claims_dir / "c1.yml"
    index.render(brain)
    st = path.stat()
    with open(path, "r+b") as fh:  # in place, the same size, then the old mtime restored
        data = fh.read().replace(b"wf-aaa", b"wf-bbb")
        fh.seek(0)
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    text = index.render(brain)
    assert "wf-bbb" in text and "wf-aaa" not in text


def test_a_damaged_cache_is_rebuilt(brain):
    populate_golden(brain.root)
    cache_path = brain.state_dir / "cache" / "index.json"
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    for garbage in (b"{not json", b"[1, 2]", b'{"version": 1, "nika": "0.1.0", "kinds": {"claims": {"x.yml": 5}}}'):
        cache_path.write_bytes(garbage)
        assert index.render(brain) == (GOLDEN / "BRAIN-INDEX.md").read_text(encoding="utf-8")


def test_step_states_in_the_chart(brain):
    put_workflow(brain.root, "w", 4)
    put_run(brain.root, "w", status="gated", cursor="3", gate="g-3",
            history=[{"step": "1", "result": "failed"}, {"step": "1", "result": "ok"},
                     {"step": "2", "result": "partial"}],
            adaptations=[{"op": "skip", "step": "4"}])
    text = index.render(brain)
    chart = text.split("```mermaid\n")[1].split("```")[0]
    assert ':::done' in chart.splitlines()[1]        # the latest result of step 1 wins
    assert ':::partial' in chart.splitlines()[2]
    assert ':::gated' in chart.splitlines()[3]
    assert ':::skipped' in chart.splitlines()[4]
    for state in ("done", "partial", "gated", "skipped"):
        assert f"classDef {state} " in chart
    assert "classDef pending" not in chart and "classDef failed" not in chart  # only used states


def test_inserted_steps_appear_in_the_chart(brain):
    put_workflow(brain.root, "w", 2)
    put_run(brain.root, "w", cursor="1", claim="c",
            adaptations=[{"op": "insert", "after": "1", "step": {"step": "1b", "type": "test", "scope": "t/"}}])
    chart = index.render(brain).split("```mermaid\n")[1].split("```")[0]
    assert '"1b · test<br/>t/<br/><i>pending</i>"' in chart
    assert chart.count("-->") == 2


def test_only_active_runs_get_a_chart(brain):
    put_workflow(brain.root, "done-wf", 2)
    put_workflow(brain.root, "idle-wf", 2)
    put_run(brain.root, "done-wf", status="done", cursor="END")
    text = index.render(brain)
    assert "```mermaid" not in text
    assert "| [done-wf](workflows/done-wf.yml) | theme/done-wf | done |" in text
    assert "| [idle-wf](workflows/idle-wf.yml) | theme/idle-wf | not started | 0/2 |" in text


def test_mermaid_labels_and_table_cells_are_escaped(brain):
    write(brain.root, "workflows/q.yml", {"name": "q", "branch": "theme/q",
                                          "chain": [{"step": 1, "type": "code", "scope": 'src/"quoted"<b>/'}]})
    put_run(brain.root, "q", cursor="1", claim="c")
    put_gate(brain.root, "g1", "a | b\nc")
    text = index.render(brain)
    assert 'src/#quot;quoted#quot;#lt;b#gt;/' in text
    assert "| a \\| b c |" in text


def test_kernels_are_listed(brain):
    put_kernel(brain.root, "k2", "second goal", tags=["b"])
    put_kernel(brain.root, "k1", "first goal", tags=["a", "c"])
    text = index.render(brain).split("## Kernels")[1]
    assert text.index("`k1`") < text.index("`k2`")
    assert "| `k1` | active | tmux |  | satellite-boot | a, c | first goal |" in text


def test_kernels_show_runtime_limits_and_why_they_stopped(brain):
    from nika_brain.state import kernels
    k = kernels.new_kernel("k3", "third goal", memory="1G", cpu="50%", runtime="headless", status="dead")
    kernels.save_kernel(brain, kernels.replace(k, enforcement="cgroup-v1", status_reason="out of memory"))
    text = index.render(brain).split("## Kernels")[1]
    assert "| `k3` | dead (out of memory) | headless | memory=1G cpu=50% (cgroup-v1) |" in text


def test_a_brain_may_override_the_template(brain):
    write(brain.root, "brain/index.md.j2",
          "open={{ counts.open }} as_of={{ as_of }}\n{% for c in claims %}{{ c.id }}\n{% endfor %}")
    (brain.root / "nika-brain.yml").write_text("version: 1\nindex_template: brain/index.md.j2\n")
    brain = Brain.at(brain.root)
    put_claim(brain.root, "c9", opened="2026-03-17T10:00:00Z")
    assert index.render(brain) == "open=1 as_of=2026-03-17T10:00:00Z\nc9\n"


@pytest.mark.parametrize("template, expect", [
    ("{% for x in claims %}", "brain/bad.j2:1: template syntax error"),
    ("{{ no_such_variable }}", "brain/bad.j2: template error"),
    ("{{ 1 // 0 }}", "brain/bad.j2: template failed: ZeroDivisionError"),
    ("{{ ''.__class__.__mro__ }}", "brain/bad.j2: template error"),   # the sandbox refuses it
])
def test_a_bad_override_template_is_one_clear_error(brain, template, expect):
    write(brain.root, "brain/bad.j2", template)
    (brain.root / "nika-brain.yml").write_text("version: 1\nindex_template: brain/bad.j2\n")
    with pytest.raises(BrainError) as exc:
        index.render(Brain.at(brain.root))
    assert str(exc.value).startswith(expect)


def test_a_missing_override_template_names_the_config_key(brain):
    (brain.root / "nika-brain.yml").write_text("version: 1\nindex_template: nowhere.j2\n")
    with pytest.raises(BrainError) as exc:
        index.render(Brain.at(brain.root))
    assert str(exc.value) == "nika-brain.yml: index_template: template 'nowhere.j2' does not exist"


def test_cli_index_writes_then_reports_unchanged(brain, cli):
    put_claim(brain.root, "c1")
    first = cli("index")
    assert (first.returncode, first.stdout) == (0, "BRAIN-INDEX.md updated\n")
    second = cli("index")
    assert (second.returncode, second.stdout) == (0, "BRAIN-INDEX.md unchanged\n")
    assert brain.index_path.read_text() == index.render(brain)


def test_cli_index_check_and_stdout(brain, cli):
    put_claim(brain.root, "c1")
    stale = cli("index", "--check")
    assert stale.returncode == 1 and "stale" in stale.stderr
    assert not brain.index_path.exists()  # --check writes nothing
    shown = cli("index", "--stdout")
    assert shown.returncode == 0 and shown.stdout == index.render(brain)
    cli("index")
    assert cli("index", "--check").returncode == 0


def test_a_malformed_state_file_is_named_in_the_index_which_still_shows_the_rest(brain, cli):
    # Issue 18, item 3: one bad file elsewhere never breaks the index (nor a run's transition).
    put_claim(brain.root, "c1")
    assert cli("index").returncode == 0
    write(brain.root, "claims/c2.yml", "id: c2\nstatus: [unclosed\n")
    proc = cli("index")
    assert proc.returncode == 0 and proc.stderr == ""
    text = brain.index_path.read_text()
    assert "## Invalid files" in text and "`claims/c2.yml`" in text and "invalid YAML" in text
    assert "| c1 |" in text or "c1" in text.split("## Active claims")[1]
    # The git hooks stay strict: a commit's index tells the whole state or the commit waits.
    with pytest.raises(BrainError) as exc:
        index.render(brain, strict=True)
    assert str(exc.value).startswith("claims/c2.yml:")


def test_a_lock_with_an_escaping_scope_is_named_in_the_error(brain):
    put_lock(brain.root, "src/", "someone")
    lock_file = next(brain.locks_dir.glob("*.yml"))
    lock_file.write_text(lock_file.read_text().replace("scope: src/", "scope: ../../etc"))
    with pytest.raises(BrainError) as exc:
        index.render(brain, strict=True)
    assert str(exc.value).startswith(f"locks/{lock_file.name}:1: scope: scope must be a path inside the brain")
    assert f"`locks/{lock_file.name}`" in index.render(brain)


def test_the_regen_script_runs_the_index_from_any_folder(ibrain):
    put_claim(ibrain.root, "sess-x", opened="2026-03-17T10:00:00Z")
    env = dict(os.environ, NIKA_BRAIN=PYTHON_NIKA)
    run = subprocess.run(["sh", str(ibrain.root / "scripts" / "brain-index-regen.sh")], cwd="/",
                         env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "BRAIN-INDEX.md updated\n"
    assert "`sess-x`" in ibrain.index_path.read_text()


def test_inside_a_hold_the_transitions_regenerate_once_when_it_hands_over(brain, monkeypatch):
    """engine.service.drive holds the index: a transition's regeneration (`soon`) waits for the
    hand-over (`flush`, or the end of the hold), which regenerates once for all of them."""
    populate_golden(brain.root)
    index.regenerate(brain)
    made = []
    real = index.regenerate
    monkeypatch.setattr(index, "regenerate", lambda b, strict=False: made.append(1) or real(b, strict))
    with index.held(brain):
        put_claim(brain.root, "sess-20260317-1300-gamma-step-1", workflow="gamma", opened="2026-03-17T13:00:00Z")
        index.soon(brain)
        put_claim(brain.root, "sess-20260317-1301-gamma-step-2", workflow="gamma", opened="2026-03-17T13:01:00Z")
        index.soon(brain)
        assert made == [] and "gamma-step-1" not in brain.index_path.read_text()   # owed, not made
        index.flush(brain)
        assert made == [1] and "gamma-step-2" in brain.index_path.read_text()
        index.flush(brain)
        assert made == [1]   # nothing owed since
        put_claim(brain.root, "sess-20260317-1302-gamma-step-3", workflow="gamma", opened="2026-03-17T13:02:00Z")
        index.soon(brain)
    assert made == [1, 1] and index.is_current(brain)   # the end of the hold hands over
    put_claim(brain.root, "sess-20260317-1303-gamma-step-4", workflow="gamma", opened="2026-03-17T13:03:00Z")
    index.soon(brain)   # outside a hold: at once
    assert made == [1, 1, 1] and "gamma-step-4" in brain.index_path.read_text()
