"""The index's fast path for a claim file: its summary straight from the text, or None.

A cold `nika-brain index` at 10,000 claims spent most of its time on each claim's generic YAML read
(yamlfast), the generic validator (support/schema.fields) and a frozen Claim whose summary keeps 9 of
its 22 fields. Nearly every claim file is the text `claims._save` writes (`dumps(to_dict(claim))`):
the same keys in the same order, one line each. `claim_summary` recognizes that shape with one regular
expression, checks each value as `claims.load_path` checks it, and gives the summary
`index._claim_summary` would give for the loaded claim.

Exact or silent: it answers only for a document that yamlfast reads (so the full YAML loader too) to
the same data, that `claims.load_path` accepts, and whose summary is the same; anything else (another
key order, a quoted or multi-line value, a value of another type, an invalid time or scope, a
`failed_tests` block...) gives None, and the caller takes the full path, which also gives the errors
and their messages. tests/engine/test_indexfast.py holds it to the full path on generated claims,
valid and invalid, and on every one-line mutation of them.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from nika_brain.errors import BrainError
from nika_brain.state.claims import LEVELS, RESULT_STATUSES, SATELLITE_TYPES
from nika_brain.state.scopes import normalize_scope
from nika_brain.support import yamlfast
from nika_brain.support.schema import name as name_error
from nika_brain.support.schema import step_id_error

_V = r"([^\n]*)"                              # one line's value, read as yamlfast reads it
_LIST = r"((?:\n- [^\n]*)+)"                  # an indentless block list of one-line items
_TIME = r"'([1-9][0-9]{3}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{6})?Z)'"
_CLAIM = re.compile(
    rf"id: {_V}\nworkflow: {_V}\ntheme: {_V}\nstep: {_V}\nsatellite_type: {_V}\nsatellite_level: {_V}\n"
    rf"agent: {_V}\nscope:{_LIST}\nzone: {_V}\nstory_angle: {_V}\non_done: {_V}\non_partial: {_V}\n"
    rf"on_fail: {_V}\nstatus: (open|closed)\nopened: {_TIME}\nclosed: (?:null|{_TIME})\nparent: {_V}\n"
    rf"children:(?: \[\]|{_LIST})\nsession: {_V}\ntouched:(?: \[\]|{_LIST})\n"
    rf"result:(?: null|\n  status: {_V}\n  summary: {_V}\n  tests:\n    passed: {_V}\n    failed: {_V})\n")

_BAD = object()         # a value outside what this path reads
_MISS = object()
_VALUES: dict[str, Any] = {}   # raw text -> its value (_BAD when declined): pure, so remembered
_SCOPES: dict[str, Any] = {}   # raw scope -> its normalized form (_BAD when invalid)
_MAX_MEMO = 50_000
_MAX_TEXT = 100_000


def _value(raw: str) -> Any:
    """The value of a one-line scalar `key: raw` or `- raw`, as yamlfast reads it; _BAD when yamlfast
    would not read it as a scalar (an empty or spaced value, an odd character, a flow or quoted form
    it declines; `k: v` or `k:`, which would make a list item a mapping, _scalar declines too)."""
    v = _VALUES.get(raw, _BAD)
    if v is not _BAD or raw in _VALUES:
        return v
    v = _uncached(raw)
    if len(_VALUES) >= _MAX_MEMO:
        _VALUES.clear()
    _VALUES[raw] = v
    return v


# A word that starts with a letter or '_' is the string itself, unless YAML 1.1 reads it as a bool or
# null (yamlfast._scalar and _plain: no indicator, no ': ' or ' #', no number, no odd character).
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_RESERVED = frozenset(yamlfast._BOOL) | yamlfast._NULL


def _uncached(raw: str) -> Any:
    if _WORD.fullmatch(raw) and raw not in _RESERVED:
        return raw
    v: Any = _BAD
    if raw and raw[0] != " " and raw[-1] != " " and not yamlfast._odd(raw):
        try:
            v = yamlfast._scalar(raw, 0, (), {})
        except yamlfast._No:
            v = _BAD
        if not (v is None or isinstance(v, (str, int))):
            v = _BAD   # a list or mapping: never a value this path takes (mutable, not remembered)
    return v


_TEXTS: dict[str, Any] = {}    # raw text -> its value as a string-or-null field (_BAD: another type)


def _text(raw: str) -> Any:
    """A string-or-null field's value (None for null); _BAD for any other type."""
    v = _TEXTS.get(raw, _MISS)
    if v is _MISS:
        v = _value(raw)
        if v is not None and type(v) is not str:
            v = _BAD
        if len(_TEXTS) >= _MAX_MEMO:
            _TEXTS.clear()
        _TEXTS[raw] = v
    return v


def _items(block: str | None) -> list[str] | None:
    """The strings of a block list (`None`: written `[]`); None when an item is not a string."""
    if block is None:
        return []
    out = []
    for raw in block[3:].split("\n- "):
        v = _text(raw)
        if v is None or v is _BAD:
            return None
        out.append(v)
    return out


def _scope(raw: str) -> Any:
    s = _SCOPES.get(raw, _BAD)
    if s is _BAD:
        try:
            s = normalize_scope(raw)
        except BrainError:
            s = None
        if len(_SCOPES) >= _MAX_MEMO:
            _SCOPES.clear()
        _SCOPES[raw] = s
    return s


def _time(text: str) -> datetime | None:
    """The time of a canonical UTC text that `clock.iso` gives back unchanged; None otherwise."""
    if text.endswith(".000000Z"):
        return None   # iso() drops zero microseconds: the summary's text would differ
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))   # as clock.parse: UTC, by _TIME
    except ValueError:
        return None   # not a date (2026-02-30): load_path names it


def _int_or_none(raw: str) -> bool:
    v = _value(raw)
    return v is None or type(v) is int


# The groups of _CLAIM that hold a string-or-null field, in order: id, workflow, theme, satellite_type,
# satellite_level, agent, zone, story_angle, on_done, on_partial, on_fail, parent, session.
_TEXT_GROUPS = (0, 1, 2, 4, 5, 6, 8, 9, 10, 11, 12, 16, 18)


def claim_summary(text: str, stem: str) -> dict | None:
    """`index._claim_summary(claims.load_path(path))` for the claim file `<stem>.yml` holding `text`,
    when the text is in the shape `claims._save` writes and valid; None otherwise (the full path
    decides, and names any error)."""
    if len(text) > _MAX_TEXT:
        return None
    m = _CLAIM.fullmatch(text)
    if m is None:
        return None
    g = m.groups()
    if (_uncached(stem) if g[0] == stem else _text(g[0])) != stem:
        return None   # the id, read as a string (ids are unique: not remembered), is the file's name
    get = _TEXTS.get
    v = [stem]
    for i in _TEXT_GROUPS[1:]:
        raw = g[i]
        t = get(raw, _MISS)
        if t is _MISS:
            t = _text(raw)
        if t is _BAD:
            return None
        v.append(t)
    workflow, theme, sat_type, level, agent = v[1:6]
    if workflow is None or theme is None or sat_type not in SATELLITE_TYPES:
        return None
    if level is not None and level not in LEVELS:
        return None
    if agent is not None and name_error(agent) is not None:
        return None
    step = _value(g[3])
    if step is _BAD or step is None or step_id_error(step) is not None:
        return None
    if (g[17] is not None and _items(g[17]) is None) or (g[19] is not None and _items(g[19]) is None):
        return None   # children, touched: a list of strings
    scopes = []
    for raw in _items(g[7]) or [None]:
        s = None if raw is None else _scope(raw)
        if s is None:
            return None   # a scope load_path refuses (or not a string)
        scopes.append(s)
    status, opened, closed, r_status = g[13], g[14], g[15], g[20]
    result = None
    if r_status is not None:
        result = _text(r_status)
        if result not in RESULT_STATUSES or _text(g[21]) is _BAD:
            return None
        if not _int_or_none(g[22]) or not _int_or_none(g[23]):
            return None
    elif status == "closed":
        return None   # a closed claim needs a result
    t_opened = _time(opened)
    if t_opened is None:
        return None
    t_closed = None
    if closed is not None:
        t_closed = _time(closed)
        if t_closed is None:
            return None
    return {"id": stem, "workflow": workflow, "step": str(step), "scope": scopes,
            "status": status, "opened": opened, "closed": closed, "result": result,
            "newest": (t_closed or t_opened).timestamp()}
