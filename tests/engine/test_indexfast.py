"""engine/indexfast.py against the full path: wherever the fast path answers for a claim's text, the
full path (yamlsafe.loads, claims.load_path, index._claim_summary) accepts it and gives the same
summary; wherever the full path refuses the text, the fast path declines, so the index names the
same files with the same messages. Checked on generated claims (as claims._save writes them) and on
every one-line mutation of a few of them, then through the index itself."""
from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from nika_brain.engine import index, indexfast
from nika_brain.errors import BrainError
from nika_brain.state import claims
from nika_brain.support import yamlsafe
from nika_brain.support.yamlsafe import dumps
from tests.support.test_yamlfast import typed  # each scalar with its type

REFUSED = "refused"


def full(text: str, stem: str):
    """The summary the full path gives, or REFUSED."""
    try:
        doc = yamlsafe.loads(text, f"claims/{stem}.yml")
        return index._claim_summary(claims.load_path(Path(f"claims/{stem}.yml"), doc))
    except BrainError:
        return REFUSED


def agrees(text: str, stem: str) -> bool:
    """True when the fast path answered; then the full path must accept the text with the same summary."""
    fast = indexfast.claim_summary(text, stem)
    if fast is None:
        return False
    slow = full(text, stem)
    assert slow is not REFUSED, f"the fast path accepted what load_path refuses:\n{text}"
    assert typed(fast) == typed(slow), text
    assert list(fast) == list(slow), "the same keys in the same order"
    return True


WORDS = ["wf", "alpha", "beta-2", "a_b", "x.y", "src/a", "yes", "No", "on", "null", "Null", "~", "true",
         "y", "n", "", "two words", "a: b", "a #b", "a#b", "ends:", "-dash", "'q'", '"dq"', "it's", "0", "7",
         "01", "1.5", "0x1f", "1_000", "2026-03-01", "é", "中文", "tab\there", "a\x85b", "\ufeffbom", "[a]",
         "{}", "<<", "=", "line\nbreak", " lead", "trail ", "x" * 300]
TIMES = ["2026-03-01T00:00:00Z", "2026-03-01T10:20:30.123456Z", "2026-03-01T10:20:30.000000Z",
         "0999-03-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-03-01T24:00:00Z", "2026-03-01T10:00:00+02:00",
         "2026-03-01T10:00:00", "2026-03-01", "not a time", "2026-03-01T10:00:00.5Z", "9999-12-31T23:59:59Z"]
SCOPES = ["src/", "src/a.py", "./src", "src//a/", ".", "", "/abs", "../up", "a/../b", "a\x01b", "x" * 1100,
          "src/*.py", "docs", "yes", "1", "a b/"]
STEPS = [1, 0, 2, 10**18 - 1, 10**18, -1, "review", "r.1", "01", "0", "yes", "a" * 65, "", True, "1e3", 1.5]


def claim_data(rng: random.Random, cid: str, odd: float) -> dict:
    """A claim as claims.to_dict gives it; with probability `odd` per field, a value load_path may refuse."""
    def pick(good, bad):
        return rng.choice(bad) if rng.random() < odd else rng.choice(good)
    status = pick(["open", "closed"], ["done", "", None, "OPEN"])
    opened = pick(TIMES[:2] + TIMES[-1:], TIMES)
    d = {"id": pick([cid], [cid + "x", "yes", None, 1]),
         "workflow": pick(["wf000", "alpha", "beta-2"], WORDS + [None, 3]),
         "theme": pick(["wf000", "alpha"], WORDS + [None]),
         "step": pick([1, 2, "review", 0], STEPS + [None]),
         "satellite_type": pick(list(claims.SATELLITE_TYPES), ["Code", "", None, "yes", 1]),
         "satellite_level": pick(["domain", "leaf"], ["Domain", None, "", 2]),
         "agent": pick([None, "ana", "bot-1"], ["-x", "a b", "", "é", "x" * 101, 5, "yes"]),
         "scope": pick([["src/wf000/part1/"], ["src/", "docs/a.md"], ["lib"]],
                       [[s] for s in SCOPES] + [[], "src/", [None], [1], [["a"]], ["src/", "../x"]]),
         "zone": pick([None, "project"], WORDS + [1]),
         "story_angle": pick(["", "bench", "fix the login"], WORDS + [None, 2, True]),
         "on_done": pick([None, "wf/next"], WORDS), "on_partial": pick([None], WORDS),
         "on_fail": pick([None], WORDS),
         "status": status, "opened": opened,
         "closed": pick([None] if status == "open" else [opened], TIMES + [None, ""]),
         "parent": pick([None, "sess-parent"], WORDS),
         "children": pick([[], ["sess-a", "sess-b"]], [[1], [None], ["yes"], [""], ["a: b"], ["[x]"], "a", None]),
         "session": pick([None, "s1"], WORDS),
         "touched": pick([[], ["src/a.py"]], [[True], ["a b"], ["- x"], None]),
         "result": None}
    if status == "closed" or rng.random() < odd:
        d["result"] = {"status": pick(list(claims.RESULT_STATUSES), ["fine", None, "", "OK"]),
                       "summary": pick(["done", "", "all green"], WORDS + [None, 4]),
                       "tests": {"passed": pick([3, 0, None], [-3, True, "3", 1.5, 10**20]),
                                 "failed": pick([0, None], [False, "no", -1])}}
        if rng.random() < odd:
            d["result"] = rng.choice([None, "ok", {"status": "ok"}, {"status": "ok", "summary": "x", "tests": None},
                                      {"status": "ok", "summary": "x", "tests": {"passed": 1}}, []])
    if rng.random() < odd / 2:
        d["failed_tests"] = {"command": "pytest", "exit": 1, "passed": 0, "failed": 1, "output": "F", "at": opened}
    if rng.random() < odd / 3:
        d[rng.choice(["extra", "tests", "ids"])] = "x"
    if rng.random() < odd / 3:
        del d[rng.choice(list(d))]
    return d


def test_the_fast_path_agrees_with_the_full_path_on_generated_claims():
    rng = random.Random(25)
    answered = refused = 0
    for i in range(2000):
        cid = f"sess-2026030{i % 9 + 1}-1200-wf-step-{i}"
        text = dumps(claim_data(rng, cid, odd=0.0 if i < 400 else 0.08))
        answered += agrees(text, cid)
        refused += full(text, cid) is REFUSED
    assert answered > 700, answered   # the shape claims._save writes: nearly every valid claim
    assert refused > 500, refused     # and many invalid ones, all declined


def test_every_valid_claim_in_the_shape_claims_writes_takes_the_fast_path():
    rng = random.Random(7)
    for i in range(300):
        cid = f"sess-20260301-1200-wf-step-{i}"
        c = claims.load_path(Path(f"{cid}.yml"), yamlsafe.loads(dumps(claim_data(rng, cid, odd=0.0))))
        text = dumps(claims.to_dict(c))
        if ".000000Z" not in text:
            assert agrees(text, cid), text


RAWS = ["null", "~", "''", "'x'", "'it''s'", '"dq"', '"a\\tb"', "yes", "no", "on", "True", "FALSE", "Null", "y",
        "0", "7", "-3", "+4", "01", "0x1f", "1_000", "1:30", "1.5", ".5", "1e3", ".inf", "10000000000000000000",
        "2026-03-01", "'2026-03-01T00:00:00Z'", "2026-03-01T00:00:00Z", "'2026-02-30T00:00:00Z'",
        "'2026-03-01T00:00:00.000000Z'", "'0999-03-01T00:00:00Z'", "[]", "[a]", "[a, b]", "{}", "{a: 1}",
        "a b", "a  b", "a: b", "a #b", "a#b", "ends:", "-x", "- x", "?q", "!tag", "&a", "*a", "@a", "`a",
        "%a", "|", ">", "é", "a\x85b", "a\u2028b", "\ufeffa", "a\tb", "src/", "./src", "../up", "/abs",
        "open", "closed", "ok", "partial", "failed", "code", "leaf", "domain", "review", "sess-x", "wf000",
        "x" * 70, "x" * 120, "<<", "=", "#c", "a:", "[", "]", "'", '"', "a'", "a\"b"]


def mutations(text: str):
    """Every one-line change: each value replaced by each raw text, each line dropped, doubled,
    moved, indented, followed by a comment or a trailing space."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        head, sep, _ = line.partition(": ")
        if sep:
            for raw in RAWS:
                yield "\n".join(lines[:i] + [f"{head}: {raw}"] + lines[i + 1:])
        elif line.startswith("- "):
            for raw in RAWS:
                yield "\n".join(lines[:i] + [f"- {raw}"] + lines[i + 1:])
        if not line:
            continue
        yield "\n".join(lines[:i] + lines[i + 1:])
        yield "\n".join(lines[:i + 1] + [line] + lines[i + 1:])
        yield "\n".join(lines[:i] + [" " + line] + lines[i + 1:])
        yield "\n".join(lines[:i] + [line + " "] + lines[i + 1:])
        yield "\n".join(lines[:i] + [line, "# note"] + lines[i + 1:])
        yield "\n".join(lines[:i] + [line + " # note"] + lines[i + 1:])
        if i + 1 < len(lines) and lines[i + 1]:
            yield "\n".join(lines[:i] + [lines[i + 1], line] + lines[i + 2:])
    yield text.rstrip("\n")
    yield text + "\n"
    yield "---\n" + text
    yield text.replace("\n", "\r\n")


BASES = [
    {"status": "open", "children": [], "touched": []},
    {"status": "closed", "children": ["sess-a", "sess-b"], "touched": ["src/a.py", "src/b.py"]},
]


@pytest.mark.parametrize("base", BASES, ids=["open", "closed"])
def test_the_fast_path_agrees_with_the_full_path_on_every_one_line_mutation(base):
    cid = "sess-20260301-1200-wf-step-1"
    opened = "2026-03-01T10:00:00Z"
    d = {"id": cid, "workflow": "wf", "theme": "wf", "step": 1, "satellite_type": "code",
         "satellite_level": "domain", "agent": "ana", "scope": ["src/", "docs/"], "zone": "project",
         "story_angle": "bench", "on_done": "wf/2", "on_partial": None, "on_fail": None, "status": base["status"],
         "opened": opened, "closed": opened if base["status"] == "closed" else None, "parent": "sess-p",
         "children": base["children"], "session": "s1", "touched": base["touched"], "result": None}
    if base["status"] == "closed":
        d["result"] = {"status": "ok", "summary": "done", "tests": {"passed": 3, "failed": 0}}
    text = dumps(d)
    assert agrees(text, cid)
    seen = answered = 0
    for mutant in mutations(text):
        seen += 1
        answered += agrees(mutant, cid)
        assert indexfast.claim_summary(text, cid + "x") is None   # the id is not the file's name
    assert seen > 2000 and answered > 100, (seen, answered)


@pytest.mark.parametrize("stem", ["sess-x", "yes", "null", "Null", "true", "7", "01", "x.y", "a_b", "-x", "é"])
def test_the_id_is_read_as_yaml_reads_it_before_it_is_compared_with_the_file_name(stem):
    opened = "2026-03-01T10:00:00Z"
    d = {"id": stem, "workflow": "wf", "theme": "wf", "step": 1, "satellite_type": "code",
         "satellite_level": "domain", "agent": None, "scope": ["src/"], "zone": None, "story_angle": "",
         "on_done": None, "on_partial": None, "on_fail": None, "status": "open", "opened": opened,
         "closed": None, "parent": None, "children": [], "session": None, "touched": [], "result": None}
    text = dumps(d)
    head, _, rest = text.partition("\n")
    for line in (f"id: {stem}", f"id: '{stem}'", f'id: "{stem}"', head):
        mutant = line + "\n" + rest
        agrees(mutant, stem)
        agrees(mutant, "sess-y")
    assert agrees("id: sess-x\n" + rest, "sess-x")


def brain_of_claims(brain, n: int, seed: int) -> None:
    rng = random.Random(seed)
    brain.claims_dir.mkdir(exist_ok=True)
    for i in range(n):
        cid = f"sess-20260301-1200-wf-step-{i}"
        text = dumps(claim_data(rng, cid, odd=0.0 if i % 3 else 0.15))
        (brain.claims_dir / f"{cid}.yml").write_text(text, encoding="utf-8")
    (brain.claims_dir / "sess-raw-1.yml").write_bytes(b"id: sess-raw-1\n\xff\n")
    (brain.claims_dir / "yes.yml").write_text(dumps(claim_data(rng, "yes", odd=0.0)), encoding="utf-8")


def test_the_index_names_the_same_files_with_the_same_messages_with_or_without_the_fast_path(brain, monkeypatch):
    brain_of_claims(brain, 400, 11)
    calls = []
    real = indexfast.claim_summary

    def counted(text, stem):
        row = real(text, stem)
        calls.append(row is not None)
        return row

    def run():
        cache = index._Cache(brain)
        cache.data = {}
        bad: list[BrainError] = []
        rows = cache.summaries(brain.claims_dir, "claims", bad)
        return rows, [(e.file, e.line, e.key, e.message) for e in bad]

    monkeypatch.setattr(indexfast, "claim_summary", counted)
    fast_rows, fast_bad = run()
    monkeypatch.setattr(indexfast, "claim_summary", lambda text, stem: None)
    slow_rows, slow_bad = run()
    assert sum(calls) > 200 and not all(calls)   # both paths were taken
    assert typed(fast_rows) == typed(slow_rows)
    assert fast_bad == slow_bad and len(slow_bad) > 20
    monkeypatch.setattr(indexfast, "claim_summary", real)

    def cold(strict: bool = False):
        shutil.rmtree(brain.state_dir / "cache", ignore_errors=True)   # no summary cache, no memo
        try:
            return index.render(brain, strict=strict)
        except BrainError as exc:
            return str(exc)

    fast_text, fast_strict = cold(), cold(strict=True)
    monkeypatch.setattr(indexfast, "claim_summary", lambda text, stem: None)
    assert cold() == fast_text and "sess-raw-1.yml" in fast_text
    assert cold(strict=True) == fast_strict and "claims/" in fast_strict


def test_a_state_file_is_read_whole_whatever_size_its_stat_said(tmp_path):
    path = tmp_path / "c.yml"
    path.write_bytes(b"x" * 5000)
    for size in (0, 1, 4999, 5000, 5001, 10**6):   # grown or shrunk since the stat
        data, digest = index._read(str(path), size)
        assert data == b"x" * 5000 and digest == index._read(str(path), 5000)[1]
    big = b"y" * (index._READ_CAP + 10)
    path.write_bytes(big)
    assert index._read(str(path), 10)[0] == big[: index._READ_CAP]   # capped: the loader says "too large"
    assert index._read(str(tmp_path / "gone.yml"), 10) == (None, None)
    os.mkfifo(tmp_path / "fifo.yml")   # swapped in after the listing: read at once (no writer: empty), no wait
    assert index._read(str(tmp_path / "fifo.yml"), 0)[0] == b""
