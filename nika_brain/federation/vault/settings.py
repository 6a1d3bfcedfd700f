"""The vault's settings: the `vault:` mapping under `federation:` in nika-brain.yml.

    federation:
      vault:
        dedup_threshold: 0.95      # a chunk more similar than this to one of its kernel's is dropped
        merge_threshold: 0.92      # near-duplicates at least this similar may merge into a super-chunk
                                   # (e5-small: paraphrases ~0.97, unrelated notes ~0.80-0.88)
        merge_min: 3               # ... when their group (counting dropped duplicates) is this large
        superchunk_command: []     # argv of a command that summarises a group (stdin: texts); empty = extractive
        chunk_chars: 1200          # target chunk size in characters
        batch: 64                  # chunks embedded per call
        max_file_mb: 20            # larger files are refused, one line each
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nika_brain.errors import Invalid

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain


@dataclass(frozen=True)
class VaultSettings:
    dedup_threshold: float = 0.95
    merge_threshold: float = 0.92
    merge_min: int = 3
    superchunk_command: tuple[str, ...] = ()
    chunk_chars: int = 1200
    batch: int = 64
    max_file_mb: float = 20.0


def _bad(key: str, msg: str) -> Invalid:
    return Invalid(msg, file="nika-brain.yml", key=f"federation.vault.{key}")


def _num(raw: dict, key: str, default: float, lo: float, hi: float, *, integer: bool = False) -> Any:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise _bad(key, f"expected {'an integer' if integer else 'a number'}, got {value!r}")
    if not lo <= value <= hi:
        raise _bad(key, f"must be between {lo:g} and {hi:g}, got {value!r}")
    return value


def load(brain: Brain) -> VaultSettings:
    fed = dict(getattr(brain.config, "federation", None) or {})
    raw = fed.get("vault") or {}
    if not isinstance(raw, dict):
        raise Invalid("expected a mapping", file="nika-brain.yml", key="federation.vault")
    known = set(VaultSettings.__dataclass_fields__)
    for key in raw:
        if key not in known:
            raise _bad(str(key), f"unknown key (expected one of: {', '.join(sorted(known))})")
    cmd = raw.get("superchunk_command") or []
    if isinstance(cmd, str):
        cmd = [cmd]
    if not isinstance(cmd, list) or not all(isinstance(c, str) for c in cmd):
        raise _bad("superchunk_command", "expected a list of strings (a command's argv)")
    return VaultSettings(
        dedup_threshold=float(_num(raw, "dedup_threshold", 0.95, 0.0, 1.0)),
        merge_threshold=float(_num(raw, "merge_threshold", 0.92, 0.0, 1.0)),
        merge_min=int(_num(raw, "merge_min", 3, 2, 10_000, integer=True)),
        superchunk_command=tuple(cmd),
        chunk_chars=int(_num(raw, "chunk_chars", 1200, 100, 100_000, integer=True)),
        batch=int(_num(raw, "batch", 64, 1, 4096, integer=True)),
        max_file_mb=float(_num(raw, "max_file_mb", 20.0, 0.001, 10_000)),
    )
