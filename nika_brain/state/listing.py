"""Lenient listing for the commands that show a folder of records (`lock|claim|gate list`).

The writers' guards stay strict (an unreadable lock makes an acquire fail closed, via
`Brain.load_all`); a listing instead shows every valid record and names each invalid one, so one
bad file does not hide all the others. The CLI exits 1 for invalid records only with --strict.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from nika_brain.brain import Brain
from nika_brain.errors import BrainError

T = TypeVar("T")


def load_each(brain: Brain, folder: Path, loader: Callable[[Path], T]) -> tuple[list[T], list[BrainError]]:
    """(valid records, one error per invalid file), in file-name order; vanished files are skipped."""
    good: list[T] = []
    bad: list[BrainError] = []
    for path in brain.iter_yaml(folder):
        try:
            good.append(loader(path))
        except BrainError as exc:
            if path.exists():
                if not exc.file:
                    exc.file = brain.rel(path) or str(path)
                bad.append(exc)
        except OSError as exc:  # unreadable (permissions, a folder named *.yml)
            bad.append(BrainError(exc.strerror or "cannot read", file=brain.rel(path) or str(path)))
    return good, bad
