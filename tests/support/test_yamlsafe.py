"""The safe YAML loader refuses what a state file never needs, and says where; dumps is stable."""
from __future__ import annotations

import random
import subprocess
import sys

import pytest

from nika_brain.brain import CONFIG_NAME, load_config
from nika_brain.errors import BrainError
from nika_brain.state import locks
from nika_brain.support import yamlsafe
from nika_brain.support.yamlsafe import MAX_BYTES, MAX_DEPTH, MAX_NODES, dumps, load_doc, load_file, loads
from tests.support.test_yamlfast import SCALARS, random_value


def refused(text: str, source: str = "state.yml") -> BrainError:
    with pytest.raises(BrainError) as info:
        loads(text, source)
    assert info.value.file == source
    assert str(info.value).startswith(f"{source}:")
    return info.value


@pytest.mark.parametrize("text, message, line", [
    ("a: &x 1\nb: 2\n", "anchors (&name) are not allowed", 1),
    ("a: 1\nb: *x\n", "aliases (*name) are not allowed", 2),
    ("a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n", "anchors (&name) are not allowed", 1),  # laughs
    ("a: 1\nb: !!python/object:os.system ls\n",
     "tag 'tag:yaml.org,2002:python/object:os.system' is not allowed", 2),
    ("a: !!python/name:os.system\n", "is not allowed", 1),
    ("a: !custom 1\n", "tag '!custom' is not allowed", 1),
    ("a: !!binary aGVsbG8=\n", "tag 'tag:yaml.org,2002:binary' is not allowed", 1),
    ("a: !!set {x, y}\n", "tag 'tag:yaml.org,2002:set' is not allowed", 1),
    ("a: !!omap [x: 1]\n", "is not allowed", 1),
    ("a: !mine {x: 1}\n", "tag '!mine' is not allowed", 1),
    ("a:\n  <<: {b: 1}\n  c: 2\n", "merge keys (<<) are not allowed", 2),
    ("a: 1\nb: 2\na: 3\n", "duplicate key 'a'", 3),
    ("top:\n  x: 1\n  x: 1\n", "duplicate key 'x'", 3),
    ("a: 1\n---\nb: 2\n", "more than one YAML document", 2),
    ("? [a, b]\n: 1\n", "mapping keys must be scalars", 1),
    ("a: !!int twelve\n", "bad int value 'twelve'", 1),
    ("a: !!float x\n", "bad float value 'x'", 1),
    ("a: [1, 2\nb: 3\n", "invalid YAML", 2),
    ("a: 'unterminated\n", "invalid YAML", 2),
    ("a: \"tab\\q\"\n", "invalid YAML", 1),
    ("x: 1\ny: a: b\n", "invalid YAML", 2),
])
def test_refused_with_file_and_line(text, message, line):
    err = refused(text)
    assert message in str(err)
    assert err.line == line, str(err)
    assert str(err).startswith(f"state.yml:{line}: ")


def test_control_character_is_refused():
    err = refused("a: b\x00c\n")
    assert "invalid YAML" in str(err)


def test_allowed_explicit_tags_and_plain_types():
    doc = loads("a: !!str 12\nb: !!int '7'\nc: 1.5\nd: yes\ne: ~\nf: 2031-05-06T07:08:09Z\n"
                "g: 0x10\nh: !!null ''\ni: !!timestamp 2031-05-06\nj: ! 12\n")
    assert doc.data == {"a": "12", "b": 7, "c": 1.5, "d": True, "e": None, "f": "2031-05-06T07:08:09Z",
                        "g": 16, "h": None, "i": "2031-05-06", "j": "12"}


def test_key_lines_are_recorded():
    doc = loads("a: 1\nb:\n  c: 2\n  d:\n    - x\n    - y: 3\n")
    assert [doc.line("a"), doc.line("b"), doc.line("b", "c"), doc.line("b", "d", 1, "y")] == [1, 2, 3, 6]
    assert doc.line("b", "missing") == 2  # a missing key points at its parent
    err = doc.error("wrong", "b", "d")
    assert str(err) == "<string>:4: b.d: wrong"


# ---- size and nesting ---------------------------------------------------------------------------

def test_over_size_text_and_file(tmp_path):
    err = refused("a: " + "x" * MAX_BYTES + "\n")
    assert "file too large" in str(err)
    big = tmp_path / "big.yml"
    big.write_text("a: " + "x" * MAX_BYTES + "\n")
    with pytest.raises(BrainError) as info:
        load_file(big)
    assert str(info.value) == f"{big}: file too large (over {MAX_BYTES} bytes)"


def test_just_under_the_size_cap_loads(tmp_path):
    ok = tmp_path / "ok.yml"
    ok.write_text("a: " + "x" * (MAX_BYTES - 10) + "\n")
    assert len(load_file(ok)["a"]) == MAX_BYTES - 10


@pytest.mark.parametrize("text", [
    "[" * 100_000,
    "{a: " * 100_000,
    "".join(f"{' ' * i}- \n" for i in range(0, 400, 2)),
    "a:\n" + "".join(f"{' ' * i}k:\n" for i in range(2, 400, 2)),
], ids=["flow-seq", "flow-map", "block-seq", "block-map"])
def test_deep_nesting_is_refused_not_a_crash(text):
    err = refused(text)
    assert f"nesting deeper than {MAX_DEPTH} levels" in str(err)
    assert err.line is not None


def test_deep_nesting_does_not_crash_a_fresh_interpreter(tmp_path):
    deep = tmp_path / "deep.yml"
    deep.write_text("[" * 100_000)
    code = ("import sys\nfrom nika_brain.support.yamlsafe import load_file\n"
            "from nika_brain.errors import BrainError\n"
            "try:\n    load_file(sys.argv[1])\nexcept BrainError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code, str(deep)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{deep}:1: nesting deeper than")


def test_nesting_at_the_limit_loads():
    data = loads("[" * MAX_DEPTH + "]" * MAX_DEPTH).data
    for _ in range(MAX_DEPTH - 1):
        data = data[0]
    assert data == []


def test_too_many_nodes():
    err = refused("[" + "1," * (MAX_NODES + 1) + "]")
    assert f"too many nodes (over {MAX_NODES})" in str(err)


# ---- files --------------------------------------------------------------------------------------

def test_non_utf8_bytes(tmp_path):
    bad = tmp_path / "latin.yml"
    bad.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(BrainError) as info:
        load_doc(bad)
    assert str(info.value) == f"{bad}: not valid UTF-8 (byte 9)"


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(BrainError, match="no such file"):
        load_file(tmp_path / "nope.yml")
    with pytest.raises(BrainError, match="is a directory"):
        load_file(tmp_path)


def test_every_truncation_of_a_state_file_is_a_brain_error_naming_it(brain):
    lk = locks.acquire(brain, "src/", "sess-x-step-1", pid=None)
    text = lk.path.read_text()
    cut = brain.locks_dir / "cut.yml"
    outcomes = set()
    for n in range(len(text)):
        cut.write_text(text[:n])
        try:
            loaded = locks.load_lock(cut)
        except BrainError as exc:
            assert str(exc).startswith(str(cut)), str(exc)
            outcomes.add("error")
        else:  # a cut that still parses must be a complete lock (only the last newline was cut)
            assert (loaded.scope, loaded.owner, loaded.token) == (lk.scope, lk.owner, lk.token)
            outcomes.add("ok")
    assert "error" in outcomes


def test_wrong_type_and_unknown_key_name_file_line_and_key(tmp_path):
    cfg = tmp_path / CONFIG_NAME
    cfg.write_text("version: 1\nlock_poll: 0.5\nlock_ttl: soon\n")
    with pytest.raises(BrainError) as info:
        load_config(cfg)
    assert str(info.value) == f"{cfg}:3: lock_ttl: expected a number, got str"
    cfg.write_text("version: 1\n\nlock_tll: 5\n")
    with pytest.raises(BrainError) as info:
        load_config(cfg)
    err = info.value
    assert (err.file, err.line, err.key) == (str(cfg), 3, "lock_tll")
    assert "unknown key" in str(err)
    cfg.write_text("version: 1\nfsync: 1\n")  # an integer is not true/false
    with pytest.raises(BrainError, match=r":2: fsync: expected true/false, got int"):
        load_config(cfg)
    cfg.write_text("- just\n- a list\n")
    with pytest.raises(BrainError, match=r":1: expected a mapping, got list"):
        load_config(cfg)


# ---- dumps --------------------------------------------------------------------------------------

TRICKY = ["", " ", "yes", "No", "on", "null", "~", "1", "-1", "0x1F", "1_000", "1e5", "1.5", ".inf",
          "2031-05-06", "2031-05-06T07:08:09Z", "12:30:00", "<<", "=", "&a", "*a", "!x", "%x", "@x",
          "`x", "- x", "? x", ": x", "a: b", "a #b", "#c", "'", '"', "\\", "x\ny", "x\n", "\n\nx",
          " lead", "trail ", "tab\tx", "é ü 日本", "\u2028", "\x85", "\x07bell", "{a}", "[1]", "a,b",
          "x" * 5000, ("word " * 2000).strip(), "two  spaces " * 900, "---", "...", "- ", "|", ">"]


def random_data(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 6 else 6)
    if kind == 0:
        return rng.choice(TRICKY)
    if kind == 1:
        return "".join(rng.choice("ab :#-'\"\n\té?*&!{}[],") for _ in range(rng.randint(0, 12)))
    if kind == 2:
        return rng.choice([0, 1, -7, 2 ** 70, -(2 ** 63)])
    if kind == 3:
        return rng.choice([0.0, -2.5, 1e-7, 1e300, float("inf"), float("-inf"), 3.14159])
    if kind == 4:
        return rng.choice([True, False])
    if kind == 5:
        return None
    if kind == 6:
        return [random_data(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = [rng.choice(TRICKY[:40]) if rng.random() < 0.5 else f"k{rng.randint(0, 99)}"
            for _ in range(rng.randint(0, 5))]
    return {k: random_data(rng, depth + 1) for k in keys}


def test_dumps_round_trips_through_loads():
    rng = random.Random(20310506)
    for i in range(400):
        data = random_data(rng)
        text = dumps(data)
        assert loads(text, f"case-{i}").data == data, text


def test_dumps_is_deterministic_and_keeps_order():
    data = {"zeta": 1, "alpha": [3, 2, 1], "mid": {"b": "2031-05-06T07:08:09Z", "a": "yes"}, "u": "é"}
    assert dumps(data) == dumps(dict(data)) == (
        "zeta: 1\nalpha:\n- 3\n- 2\n- 1\nmid:\n  b: '2031-05-06T07:08:09Z'\n  a: 'yes'\nu: é\n")


def test_shared_objects_are_not_dumped_as_anchors():
    shared = {"x": [1, 2]}
    text = dumps({"a": shared, "b": shared})
    assert "&" not in text and "*" not in text
    assert loads(text).data == {"a": {"x": [1, 2]}, "b": {"x": [1, 2]}}


def test_parsed_records_are_given_again_only_for_the_same_text(tmp_path):
    built = []

    def build(path, doc):
        built.append(path.name)
        return ("record", doc.data["n"])
    parsed = yamlsafe.Parsed(build)
    f = tmp_path / "r.yml"
    f.write_text("n: 1\n")
    first = parsed.load(f)
    assert parsed.load(f) is first and built == ["r.yml"]          # the same text: not parsed again
    f.write_text("n: 2\n")
    assert parsed.load(f) == ("record", 2) and len(built) == 2      # a new text: parsed
    f.write_text("n: 1\n")
    assert parsed.load(f) == ("record", 1) and len(built) == 3      # the older text again: parsed again
    f.write_text("n: [\n")
    for _ in range(2):                                               # a broken file raises every time
        with pytest.raises(BrainError):
            parsed.load(f)
    f.unlink()
    with pytest.raises(BrainError):
        parsed.load(f)


# ---- dumps_fast: dumps, byte for byte ------------------------------------------------------------

TEXTS = ["src/", "a b", "satellite wrote src/a/", "step 1 in progress", "a: b", "a:b c", "ends:", "x #y", "#h",
         "it's", 'say "hi"', "", " lead", "trail ", "two  spaces", "yes", "No", "null", "~", "1", "007", "1.5",
         "1e5", "0x1F", "1_000", "12:30:00", "2031-05-06T07:08:09Z", "2001-12-14 21:59:43.10 -5", "1 2",
         "true story", "on off", "a - b", "- a", "? q", "a, b", "(x) y=z; w+v", "é", "tab\there", "line\nbreak",
         "a" * 50 + " b" * 2100, "x" * 5000, "trigger:next", "signal:BLOCKED_ON", "merged theme/b into main (abc)",
         "--- a", "... b", "a\u2028b", "[a]", "{a}", "a*b", "&a", "!t", "%p", "@a", "`b", "|", ">"]
KEYS = ["id", "status", "step", "on", "yes", "a-b", "k_1", "x.y", "1", "null", "a b", "", "k" * 130]


def test_dumps_fast_is_dumps_byte_for_byte():
    rng = random.Random(26)
    fast = 0
    for _ in range(4000):
        data = {f"k{i}": random_value(rng, 0, TEXTS + SCALARS[::3], KEYS) for i in range(rng.randint(1, 6))}
        assert yamlsafe.dumps_fast(data) == dumps(data), repr(data)
        fast += yamlsafe.dump_plain(data) is not None
    assert fast > 400   # the fast path was taken, not only the fallback (most documents hold one odd value)


def test_run_and_claim_files_are_written_without_yaml_dump(brain):
    """The files a swarm step writes (its run and its claim, at each transition) take the fast path."""
    from nika_brain.state import claims, runs
    c = claims.open_claim(brain, workflow="w", step=1, satellite_type="search", scope=["s1/", "docs/a b/"],
                          story_angle="build it; result=ok")
    c = claims.update_open(brain, c.id, session="s-1")
    assert yamlsafe.dump_plain(claims.to_dict(c)) is not None
    from nika_brain.support import clock
    run = runs.Run(workflow="w", status="running", mode="swarm", started=clock.parse("2026-03-01T10:00:00Z"),
                   cursor="2", claim=c.id,
                   history=({"step": "1", "claim": c.id, "result": "ok", "action": "trigger:next",
                             "at": "2026-03-01T10:00:01Z"},),
                   report={"delivered": ["1"], "partial": [], "merge": "0" * 40})
    assert yamlsafe.dump_plain(runs.to_dict(run)) is not None
    runs.save(brain, run)
    assert runs.load_run(brain, "w") == run


def test_a_line_past_dumps_width_is_left_to_dumps():
    # a value of words just under the fast path's cap, deep enough that its line passes dumps' width
    # (4096): dumps folds it, and so must the file written by dumps_fast
    words = " ".join(["w"] * 1995)
    for depth in range(0, 32, 3):   # up to 30 levels: the loader refuses more than 32
        data: dict = {"k" * 99: words}
        for i in range(depth):
            data = {f"d{i}": data}
        assert yamlsafe.dumps_fast(data) == dumps(data), depth
        assert yamlsafe.loads(yamlsafe.dumps_fast(data)).data == data
