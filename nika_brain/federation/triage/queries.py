"""Labelled prompt files (JSONL), read by `triage bench` (its QUERIES.jsonl and CAL.jsonl) and by
`triage calibrate --labelled`: one {"text": ..., "expected": <kernel_id> | null | [<kernel_id>, ...]} a line;
null is out of scope, a list of two or more is a hybrid prompt.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nika_brain.errors import BrainError, Invalid
from nika_brain.support import fsio


@dataclass(frozen=True)
class Query:
    text: str
    expected: tuple[str, ...] | None   # None: out of scope
    line: int


MAX_BYTES = 64 << 20


def read_queries(path: Path, known: set[str] | None = None) -> list[Query]:
    """Queries from a JSONL file; one clear error naming file, line and key."""
    path = Path(path)
    lines = fsio.read_text(path, limit=MAX_BYTES).splitlines()  # a regular file only: no FIFO, no /dev/zero
    out = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue

        def bad(msg: str, key: str | None = None, n: int = n) -> BrainError:
            return Invalid(msg, file=str(path), line=n, key=key)
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise bad(f"not JSON: {exc.msg}") from exc
        if not isinstance(obj, dict):
            raise bad("expected a JSON object {\"text\": ..., \"expected\": ...}")
        text = obj.get("text")
        if not isinstance(text, str) or not text.strip():
            raise bad("missing or empty text", "text")
        if "expected" not in obj:
            raise bad("missing (use null for out of scope)", "expected")
        exp = obj["expected"]
        if exp is None:
            expected = None
        elif isinstance(exp, str) and exp:
            expected = (exp,)
        elif isinstance(exp, list) and exp and all(isinstance(e, str) and e for e in exp):
            expected = tuple(dict.fromkeys(exp))
        else:
            raise bad("expected a kernel id, null or a list of kernel ids", "expected")
        if known is not None and expected:
            for e in expected:
                if e not in known:
                    raise bad(f"unknown kernel {e!r} (not in the routes)", "expected")
        out.append(Query(text, expected, n))
    return out
