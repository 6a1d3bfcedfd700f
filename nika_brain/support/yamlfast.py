"""A fast reader for the plain YAML that brain files hold, exact or silent.

`parse(text)` gives (data, lines) for a document inside a small subset of YAML (block mappings and
sequences, one-line scalars, flow sequences of simple words and quoted scalars, comment lines),
exactly what `yamlsafe.loads` gives for it: the same data, the same key lines. Anything else (a
multi-line scalar, an escape other than `\\"` and `\\\\`, a tag, an anchor, a number other than a plain
decimal, a duplicate key, a tab, a character YAML handles specially...) gives None, and the caller
runs the full loader, which also gives the error messages. No PyYAML here: the hooks read their
small YAML files (brain/KERNEL.md's `paths: ["."]`, a `satellite_command` list of quoted words)
without importing it.

tests/support/test_yamlfast.py holds `parse` to the full loader on generated and hand-made documents.
"""
from __future__ import annotations

import re
from typing import Any

_BOOL = {w: True for w in ("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")}
_BOOL.update({w: False for w in ("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")})
_NULL = frozenset(("null", "Null", "NULL", "~"))
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")
_NUMERIC = frozenset("-+0123456789.")
_RESOLVED = frozenset("yYnNtTfFoO<=~")      # first letters of YAML 1.1's bool, null, merge and value
RESOLVED_FIRST = _RESOLVED | _NUMERIC        # a plain scalar starting otherwise is a string
_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)\Z")
# Printable for YAML, and no line break of its own (NEL, LS, PS), no BOM, no tab: anything else is the
# full loader's business. (ASCII lines, nearly all, need no test of their own: printable ASCII is
# 0x20-0x7e.) The ranges of code points kept, checked per distinct character: a regex of these Unicode
# ranges costs ~10-20 ms to compile, more than a cold hook's whole YAML reading.
_PLAIN_RANGES = ((0x20, 0x7e), (0xa0, 0x2027), (0x202a, 0xd7ff), (0xe000, 0xfefe), (0xff00, 0xfffd),
                 (0x10000, 0x10ffff))


def _odd(text: str) -> bool:
    """Whether the text (its line breaks taken out) holds a character outside the plain printable set."""
    if text.isascii():
        return not text.isprintable()
    for ch in set(text):
        o = ord(ch)
        if not any(lo <= o <= hi for lo, hi in _PLAIN_RANGES):
            return True
    return False


_KEYLINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*):(?: +(.*))?\Z")
_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\Z")
MAX_DEPTH = 30     # below yamlsafe's own limits: near them, the full loader decides
MAX_TEXT = 100_000  # characters; a document has fewer nodes than characters, so fewer than yamlsafe allows


class _No(Exception):
    """Outside the subset."""


def _plain(v: str) -> Any:
    """A plain scalar's value, by YAML 1.1's implicit types (as PyYAML resolves them)."""
    c = v[0]
    if c in _NUMERIC:
        if _INT.match(v):
            return int(v)
        raise _No
    if c in _RESOLVED:
        if v in _BOOL:
            return _BOOL[v]
        if v in _NULL:
            return None
        if c in "<=~":
            raise _No
    return v


def _double(inner: str) -> str:
    """The text of a one-line double-quoted scalar from between its quotes: of the escapes, only
    `\\"` and `\\\\` are read here (any other is the full loader's), and no bare quote."""
    if "\\" not in inner:
        if '"' in inner:
            raise _No
        return inner
    out, i, n = [], 0, len(inner)
    while i < n:
        ch = inner[i]
        if ch == "\\":
            if i + 1 == n or inner[i + 1] not in '"\\':
                raise _No
            ch = inner[i + 1]
            i += 1
        elif ch == '"':
            raise _No
        out.append(ch)
        i += 1
    return "".join(out)


def _flow_items(inner: str) -> list[tuple[str, bool]]:
    """The items of a one-line flow sequence's inside, each (text, quoted): simple words, and
    single- or double-quoted scalars (which may hold commas, colons and brackets); anything else
    (an empty item, a trailing comma, a nested collection, a key) declines."""
    out: list[tuple[str, bool]] = []
    i, n = 0, len(inner)
    while True:
        while i < n and inner[i] == " ":
            i += 1
        if i == n:
            if out:
                raise _No   # `[a, ]`: a trailing comma (fine for YAML, not worth a rule here)
            return out
        c = inner[i]
        if c == '"':
            j = i + 1
            while j < n and inner[j] != '"':
                j += 2 if inner[j] == "\\" else 1
            if j >= n:
                raise _No
            out.append((_double(inner[i + 1:j]), True))
            i = j + 1
        elif c == "'":
            j = i + 1
            while j < n and (inner[j] != "'" or inner[j + 1:j + 2] == "'"):
                j += 2 if inner[j] == "'" else 1
            if j >= n:
                raise _No
            out.append((inner[i + 1:j].replace("''", "'"), True))
            i = j + 1
        else:
            j = inner.find(",", i)
            j = n if j < 0 else j
            word = inner[i:j].rstrip(" ")
            if not _WORD.match(word):
                raise _No
            out.append((word, False))
            i = j
        while i < n and inner[i] == " ":
            i += 1
        if i == n:
            return out
        if inner[i] != ",":
            raise _No
        i += 1


def _scalar(v: str, line: int, path: tuple, lines: dict) -> Any:
    """The value written after `key: ` or `- ` (never empty, no trailing space)."""
    c = v[0]
    if c == "'":
        inner = v[1:-1]
        if len(v) < 2 or v[-1] != "'" or "'" in inner.replace("''", ""):
            raise _No
        return inner.replace("''", "'")
    if c == '"':
        if len(v) < 2 or v[-1] != '"':
            raise _No
        return _double(v[1:-1])
    if c == "[":
        if v[-1] != "]":
            raise _No
        out = []
        for i, (item, quoted) in enumerate(_flow_items(v[1:-1])):
            out.append(item if quoted else _plain(item))
            lines.setdefault(path + (i,), line)
        return out
    if v == "{}":
        return {}
    if c in _INDICATORS or ": " in v or " #" in v or v[-1] == ":":
        raise _No
    return _plain(v)


def parse(text: str) -> tuple[Any, dict] | None:
    """(data, {key path: line}) as `yamlsafe.loads` would give them, or None outside the subset."""
    if len(text) > MAX_TEXT or _odd(text.replace("\n", "")):
        return None
    rows: list[tuple[int, str, int]] = []   # (indent, content, line number)
    number = 0
    for raw in text.split("\n"):
        number += 1
        content = raw.lstrip(" ")
        if not content:
            if raw:
                return None  # a line of spaces only: fine for YAML, not worth a rule here
            continue
        if content[0] == "#":
            continue  # a comment line
        if raw[-1] == " ":
            return None
        rows.append((len(raw) - len(content), content, number))
    if not rows or rows[0][0] != 0 or rows[0][1] in ("---", "..."):
        return None
    lines: dict[tuple, int] = {(): rows[0][2]}
    state = [0]   # the next row
    try:
        data = _block(rows, state, 0, (), lines, 0)
    except (_No, RecursionError):
        return None
    if state[0] != len(rows):
        return None
    return data, lines


def _block(rows: list, state: list, indent: int, path: tuple, lines: dict, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise _No
    content = rows[state[0]][1]
    if content == "-" or content.startswith("- "):
        return _sequence(rows, state, indent, path, lines, depth)
    return _mapping(rows, state, indent, path, lines, depth, None)


def _mapping(rows: list, state: list, indent: int, path: tuple, lines: dict, depth: int,
             first: str | None) -> dict:
    """A block mapping at `indent`; `first`: its first line's content when it follows a `- `."""
    out: dict[str, Any] = {}
    match = _KEYLINE.match
    n = len(rows)
    while state[0] < n:
        at, content, number = rows[state[0]]
        if first is not None:
            content, first = first, None
        elif at != indent:
            if at > indent:
                raise _No
            break
        elif content[0] == "-" and (len(content) == 1 or content[1] == " "):
            break  # the sequence this mapping is an item of goes on
        m = match(content)
        if m is None:
            raise _No
        key, value = m.group(1, 2)
        if key in out or key in _BOOL or key in _NULL:
            raise _No
        here = path + (key,)
        lines[here] = number
        state[0] += 1
        if value is not None:
            out[key] = _scalar(value, number, here, lines)
            continue
        if state[0] < n:
            nxt_at, nxt = rows[state[0]][0], rows[state[0]][1]
            if nxt_at > indent:
                out[key] = _block(rows, state, nxt_at, here, lines, depth + 1)
                continue
            if nxt_at == indent and (nxt == "-" or nxt.startswith("- ")):
                out[key] = _sequence(rows, state, indent, here, lines, depth + 1)  # indentless
                continue
        out[key] = None  # `key:` and nothing: null
    return out


def _sequence(rows: list, state: list, indent: int, path: tuple, lines: dict, depth: int) -> list:
    out: list[Any] = []
    while state[0] < len(rows):
        at, content, number = rows[state[0]]
        if at != indent:
            if at > indent:
                raise _No
            break
        if not content.startswith("- "):
            break
        item = content[2:]
        if not item or item[0] == " ":
            raise _No
        here = path + (len(out),)
        lines.setdefault(here, number)
        if _KEYLINE.match(item):
            out.append(_mapping(rows, state, indent + 2, here, lines, depth + 1, item))
            continue
        state[0] += 1
        out.append(_scalar(item, number, here, lines))
    return out
