"""support/yamlfast.py against the full loader: wherever the fast reader answers, it answers what
yamlsafe's PyYAML path gives (data, types and key lines); everywhere else it declines."""
from __future__ import annotations

import random

import pytest

from nika_brain.support import yamlfast, yamlsafe


def full(text: str) -> tuple:
    """The PyYAML path of yamlsafe.loads, the fast reader switched off."""
    real = yamlfast.parse
    yamlfast.parse = lambda _text: None  # type: ignore[assignment]
    try:
        doc = yamlsafe.loads(text)
    finally:
        yamlfast.parse = real  # type: ignore[assignment]
    return doc.data, doc.lines


def typed(value):
    """The value with every scalar's type next to it (True == 1 and 1 == 1.0 in plain equality)."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


def same_or_declined(text: str) -> bool:
    """True when the fast reader answered (and then it must agree with the full loader)."""
    fast = yamlfast.parse(text)
    if fast is None:
        return False
    try:
        data, lines = full(text)
    except Exception as exc:  # noqa: BLE001 (any refusal of the full loader)
        raise AssertionError(f"the fast reader accepted what the full loader refuses: {exc}\n{text}") from exc
    assert typed(fast[0]) == typed(data), text
    assert fast[1] == lines, text
    return True


SCALARS = ["plain", "two words", "a  b", "x [y] {z}", "a, b", "http://x.y/z", "a#b", "a - b", "é ü 中文 😀",
           "yes", "No", "on", "OFF", "true", "null", "Null", "~", "y", "n", "nullx", "tru", "", " lead",
           "trail ", "a: b", "a #b", "ends:", ":start", "-dash", "- dash", "?q", "!tag", "&a", "*a", "%p",
           "@at", "`bt", "'q'", '"dq"', "it's", 'say "hi"', "back\\slash", "tab\there", "line\nbreak",
           "0", "7", "-3", "+4", "01", "0x1f", "0o7", "1_000", "1:30", "1.5", ".5", "1e3", ".inf", ".nan",
           "2026-03-01", "2026-03-01T10:00:00Z", "12:30:00", "<<", "=", "[", "]", "{", "}", "[a]", "{a: 1}",
           "src/", "./src", ".", "..", "-", "a\u2028b", "a\x85b", "\ufeffbom", "a\x7fb", "a\u00a0b"]


KEYS = ["id", "status", "on", "yes", "a-b", "k_1", "x.y", "1", "null"]


def random_value(rng: random.Random, depth: int = 0, scalars: list = SCALARS, keys: list = KEYS):
    r = rng.random()
    if depth < 3 and r < 0.15:
        return {rng.choice(keys) + str(rng.randint(0, 3)): random_value(rng, depth + 1, scalars, keys)
                for _ in range(rng.randint(0, 4))}
    if depth < 3 and r < 0.3:
        return [random_value(rng, depth + 1, scalars, keys) for _ in range(rng.randint(0, 4))]
    if r < 0.4:
        return rng.choice([None, True, False, 0, 1, -7, 10**20, 1.5, -0.0])
    return rng.choice(scalars)


def test_generated_documents_read_the_same_or_are_declined():
    rng = random.Random(25)
    answered = 0
    for _ in range(3000):
        doc = {f"k{i}": random_value(rng) for i in range(rng.randint(1, 6))}
        answered += same_or_declined(yamlsafe.dumps(doc))
    assert answered > 1000  # the fast reader does answer the common shapes


HAND = [
    "a: 1\nb: [x, y/, 2, yes, null]\nc:\n- one\n- two\nd:\n  e: f\n  g:\n    h: i\n",
    "# a comment\n\nversion: 1\n# another\nlock_ttl: 1800\n",
    "zones:\n  - name: state\n    level: tool-only\n    paths: [claims/, locks/, gates/]\n  - name: kernel\n"
    "    level: protected\n    paths: [brain/, agents/]\n",
    "- a\n- b: 1\n  c: 2\n- [x]\n- {}\n- []\n",
    "a:\nb: 2\n",
    "a:   spaced\n",
    "a: 'it''s'\nb: ''''\nc: 'a'''\nd: \"plain dq\"\n",
    "a: [ ]\nb: [a , b]\n",
    "key: value # comment\n",
    "a: 1\n  b: 2\n",
    "a: abc\n  def\n",
    "a: 1\na: 2\n",
    "a: &x 1\nb: *x\n",
    "on: 1\n",
    "a: |\n  text\n",
    "a: >\n  text\n",
    "a: 'multi\n  line'\n",
    "a: \"esc\\n\"\n",
    "---\na: 1\n",
    "a: 1\n...\n",
    "  a: 1\n",
    "a:\n  - x\n  - y\nb: 1\n",
    "a:\n- x\n  - y\n",
    "a:\n  b: 1\n c: 2\n",
    "a: [x, [y]]\n",
    "a: [x, {y: 1}]\n",
    "a: [x,]\n",
    "a: [x, 'y']\n",
    "a:x\n",
    "a: b\r\nc: d\r\n",
    "a: b \n",
    "   \na: 1\n",
    "\ta: 1\n",
    "a: 1\n\n\n",
    "",
    "# only a comment\n",
    "just a scalar\n",
    "- - nested\n",
    "-  two spaces\n",
    "-\n  a: 1\n",
    "a: !!str 1\n",
    "a: !!int '1'\n",
    "? complex\n: key\n",
    "<<: {a: 1}\n",
    "a: b: c\n",
    "a: 2026-03-01\n",
    "a: -1\nb: +1\nc: -0\n",
    'a: ["."]\nb: [".", x, \'y z\']\n',
    'c: ["/usr/bin/python3", "-c", "print(\'{{\\"status\\": \\"ok\\"}}\')"]\n',
    'a: "say \\"hi\\""\nb: "back\\\\slash"\nc: "\\\\"\nd: "a\\\\\\"b"\n',
    'a: "tab\\there"\n', 'a: "\\x41"\n', 'a: "\\u00e9"\n', 'a: "open\\"\n', 'a: ["open\\"]\n',
    'a: ["a", ]\n', 'a: ["a" "b"]\n', 'a: ["a"b]\n', 'a: ["k": 1]\n', "a: ['it''s', 'a,b']\n", "a: ['x]\n",
    'a: [" lead", "trail ", "", \'\']\n', 'a: ["#c", "x: y", "[z]", "{w}", "a,b"]\n',
] + [f"a: {v}\nb: [{v}]\n" for v in ("01", "0o7", "0b1", "0x1f", "1_000", "1:30", "1.5", "1e3", "00", "+0", "08",
                                      "190:20:30", "2026-03-01", "yes", "Yes", "nO", "oN", "NULL", "nuLL", "~")]


@pytest.mark.parametrize("text", HAND, ids=range(len(HAND)))
def test_hand_written_documents_read_the_same_or_are_declined(text):
    try:
        full(text)
    except Exception:  # noqa: BLE001 (the full loader refuses it: so must the fast reader)
        assert yamlfast.parse(text) is None
        return
    same_or_declined(text)


def test_the_common_brain_shapes_are_answered_without_pyyaml():
    for text in HAND[:4]:
        assert yamlfast.parse(text) is not None, text
    # `nika-brain init`'s KERNEL.md zones and a satellite command of quoted words (the hooks read both)
    kernel = 'zones:\n  - name: project\n    level: open\n    paths: ["."]\n'
    assert yamlfast.parse(kernel) == ({"zones": [{"name": "project", "level": "open", "paths": ["."]}]},
                                      full(kernel)[1])
    command = 'satellite_command: ["/bin/py", "-c", "print(\'{{\\"status\\": \\"ok\\"}}\')"]\n'
    assert same_or_declined(command)
    assert yamlfast.parse(command)[0] == {"satellite_command": ["/bin/py", "-c", 'print(\'{{"status": "ok"}}\')']}


FLOW_ITEMS = ["a", "b/c", "1", "yes", "null", "~", "x y", "a,b", "a, b", "k: v", "#h", "[i]", "{j}", "it's", 'say "hi"',
              "back\\slash", "\\", '"', "", " ", " lead", "trail ", "é", "tab\there", "a\nb"]


def _flow_form(rng: random.Random, item: str) -> str:
    """One way of writing `item` in a flow sequence: plain, single- or double-quoted (escaped or not)."""
    form = rng.randrange(4)
    if form == 0:
        return item
    if form == 1:
        return "'" + item.replace("'", "''") + "'"
    if form == 2:
        return '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return '"' + item.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t").replace("\n", "\\n") + '"'


def test_generated_flow_sequences_of_quoted_items_read_the_same_or_are_declined():
    rng = random.Random(26)
    answered = 0
    for _ in range(3000):
        items = [_flow_form(rng, rng.choice(FLOW_ITEMS)) for _ in range(rng.randint(0, 4))]
        sep = rng.choice([", ", ",", " , "])
        text = f"k: [{rng.choice(['', ' '])}{sep.join(items)}{rng.choice(['', ' ', ','])}]\n"
        try:
            full(text)
        except Exception:  # noqa: BLE001 (the full loader refuses it: so must the fast reader)
            assert yamlfast.parse(text) is None, text
            continue
        answered += same_or_declined(text)
    assert answered > 1000


def test_a_deep_or_huge_document_is_left_to_the_full_loader():
    deep = "".join(f"{'  ' * i}k{i}:\n" for i in range(40)) + f"{'  ' * 40}x: 1\n"
    assert yamlfast.parse(deep) is None
    wide = "".join(f"k{i}: {i}\n" for i in range(yamlfast.MAX_TEXT // 5))
    assert len(wide) > yamlfast.MAX_TEXT and yamlfast.parse(wide) is None
