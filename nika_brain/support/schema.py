"""One small declarative checker shared by every YAML kind's loader.

Loaders describe their keys with `F`, call `fields()` and build a frozen dataclass from the result;
every problem is raised as a BrainError naming file, line and key.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

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
