"""Scopes: the brain-relative paths, folders and globs that locks, claims, zones and breakers cover.

A scope covers itself and everything below it (`src` and `src/` cover `src/a.py`); '.' is the whole
brain. Pure string arithmetic: no file is read.
"""
from __future__ import annotations

import fnmatch
import re

from nika_brain.errors import BrainError, InvalidScope

_WILD = re.compile(r"[*?\[]")
MAX_SCOPE = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")   # never in a scope (one line in every listing)


def normalize_scope(scope: str) -> str:
    """Brain-relative posix form; a folder keeps its trailing '/'; '.' or '' is the whole brain."""
    s = str(scope).strip().replace("\\", "/")
    if len(s) > MAX_SCOPE or _CONTROL.search(s):
        shown = s[:60] + ("..." if len(s) > 60 else "")
        raise InvalidScope(f"scope must be one line of at most {MAX_SCOPE} characters, got {shown!r}")
    if not s or s in (".", "./", "/"):
        return "."
    if s.startswith("/") or s.startswith("../") or "/../" in s or s == "..":
        raise InvalidScope(f"scope must be a path inside the brain, got {scope!r}")
    folder = s.endswith("/")
    parts = [p for p in s.split("/") if p not in ("", ".")]
    if not parts:
        return "."
    return "/".join(parts) + ("/" if folder else "")


def check_scope(value: str) -> str | None:
    """Schema check: the error message for a bad scope, None for a good one."""
    try:
        normalize_scope(value)
    except BrainError as exc:
        return exc.message
    return None


def _segments(scope: str) -> list[str]:
    return [] if scope == "." else [p for p in scope.split("/") if p]


def scopes_overlap(a: str, b: str) -> bool:
    """True when some path could fall under both scopes.

    A scope covers itself and everything below it (`src` and `src/` cover `src/a.py`). Globs are
    compared segment by segment; where two wildcards meet we assume an overlap (safe side).
    """
    return _segments_overlap(_segments(normalize_scope(a)), _segments(normalize_scope(b)))


def overlap_test(scopes):
    """A function of `others` giving the scopes (as given) that overlap one of them: `scopes_overlap`
    with these scopes normalized once (a preflight asks it of every open claim)."""
    mine = [(s, _segments(normalize_scope(s))) for s in scopes]

    def overlapping(others) -> list[str]:
        theirs = [_segments(normalize_scope(o)) for o in others]
        return [s for s, sa in mine if any(_segments_overlap(sa, sb) for sb in theirs)]
    return overlapping


def _segments_overlap(sa: list[str], sb: list[str]) -> bool:
    for x, y in zip(sa, sb):
        if x == "**" or y == "**":
            return True
        wx, wy = bool(_WILD.search(x)), bool(_WILD.search(y))
        if not wx and not wy:
            if x != y:
                return False
        elif wx and not wy:
            if not fnmatch.fnmatchcase(y, x):
                return False
        elif wy and not wx:
            if not fnmatch.fnmatchcase(x, y):
                return False
    return True  # one ran out: it is an ancestor (or equal) of the other


def covers(scope: str, path: str) -> bool:
    """True when a concrete brain-relative `path` lies inside `scope`."""
    return (len(_segments(normalize_scope(scope))) <= len(_segments(normalize_scope(path)))
            and scopes_overlap(scope, path))


def scope_slug(scope: str) -> str:
    """A file-name-safe form of a normalized scope. Never starts with '.': listings skip dot files
    (temporary files), and a lock nobody lists is a lock nobody respects."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", scope).strip("._-")[:60] or "root"
