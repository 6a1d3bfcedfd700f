"""`scopes.overlap_test`, the preflight's check of its scopes against every open claim, answers as
`scopes_overlap` does pair by pair (it only normalizes each side once)."""
from __future__ import annotations

import itertools

from nika_brain.state.scopes import overlap_test, scopes_overlap

SCOPES = ["src/", "src/a.py", "./src//b/", "docs/*.md", "docs/guide.md", "**/x.py", "lib/x.py", ".", "tests/",
          "src/b/c.py", "src/?.py"]


def test_overlap_test_answers_as_scopes_overlap_pair_by_pair():
    seen = set()
    for mine in itertools.combinations(SCOPES, 2):
        test = overlap_test(mine)
        for others in itertools.combinations(SCOPES, 2):
            want = [s for s in mine if any(scopes_overlap(s, o) for o in others)]
            assert test(others) == want
            seen.add(bool(want))
    assert seen == {True, False}  # both answers were exercised
