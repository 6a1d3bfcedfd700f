"""One small declarative checker shared by every YAML kind's loader.

Loaders describe their keys with `F`, call `fields()` and build a frozen dataclass from the result;
every problem is raised as a BrainError naming file, line and key.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from nika_brain.errors import Invalid
from nika_brain.support.yamlsafe import Doc

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class F:
    types: type | tuple = str
    required: bool = False
    default: Any = None
    choices: tuple | None = None
    check: Callable[[Any], str | None] | None = None  # returns an error message or None


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true/false",
               list: "a list", dict: "a mapping", type(None): "null"}


def _type_ok(value: Any, types: tuple) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False  # YAML 'yes' must not pass as an integer
    if isinstance(value, int) and not isinstance(value, bool) and float in types:
        return True
    return isinstance(value, types)


def fields(doc: Doc, data: Any, path: tuple, spec: dict[str, F], *, allow_extra: bool = False) -> dict:
    if not isinstance(data, dict):
        raise doc.error(f"expected a mapping, got {type(data).__name__ if data is not None else 'nothing'}",
                        *path)
    if not allow_extra:
        for key in data:
            if key not in spec:
                raise doc.error(f"unknown key (expected one of: {', '.join(spec)})", *path, key)
    out: dict[str, Any] = {}
    for key, f in spec.items():
        if key not in data or data[key] is None:
            if f.required:
                raise doc.error("missing required key", *path, key)
            out[key] = f.default
            continue
        value = data[key]
        types = f.types if isinstance(f.types, tuple) else (f.types,)
        if not _type_ok(value, types):
            names = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
            raise doc.error(f"expected {names}, got {type(value).__name__}", *path, key)
        if f.choices is not None and value not in f.choices:
            raise doc.error(f"must be one of {', '.join(map(str, f.choices))}; got {value!r}", *path, key)
        if f.check is not None:
            msg = f.check(value)
            if msg:
                raise doc.error(msg, *path, key)
        out[key] = value
    return out


def str_list(value: Any) -> str | None:
    if not all(isinstance(v, str) for v in value):
        return "expected a list of strings"
    return None


def name(value: Any) -> str | None:
    if not _NAME.fullmatch(str(value)):
        return "must be letters, digits, '.', '_' or '-' (at most 100)"
    return None


# ---- step ids -----------------------------------------------------------------------------------
# A step id is text, everywhere (Step.id, Claim.step, Gate.step, Run.cursor, the CLI): workflows name
# steps `1`, `2`, `review`, and the id ends up in claim file names and in triggers (`<workflow>/<id>`),
# so text is the one type that covers every case without a lossy int()/str() round trip. YAML may
# write it as a non-negative integer (`step: 2`); it is read as its decimal text. ASCII only: "²"
# passes str.isdigit() but no int() wants it, and a file name should not depend on Unicode folding.
MAX_STEP = 10**18   # one bound for a numeric step id, as YAML integer and as text
_STEP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)


def step_id_error(value: Any) -> str | None:
    """Why `value` is not a step id, or None when it is one (the check of every loader)."""
    if isinstance(value, bool):
        return "a step id must be a number or a name, not true/false"
    if isinstance(value, int):
        return None if 0 <= value < MAX_STEP else "a step id number must be between 0 and 10^18"
    if isinstance(value, str) and _STEP_ID.fullmatch(value):
        if value.isdigit() and len(value) > 1 and not value.startswith("0") and int(value) >= MAX_STEP:
            # Written back as a YAML integer (step_id_yaml): one bound for every writer and reader.
            return "a step id number must be between 0 and 10^18"
        return None
    return ("a step id must be ASCII letters, digits, '.', '_' or '-' "
            "(at most 64, starting with a letter or digit)")


def step_id(value: Any) -> str:
    """The canonical text of a step id (an int becomes its decimal text); Invalid otherwise."""
    msg = step_id_error(value)
    if msg:
        raise Invalid(f"{msg}: {str(value)[:80]!r}")
    return str(value)


def step_id_yaml(sid: str | None) -> int | str | None:
    """How a step id is written to YAML: a decimal id as an integer (`step: 2`), a name as text."""
    if sid is not None and sid.isascii() and sid.isdigit() and (sid == "0" or not sid.startswith("0")):
        return int(sid)
    return sid


# ---- ranges of arguments --------------------------------------------------------------------------
MAX_NAME = 255      # owners, claim ids, workflow names given on a command line
MAX_TTL = 100 * 365 * 86400.0   # a century: "forever" in practice; beyond it, a typo
MAX_WAIT = 7 * 86400.0
MAX_PID = 2**22     # Linux pid_max ceiling


def in_range(value: Any, what: str, lo: float, hi: float, *, lo_open: bool = False) -> Any:
    """`value` if it is a finite number within [lo, hi] (or (lo, hi]); Invalid otherwise."""
    import math
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and isinstance(value, float):
        ok = math.isfinite(value)
    if ok:
        try:
            ok = (lo < value if lo_open else lo <= value) and value <= hi
        except OverflowError:
            ok = False
    if not ok:
        shown = str(value)
        shown = shown if len(shown) <= 30 else shown[:27] + "..."
        def fmt(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else f"{x:g}"
        bound = f"above {fmt(lo)}" if lo_open else f"at least {fmt(lo)}"
        raise Invalid(f"{what} must be a number {bound} and at most {fmt(hi)}, not {shown}")
    return value


def short_text(value: str, what: str, limit: int = MAX_NAME) -> str:
    """`value` if it is non-empty, single-line text of at most `limit` characters; Invalid otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"{what} must not be empty")
    if len(value) > limit:
        raise Invalid(f"{what} is too long ({len(value)} characters, at most {limit})")
    if "\n" in value or "\r" in value or "\0" in value:
        raise Invalid(f"{what} must be one line of text")
    return value
