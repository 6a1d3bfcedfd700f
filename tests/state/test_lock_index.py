"""The lock lookups by file name (issue 25 §1: a mutant of the ancestor or the descendant lookup was
caught only by the campaign's property test; issue 24 hole 5: no cache an agent can rewrite): a lock
on a folder stands in the way of everything under it, a lock under a folder stands in the way of the
folder, in file and folder form, at any depth, globs and odd names included, before and after the lock
files get new inodes (a clone)."""
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


@pytest.mark.parametrize("cold", [False, True], ids=["as-written", "new-inodes"])
@pytest.mark.parametrize("held, wanted, busy", HELD_WANTED_BUSY)
def test_overlap_through_the_index(brain, held, wanted, busy, cold):
    for i in range(5):   # other locks, so the lookup has to find the right line
        locks.acquire(brain, f"other/{i}/", "sess-x", pid=None)
    locks.acquire(brain, held, "sess-a", pid=None)
    if cold:   # as after a clone: every lock file a new inode, the folder a new mtime
        for p in sorted(brain.locks_dir.iterdir()):
            text = p.read_text()
            p.unlink()
            p.write_text(text)
    found = {lk.scope for lk in locks.overlapping(brain, wanted)}
    assert (held in found or locks.normalize_scope(held) in found) is busy
    if busy:
        with pytest.raises(Busy):
            locks.acquire(brain, wanted, "sess-b", pid=None, wait=0)
    else:
        assert locks.acquire(brain, wanted, "sess-b", pid=None).owner == "sess-b"


ODD_SCOPES = ["src/a b/c.py", "src/x./y", "src/x!/y", "-/f", "._/g", "...", "root", "root/x",
              "src/" + "l" * 70 + "/z.py", "src/" + "l" * 70 + "/", "src/*.py", "src/**/t.py", "*.md",
              "s?c/", "src-foo/x", "src_locked/a", "src/locked/", "."]
TARGETS = ["src/a b/c.py", "src/a b/", "src/x./y/z", "src/x!/y", "src/x!", "-/f", "-", "._/g/h", "...",
           "root/x/y", "src/" + "l" * 70 + "/z.py", "src/" + "l" * 70, "src/q.py", "src/d/t.py", "a.md",
           "sxc/q", "src-foo/x", "src/locked/b.py", "src/", "docs/r.md"]


def test_every_overlap_is_found_by_name_as_by_reading_every_lock(brain):
    for i, scope in enumerate(ODD_SCOPES):
        locks.acquire(brain, scope, f"sess-{i}", pid=None, mode="shared")
    every = locks.list_locks(brain)
    assert {lk.path.name[0] for lk in every if "*" in lk.scope or "?" in lk.scope} == {"+"}
    for target in TARGETS:
        want = sorted((lk.scope, lk.owner) for lk in every if locks.scopes_overlap(lk.scope, target))
        got = sorted((lk.scope, lk.owner) for lk in locks.overlapping(brain, target))
        assert got == want, target
        view = sorted((lk.scope, lk.owner) for lk in locks.LockView(brain).covering(target))
        assert view == want, target


def test_a_glob_lock_an_older_version_wrote_is_found_then_renamed(brain):
    lk = locks.acquire(brain, "src/*.py", "sess-a", pid=None)
    old = brain.locks_dir / lk.path.name[1:]     # the name it had before globs were marked
    lk.path.rename(old)
    (brain.state_dir / "locks.index").write_text(f"nika-locks-index 2 1\nsrc/*.py\t{old.name}\n\t--\n")
    assert [x.owner for x in locks.LockView(brain).covering("src/a.py")] == ["sess-a"]
    with pytest.raises(Busy):
        locks.acquire(brain, "src/b.py", "sess-b", pid=None, wait=0)
    assert lk.path.exists() and not old.exists() and not (brain.state_dir / "locks.index").exists()
    assert [x.owner for x in locks.LockView(brain).covering("src/a.py")] == ["sess-a"]
