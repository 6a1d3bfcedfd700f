"""A generated corpus of malformed brain files, fed to every loader and to the real `nika-brain validate`.

Every case is "must fail" (the input is certainly invalid: the loader must raise BrainError naming the
file, on one line) or "must not crash" (a mutation that may or may not leave a valid file, such as a
truncation: the loader must either return or raise BrainError). Any other exception is a traceback a
user would see, and fails the test.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from nika_brain.engine.init import TEMPLATE_ROOT
from nika_brain.errors import BrainError
from nika_brain.state.validate import load
from nika_brain.support.yamlsafe import MAX_BYTES, MAX_DEPTH, dumps, loads
from tests.kit.brain import breaker_doc, claim_doc, gate_doc, lock_doc, run_doc, write

CLAIM_ID = "sess-20260317-1000-corpus-step-1"


@dataclass(frozen=True)
class Case:
    kind: str
    rel: str          # where the file sits in a brain
    data: bytes
    must_fail: bool
    what: str


def _workflow() -> dict:
    return {"name": "corpus", "branch": "theme/corpus", "description": "d",
            "chain": [{"step": 1, "type": "code", "scope": "src/", "on_done": "trigger:next",
                       "on_partial": 'gate:human → "partial?"', "on_fail": "signal:BLOCKED_ON"},
                      {"step": 2, "type": "test", "scope": ["tests/"], "test": "true"}]}


def _front(text: str) -> tuple[str, str]:
    """(front matter YAML, rest) of a card-like template file."""
    assert text.startswith("---\n")
    end = text.index("\n---", 3)
    return text[4:end + 1], text[end + 1:]


CARD_YAML, CARD_BODY = _front((TEMPLATE_ROOT / "agents" / "kernel-orchestrator.md").read_text())
ZONES_YAML, ZONES_BODY = _front((TEMPLATE_ROOT / "brain" / "KERNEL.md").read_text())

# kind -> (path in a brain, valid base mapping, is it front matter, nested mappings that refuse unknown keys)
BASES = {
    "config": ("nika-brain.yml", {"version": 1, "base_branch": "main", "lock_ttl": 60, "lock_poll": 0.5,
                                  "breaker_threshold": 3, "gate_backend": "cli", "bus": "embedded",
                                  "satellite_command": ["claude", "-p"], "default_agent": "satellite-boot"},
               False, []),
    "workflow": ("workflows/corpus.yml", _workflow(), False, [("chain", 0)]),
    "claim": (f"claims/{CLAIM_ID}.yml", claim_doc(CLAIM_ID, workflow="corpus", status="closed",
                                                  closed="2026-03-17T11:00:00Z", result="ok"),
              False, [("result",), ("result", "tests")]),
    "lock": ("locks/src-corpus.yml", lock_doc("src/", "sess-x", pid=12), False, [("holder",)]),
    "gate": ("gates/corpus-gate.yml", dict(gate_doc("corpus-gate"), id="corpus-gate"), False, []),
    "breaker": ("breakers/src-corpus.yml", breaker_doc("src/", gate="g1", last_claim="c1"), False, []),
    "run": ("runs/corpus.yml", run_doc("corpus", cursor="1", claim="c1",
                                       history=[{"step": "1", "result": "ok", "at": "2026-03-17T10:00:00Z"}]),
            False, []),
    "card": ("agents/kernel-orchestrator.md", None, True, [("brain",), ("brain", "ipc")]),
    "zones": ("brain/KERNEL.md", None, True, [("zones", 0)]),
}

WRONG_VALUES = [123, -1, 1.5, True, None, [], {}, "text", [1, 2], {"a": 1}, "2026-13-45T99:99:99Z",
                "x" * 300, "../../etc/passwd", "", [[1]], {"k": [1, {"j": None}]}]


def _load_yaml_base(kind: str):
    if kind == "card":
        return loads(CARD_YAML).data
    if kind == "zones":
        return loads(ZONES_YAML).data
    return BASES[kind][1]


def _wrap(kind: str, yaml_text: str) -> str:
    if BASES[kind][2]:
        body = CARD_BODY if kind == "card" else ZONES_BODY
        return "---\n" + yaml_text + body
    return yaml_text


def _get(data, path):
    for p in path:
        data = data[p]
    return data


def _copy(data):
    return loads(dumps(data)).data


TEXT_BREAKERS = [
    ("unclosed flow mapping", "broken: {a: 1\n", True),
    ("unclosed flow sequence", "broken: [1, 2\n", True),
    ("unclosed quote", 'broken: "never closed\n', True),
    ("tab indentation", "broken:\n\t- 1\n", True),
    ("bad indentation", "broken:\n  a: 1\n b: 2\n", True),
    ("colon soup", "broken: : :\n", True),
    ("alias", "anchor_here: &x 1\nalias_here: *x\n", True),
    ("anchor only", "anchored: &x 1\n", True),
    ("billion laughs", "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n", True),
    ("merge key", "merged:\n  <<: {a: 1}\n", True),
    ("python tag", 'evil: !!python/object/apply:os.system ["echo pwned"]\n', True),
    ("custom tag", "custom: !mytag value\n", True),
    ("binary tag", "blob: !!binary aGVsbG8=\n", True),
    ("set tag", "aset: !!set {a, b}\n", True),
    ("omap tag", "anomap: !!omap [a: 1]\n", True),
    ("local tag on map", "tagged: !thing {a: 1}\n", True),
    ("bad int tag", 'n: !!int "twelve"\n', True),
    ("bad float tag", 'f: !!float "many"\n', True),
    ("second document", "---\nother: 1\n", True),
    ("complex key", "? [a, b]\n: value\n", True),
    ("flow deep", "deep: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n", True),
    ("flow very deep", "deep: " + "[" * 5000 + "]" * 5000 + "\n", True),
    ("block deep", "".join("  " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 5)) + "  " * (MAX_DEPTH + 5) + "v\n", True),
    ("mapping deep", "deep: " + "{a: " * (MAX_DEPTH + 3) + "1" + "}" * (MAX_DEPTH + 3) + "\n", True),
]


def _surely_wrong(old, new) -> bool:
    """No key of any kind takes both a mapping and something else: swapping the two must fail."""
    return old is not None and new is not None and isinstance(old, dict) != isinstance(new, dict)


def _yaml_cases(kind: str, rel: str, base, nested: list) -> list[Case]:
    cases: list[Case] = []
    text = dumps(base)

    def add(what: str, yaml_text: str | bytes, must: bool) -> None:
        data = yaml_text if isinstance(yaml_text, bytes) else _wrap(kind, yaml_text).encode("utf-8")
        cases.append(Case(kind, rel, data, must, what))

    add("valid base", text, False)
    # Structure: the root must be a mapping.
    for what, root in (("root list", [1, 2]), ("root scalar", "just text"), ("root int", 42),
                       ("root empty list", [])):
        add(what, dumps(root), True)
    if kind != "config":  # an empty nika-brain.yml means all defaults: valid
        add("empty", "", True)
        add("only a comment", "# nothing here\n", True)
        add("null document", "~\n", True)
    # Unknown keys, at the top and inside every nested mapping that is closed.
    add("unknown top key", dumps(dict(base, surprise=1)), True)
    for path in nested:
        d = _copy(base)
        _get(d, path)["surprise_key"] = "x"
        add(f"unknown key in {'.'.join(map(str, path))}", dumps(d), True)
    # Each key missing, each key with each wrong value.
    for key in list(base):
        d = _copy(base)
        del d[key]
        add(f"missing {key}", dumps(d), False)
        for value in WRONG_VALUES:
            d = _copy(base)
            d[key] = value
            add(f"{key}={value!r:.30}", dumps(d), _surely_wrong(base[key], value))
    for path in nested:
        inner = _get(base, path)
        for key in list(inner):
            for value in WRONG_VALUES[:10]:
                d = _copy(base)
                _get(d, path)[key] = value
                add(f"{'.'.join(map(str, path))}.{key}={value!r:.30}", dumps(d),
                    _surely_wrong(inner[key], value))
    # Syntax that must never load.
    for what, snippet, must in TEXT_BREAKERS:
        # In front matter a '---' line ends the YAML: there it is no second document.
        add(what, text + snippet, must and not (BASES[kind][2] and what == "second document"))
    add("duplicate key", text + f"{next(iter(base))}: again\n", True)
    add("huge string", text + "padding: '" + "x" * (MAX_BYTES + 10) + "'\n", True)
    add("huge comment", "#" + "y" * (MAX_BYTES + 10) + "\n" + text, True)
    # Encoding: invalid UTF-8 anywhere, NUL and control characters.
    raw = _wrap(kind, text).encode("utf-8")
    for pos in (0, len(raw) // 3, len(raw) // 2, len(raw) - 1):
        add(f"invalid utf-8 at {pos}", raw[:pos] + b"\xff\xfe\xc3" + raw[pos:], True)
    add("latin-1 text", _wrap(kind, text + "note: 'caf\u00e9'\n").encode("latin-1", "replace")
        .replace(b"caf?", b"caf\xe9"), True)
    add("NUL byte", raw[: len(raw) // 2] + b"\x00" + raw[len(raw) // 2:], False)
    add("control chars", raw + b"\x01\x02\x1b\n", False)
    add("UTF-8 BOM", b"\xef\xbb\xbf" + raw, False)
    add("CRLF", raw.replace(b"\n", b"\r\n"), False)
    # Truncations at many points: may or may not stay valid, must never crash.
    for n in range(1, 25):
        add(f"truncated at {n}/25", raw[: len(raw) * n // 25], False)
    rng = random.Random(f"{kind}-corpus")
    for i in range(12):
        flipped = bytearray(raw)
        for _ in range(3):
            j = rng.randrange(len(flipped))
            flipped[j] = rng.randrange(256)
        add(f"random bytes flipped #{i}", bytes(flipped), False)
    add("random binary", bytes(rng.randrange(256) for _ in range(2048)), False)
    return cases


def _front_matter_cases(kind: str, rel: str) -> list[Case]:
    yaml_text = CARD_YAML if kind == "card" else ZONES_YAML
    body = CARD_BODY if kind == "card" else ZONES_BODY
    cases = [
        Case(kind, rel, body.encode(), True, "no front matter"),
        Case(kind, rel, ("---\n" + yaml_text).encode(), True, "front matter never closed"),
        Case(kind, rel, ("\n---\n" + yaml_text + body).encode(), True, "blank line before front matter"),
        Case(kind, rel, ("---\n---\n" + body).encode(), True, "empty front matter"),
        Case(kind, rel, ("---\r\n" + yaml_text.replace("\n", "\r\n") + body).encode(), True, "CRLF front matter"),
        Case(kind, rel, b"", True, "empty file"),
        Case(kind, rel, b"---\n", True, "only the opening fence"),
    ]
    return cases


def generate() -> list[Case]:
    cases: list[Case] = []
    for kind, (rel, base, front, nested) in BASES.items():
        if base is None:
            base = _load_yaml_base(kind)
        cases += _yaml_cases(kind, rel, base, nested)
        if front:
            cases += _front_matter_cases(kind, rel)
    return cases


CORPUS = generate()


def test_the_corpus_is_large_and_covers_every_kind():
    assert len(CORPUS) >= 1000
    kinds = {c.kind for c in CORPUS}
    assert kinds == {"config", "workflow", "claim", "lock", "gate", "breaker", "run", "card", "zones"}
    for kind in kinds:
        assert sum(1 for c in CORPUS if c.kind == kind and c.must_fail) >= 40, kind


def test_the_valid_bases_load(tmp_path):
    # Otherwise every "must fail" case would fail for the wrong reason.
    for c in CORPUS:
        if c.what == "valid base":
            p = tmp_path / c.kind / c.rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(c.data)
            load(c.kind, p)


def test_no_loader_raises_anything_but_one_line_brain_errors(tmp_path):
    crashes, silent, bad_messages = [], [], []
    for n, c in enumerate(CORPUS):
        p = tmp_path / str(n) / c.rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(c.data)
        try:
            load(c.kind, p)
        except BrainError as exc:
            text = str(exc)
            lines = c.data.count(b"\n") + 1  # (+1: a parser may point just past the end)
            if "\n" in text or str(p) not in text or (exc.line is not None and not 1 <= exc.line <= lines + 1):
                bad_messages.append((c.kind, c.what, text[:200]))
            continue
        except Exception as exc:  # noqa: BLE001 - exactly what this test hunts for
            crashes.append((c.kind, c.what, f"{type(exc).__name__}: {exc}"[:200]))
            continue
        if c.must_fail:
            silent.append((c.kind, c.what))
    assert crashes == []
    assert silent == []
    assert bad_messages == []


def _sample(kinds: set[str], every: int) -> list[Case]:
    chosen = [c for c in CORPUS if c.kind in kinds and c.must_fail]
    return chosen[::every]


def test_a_sample_through_the_real_validate_process(tmp_path, cli):
    """Folder kinds: many bad files in one brain, all named on the command line of one process."""
    root = tmp_path / "corpus-brain"
    write(root, "nika-brain.yml", "version: 1\n")
    cases = _sample({"workflow", "claim", "lock", "gate", "breaker", "run", "card"}, 3)
    rels = []
    for n, c in enumerate(cases):
        folder, name = c.rel.split("/")
        stem, dot, ext = name.rpartition(".")
        rel = f"{folder}/{stem}-{n:04d}.{ext}"
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(c.data)
        rels.append(rel)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    proc = cli("validate", *rels, cwd=root)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(rels) >= 100
    for rel, line in zip(rels, lines):
        assert line.startswith(rel + ":"), (rel, line)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # nothing written


@pytest.mark.parametrize("kind", ["config", "zones"])
def test_a_sample_of_single_file_kinds_through_the_real_process(tmp_path, cli, kind):
    """nika-brain.yml and brain/KERNEL.md have one place per brain: one brain per case."""
    cases = _sample({kind}, 9)
    assert len(cases) >= 5
    for n, c in enumerate(cases):
        root = tmp_path / f"{kind}-{n}"
        if kind != "config":
            write(root, "nika-brain.yml", "version: 1\n")
        (root / c.rel).parent.mkdir(parents=True, exist_ok=True)
        (root / c.rel).write_bytes(c.data)
        proc = cli("validate", cwd=root)
        assert proc.returncode == 1, (c.what, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stdout + proc.stderr
        assert proc.stdout.splitlines()[0].startswith(c.rel + ":"), (c.what, proc.stdout)
