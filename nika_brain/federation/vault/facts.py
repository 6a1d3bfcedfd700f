"""Whether two chunks say the same thing: the check dedup makes before dropping one.

This model's cosines are compressed (two different facts about the same subject score above 0.95:
"restic, 2 am, Lyon" vs "borg, 4 am, Paris"), so a cosine above the threshold only proposes a drop.
The drop happens when the texts also agree on what they state: the same numbers, times and dates
(every digit group), and the same words once case, punctuation, word order and a few function words
are set aside. One name, tool or place that differs keeps the chunk ("the firewall is patched" is not
"the DNS is patched", even under a long shared heading): a dedup that keeps a paraphrase costs a
record, one that drops a fact costs the fact.
"""
from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_NUMBER = re.compile(r"\d+(?:[.,:/h-]\d+)*")
_FUNCTION = frozenset(
    "a an the of to in on at and or for is are was were be been by with as it its this that from "
    "le la les l de des du d un une et ou à au aux en pour par sur est sont dans ce cette qui que".split())


def numbers(text: str) -> list[str]:
    return sorted(_NUMBER.findall(text))


def words(text: str) -> frozenset[str]:
    return frozenset(w for w in (x.lower() for x in _WORD.findall(text)) if w not in _FUNCTION)


def same_thing(a: str, b: str) -> bool:
    """True when `b` states what `a` states (a near-duplicate that may be dropped)."""
    if numbers(a) != numbers(b):
        return False
    return words(a) == words(b)
