"""The lock index's lookups (issue 25 §1: a mutant of the ancestor or the descendant lookup was
caught only by the campaign's property test): a lock on a folder stands in the way of everything
under it, a lock under a folder stands in the way of the folder, in file and folder form, at any
depth, with the index built once and then kept up to date by the writers, and from a cold rebuild."""
from __future__ import annotations

import pytest

from nika_brain.errors import Busy
from nika_brain.state import locks

HELD_WANTED_BUSY = [
    ("src/", "src/a/b.py", True),        # parent held
    ("src/a/", "src/a/b/c/d.py", True),  # grandparent held
    ("src", "src/a.py", True),           # parent in file form
    ("src/a/b.py", "src/", True),        # child held
    ("src/a/b/c.py", "src/", True),      # grandchild held
    ("src/a/b/", "src/a", True),         # child folder, wanted in file form
    ("src/a.py", "src/a.py", True),      # the same
    ("src/ab/", "src/a/", False),        # a sibling sharing a prefix
    ("src/a/", "src/ab.py", False),
    ("docs/", "src/", False),
]


@pytest.mark.parametrize("cold", [False, True], ids=["kept-index", "rebuilt-index"])
@pytest.mark.parametrize("held, wanted, busy", HELD_WANTED_BUSY)
def test_overlap_through_the_index(brain, held, wanted, busy, cold):
    for i in range(5):   # other locks, so the lookup has to find the right line
        locks.acquire(brain, f"other/{i}/", "sess-x", pid=None)
    locks.acquire(brain, held, "sess-a", pid=None)
    if cold:
        (brain.state_dir / "locks.index").unlink()
    found = {lk.scope for lk in locks.overlapping(brain, wanted)}
    assert (held in found or locks.normalize_scope(held) in found) is busy
    if busy:
        with pytest.raises(Busy):
            locks.acquire(brain, wanted, "sess-b", pid=None, wait=0)
    else:
        assert locks.acquire(brain, wanted, "sess-b", pid=None).owner == "sess-b"
