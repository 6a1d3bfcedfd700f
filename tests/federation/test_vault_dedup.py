"""Deduplication at write: the 0.95 edges with vectors built to an exact cosine, within a batch and
against the store, per kernel only, configurable, counted on the record that was kept."""
from __future__ import annotations

import pytest

from nika_brain.errors import BrainError
from nika_brain.federation.vault import query, write
from nika_brain.federation.vault.write import Chunk
from tests.federation.vaultkit import at_cosine, axis, vault_brain


@pytest.fixture
def vb(tmp_path, git_env):
    return vault_brain(tmp_path / "brain")


def test_edges_0949_kept_0951_dropped(vb):
    first = write.add(vb, "alpha", [Chunk("base")], [axis(0)])
    assert len(first.added) == 1
    kept = write.add(vb, "alpha", [Chunk("near but distinct")], [at_cosine(0, 1, 0.949)])
    assert len(kept.added) == 1 and not kept.dropped
    dropped = write.add(vb, "alpha", [Chunk("a near duplicate")], [at_cosine(0, 2, 0.951)])
    assert dropped.added == [] and len(dropped.dropped) == 1
    _, twin, sim = dropped.dropped[0]
    assert twin == first.added[0] and 0.9505 < sim < 0.9515
    # counted on the record it duplicates (how frequent that record is)
    assert query.get(vb, [twin], kernel="alpha")[0].dups == 1
    assert {r.text for r in query.search(vb, embedding=axis(0), kernel="alpha", k=10)} == {
        "base", "near but distinct"}


def test_within_one_batch_the_first_wins(vb):
    res = write.add(vb, "alpha", [Chunk("one"), Chunk("two"), Chunk("three")],
                    [axis(0), at_cosine(0, 1, 0.951), at_cosine(0, 2, 0.949)])
    assert [i for i, _, _ in res.dropped] == [1]
    assert len(res.added) == 2
    assert query.get(vb, [res.added[0]], kernel="alpha")[0].dups == 1


def test_other_kernels_records_never_count(vb):
    write.add(vb, "alpha", [Chunk("alpha's secret")], [axis(0)])
    # beta writes the very same vector: kept, since dedup compares with beta's own records only
    res = write.add(vb, "beta", [Chunk("beta's note")], [axis(0)])
    assert len(res.added) == 1 and not res.dropped


def test_threshold_is_configurable(tmp_path, git_env):
    vb = vault_brain(tmp_path / "b", extra="federation:\n  vault:\n    dedup_threshold: 0.9\n")
    write.add(vb, "alpha", [Chunk("base")], [axis(0)])
    res = write.add(vb, "alpha", [Chunk("x")], [at_cosine(0, 1, 0.92)])
    assert res.added == [] and len(res.dropped) == 1


def test_bad_threshold_is_one_line(tmp_path, git_env):
    vb = vault_brain(tmp_path / "b", extra="federation:\n  vault:\n    dedup_threshold: 2\n")
    with pytest.raises(BrainError, match="federation.vault.dedup_threshold: must be between"):
        write.add(vb, "alpha", [Chunk("base")], [axis(0)])


def test_same_text_twice_is_already_there_not_a_new_record(vb):
    write.add(vb, "alpha", [Chunk("same")], [axis(0)])
    res = write.add(vb, "alpha", [Chunk("same")], [axis(5)])
    assert res.added == [] and len(res.already) == 1 and not res.dropped
