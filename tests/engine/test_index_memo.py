"""The remembered BRAIN-INDEX text (.nika/cache/index-text.json): when no input of the index changed,
`index` gives the last text without parsing or rendering (issue 25: the cached index at 10,000 claims).

The memo is only as good as its list of inputs, so the first test holds `_inputs` to every file a
render opens or lists. The others change one input at a time and compare with a render that has no
cache at all, with every file's stat trusted (`settled`: the racy window set to 0) and inside the racy
window, where a file just written is fingerprinted by its bytes as well."""
from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from nika_brain.engine import index
from nika_brain.errors import BrainError
from nika_brain.state import kernels as kernel_records
from tests.kit.brain import populate_golden, put_claim, put_gate, put_lock, write


@pytest.fixture
def settled(monkeypatch):
    """Every file counts as settled (no racy window), as it is a few seconds after the last write."""
    monkeypatch.setattr(index, "_RACY_NS", -10**12)


def federation_state(brain) -> None:
    """Files behind the index's Federation section: journal, handovers, proposals, grants."""
    (brain.journal_dir).mkdir(parents=True, exist_ok=True)
    (brain.journal_dir / "signals.jsonl").write_text(json.dumps(
        {"type": "TASK_GRANTED", "payload": {"owner": "k-api", "to": "k-docs"}}) + "\n")
    write(brain.root, "registry/handovers/k-api-2.yml", {"from_kernel": "k-api", "from_session": "s1", "pct": 41,
                                                         "root": "k-api", "successor_session": "s2"})
    write(brain.root, "proposals/p1.yml", {"id": "p1", "status": "pending", "trigger": "saturation",
                                           "kernel": "k-api", "goal": "split the API", "memory_estimate": 2,
                                           "gate": "spawn-p1"})
    write(brain.root, "grants/k-api--k-docs.yml", {"owner": "k-api", "reader": "k-docs", "levels": [1]})


def fresh(brain) -> str:
    """The text with no cache of any kind."""
    shutil.rmtree(brain.state_dir / "cache", ignore_errors=True)
    return index.render(brain)


def opened_during(fn) -> set[str]:
    seen: set[str] = set()
    active = [True]

    def hook(event, args):
        if active[0] and event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], str):
            seen.add(os.path.realpath(args[0]))
    sys.addaudithook(hook)  # audit hooks cannot be removed: this one is switched off below
    try:
        fn()
    finally:
        active[0] = False
    return seen


def test_every_file_a_render_reads_is_an_input_of_the_fingerprint(brain):
    populate_golden(brain.root)
    federation_state(brain)
    assert "Handovers" in fresh(brain)  # the federation files are read
    shutil.rmtree(brain.state_dir / "cache")
    kernel_records._PARSED.clear()  # the kernel records' in-process cache would spare the render their files
    seen = opened_during(lambda: index._render(brain, False, index.template_path(brain), {}))
    folders, files = index._inputs(brain)
    covered_dirs = {os.path.realpath(f) for f in folders}
    covered = {os.path.realpath(f) for f in files} | {os.path.realpath(index.template_path(brain))}
    covered.add(os.path.realpath(brain.kernels_dir))  # its listing: the kernel.yml paths are in `files`
    root = os.path.realpath(brain.root)
    state = os.path.realpath(brain.state_dir)
    read = {p for p in seen if p.startswith(root + os.sep) and not p.startswith(state + os.sep)}
    assert read  # the hook saw the state files
    outside = sorted(p for p in read if p not in covered and p not in covered_dirs
                     and os.path.dirname(p) not in covered_dirs)
    assert outside == []
    kernels = {p for p in read if "/kernels/" in p}
    assert kernels and kernels <= covered  # each kernel.yml is one of the single files


def test_an_unchanged_brain_gives_the_remembered_text_without_reading_a_state_file(brain, settled):
    populate_golden(brain.root)
    federation_state(brain)
    first = fresh(brain)
    assert (brain.state_dir / "cache" / "index-text.json").is_file()
    seen = opened_during(lambda: index.render(brain))
    claims = os.path.realpath(brain.claims_dir)
    assert not any(p.startswith(claims + os.sep) for p in seen)
    assert index.render(brain) == first


@pytest.mark.parametrize("window", ["settled", "racy"])
@pytest.mark.parametrize("change", ["claim in place, mtime put back", "new claim", "removed claim", "gate",
                                    "lock", "kernel", "journal", "grant", "template override"])
def test_a_changed_input_is_rendered_again(brain, monkeypatch, window, change):
    if window == "settled":  # every file's stat trusted; "racy": every file just written, its bytes hashed
        monkeypatch.setattr(index, "_RACY_NS", -10**12)
    populate_golden(brain.root)
    federation_state(brain)
    before = index.render(brain)  # remembered
    path = brain.claims_dir / "sess-20260317-1200-beta-step-1.yml"
    if change == "claim in place, mtime put back":
        st = path.stat()
        with open(path, "r+b") as fh:  # the same size, in place, then the old mtime restored: ctime moves
            data = fh.read().replace(b"src/beta/part1/", b"src/beta/part9/")
            fh.seek(0)
            fh.write(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif change == "new claim":
        put_claim(brain.root, "sess-20260317-1300-gamma-step-1", workflow="gamma", opened="2026-03-17T13:00:00Z")
    elif change == "removed claim":
        path.unlink()
    elif change == "gate":
        put_gate(brain.root, "new-gate", "a new question?", created="2026-03-17T11:00:00Z")
    elif change == "lock":
        put_lock(brain.root, "lib/new/", "sess-x", token=99, acquired="2026-03-17T12:05:00Z",
                 expires="2026-03-17T12:35:00Z")
    elif change == "kernel":
        kernel = brain.kernels_dir / "k-docs" / "kernel.yml"
        kernel.write_text(kernel.read_text().replace("paused", "active"))
    elif change == "journal":
        with open(brain.journal_dir / "signals.jsonl", "a") as fh:
            fh.write(json.dumps({"type": "TASK_GRANTED", "payload": {"owner": "k-docs", "to": "k-api"}}) + "\n")
    elif change == "grant":
        (brain.grants_dir / "k-api--k-docs.yml").unlink()
    elif change == "template override":
        write(brain.root, "my-index.j2", "claims: {{ counts.claims }}\n")
        with open(brain.root / "nika-brain.yml", "a") as fh:
            fh.write("index_template: my-index.j2\n")
        brain = type(brain).at(brain.root)
    got = index.render(brain)
    assert got != before
    assert got == fresh(brain)


def test_strict_still_fails_on_an_invalid_file_the_remembered_text_lists(brain, settled):
    populate_golden(brain.root)
    write(brain.root, "claims/broken.yml", "id: broken\nstatus: [\n")
    text = index.render(brain)
    assert "## Invalid files" in text and index.render(brain) == text  # remembered, listing it
    with pytest.raises(BrainError):
        index.render(brain, strict=True)


def test_in_the_racy_window_an_unchanged_brain_gives_the_remembered_text_without_a_render(brain, monkeypatch):
    populate_golden(brain.root)  # written just now: inside the default racy window
    first = index.render(brain)
    assert (brain.state_dir / "cache" / "index-text.json").is_file()

    def no_render(*args):
        raise AssertionError("rendered again")
    monkeypatch.setattr(index, "_render", no_render)
    assert index.render(brain) == first


def test_a_text_remembered_in_the_racy_window_is_given_once_the_window_has_passed(brain, monkeypatch):
    """The orchestrator's transition renders with its files just written; the git hook of its state
    commit may look a moment later, when some of them have left the window."""
    populate_golden(brain.root)
    first = index.render(brain)
    monkeypatch.setattr(index, "_RACY_NS", -10**12)  # now every file's stat is trusted

    def no_render(*args):
        raise AssertionError("rendered again")
    monkeypatch.setattr(index, "_render", no_render)
    assert index.render(brain) == first


def test_once_the_window_has_passed_the_memo_trusts_the_stat_and_reads_no_state_file(brain, monkeypatch):
    """A memo written just after the brain was built names every file as racy; the first look after
    the window verifies their bytes once and forgets them, so the next look reads none (issue 25: a
    cached index at 10,000 claims had gone back to re-hashing them all on every run)."""
    populate_golden(brain.root)
    first = index.render(brain)
    memo = brain.state_dir / "cache" / "index-text.json"
    assert json.loads(memo.read_text())["racy"]  # the files just written are in the window
    monkeypatch.setattr(index, "_RACY_NS", -10**12)
    assert index.render(brain) == first
    assert json.loads(memo.read_text())["racy"] == {}
    seen = opened_during(lambda: index.render(brain))
    claims = os.path.realpath(brain.claims_dir)
    assert not [p for p in seen if p.startswith(claims + os.sep)]
    assert index.render(brain) == first == fresh(brain)


@pytest.mark.parametrize("looked_up", ["in the window", "after it"])
def test_in_the_racy_window_new_bytes_under_the_same_stat_are_rendered_again(brain, monkeypatch, looked_up):
    """A second write in the same tick of a coarse clock keeps the stat: the bytes' hash tells, also
    when the next render comes after the window."""
    populate_golden(brain.root)  # inside the default racy window
    before = index.render(brain)
    if looked_up == "after it":
        monkeypatch.setattr(index, "_RACY_NS", -10**12)
    stale = {row[0]: row for row in index._listing(brain.claims_dir)}
    real = index._listing

    def listing(folder):  # the stat each file had before the rewrite below, as a coarse clock shows it
        rows = real(folder)
        return [stale.get(name, (name, path, st)) for name, path, st in rows] if folder == brain.claims_dir else rows
    monkeypatch.setattr(index, "_listing", listing)
    path = brain.claims_dir / "sess-20260317-1200-beta-step-1.yml"
    path.write_bytes(path.read_bytes().replace(b"src/beta/part1/", b"src/beta/part9/"))
    got = index.render(brain)
    assert got != before and "src/beta/part9/" in got
    assert got == fresh(brain)


def test_a_remembered_text_that_is_damaged_or_foreign_is_ignored(brain, settled):
    populate_golden(brain.root)
    first = fresh(brain)
    memo = brain.state_dir / "cache" / "index-text.json"
    right = json.loads(memo.read_text())["fingerprint"]
    outside = brain.root.parent / "outside.txt"   # not an input: a memo may not name it to be read
    outside.write_text("anything\n")
    digest = index._read(str(outside), outside.stat().st_size)[1]
    for junk in ("{not json", "[1, 2]", json.dumps({"fingerprint": "x", "racy": {}, "text": "forged"}),
                 json.dumps({"fingerprint": right, "racy": {}, "text": 3}),
                 json.dumps({"fingerprint": right, "text": "forged"}),
                 json.dumps({"fingerprint": right, "racy": [], "text": "forged"}),
                 json.dumps({"fingerprint": right, "racy": {str(outside): digest}, "text": "forged"})):
        memo.write_text(junk)
        assert index.render(brain) == first
