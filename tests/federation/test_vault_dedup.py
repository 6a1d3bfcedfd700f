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
    first = write.add(vb, "alpha", [Chunk("The VPN reboots on Sundays.")], [axis(0)])
    assert len(first.added) == 1
    kept = write.add(vb, "alpha", [Chunk("the VPN reboots on Sundays!")], [at_cosine(0, 1, 0.949)])
    assert len(kept.added) == 1 and not kept.dropped
    dropped = write.add(vb, "alpha", [Chunk("The VPN reboots on sundays")], [at_cosine(0, 2, 0.951)])
    assert dropped.added == [] and len(dropped.dropped) == 1
    _, twin, sim = dropped.dropped[0]
    assert twin == first.added[0] and 0.9505 < sim < 0.9515
    # counted on the record it duplicates (how frequent that record is)
    assert query.get(vb, [twin], kernel="alpha")[0].dups == 1
    assert {r.text for r in query.search(vb, embedding=axis(0), kernel="alpha", k=10)} == {
        "The VPN reboots on Sundays.", "the VPN reboots on Sundays!"}


def test_within_one_batch_the_first_wins(vb):
    res = write.add(vb, "alpha", [Chunk("Backups at 2 am."), Chunk("backups at 2 am"),
                                  Chunk("Backups at 2 am!")],
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
    write.add(vb, "alpha", [Chunk("Backups at 2 am.")], [axis(0)])
    res = write.add(vb, "alpha", [Chunk("backups at 2 am")], [at_cosine(0, 1, 0.92)])
    assert res.added == [] and len(res.dropped) == 1


def test_bad_threshold_is_one_line(tmp_path, git_env):
    vb = vault_brain(tmp_path / "b", extra="federation:\n  vault:\n    dedup_threshold: 2\n")
    with pytest.raises(BrainError, match="federation.vault.dedup_threshold: must be between"):
        write.add(vb, "alpha", [Chunk("base")], [axis(0)])


def test_same_text_twice_is_already_there_not_a_new_record(vb):
    write.add(vb, "alpha", [Chunk("same")], [axis(0)])
    res = write.add(vb, "alpha", [Chunk("same")], [axis(5)])
    assert res.added == [] and len(res.already) == 1 and not res.dropped


def test_close_vectors_that_state_different_facts_are_both_kept(vb):
    old = write.add(vb, "alpha", [Chunk("Backups run with restic at 2 am in Lyon.")], [axis(0)])
    new = write.add(vb, "alpha", [Chunk("Backups run with borg at 4 am in Paris.")], [at_cosine(0, 1, 0.99)])
    assert len(new.added) == 1 and not new.dropped
    (rec,) = query.get(vb, new.added, kernel="alpha")
    assert rec.updates == (old.added[0],)
    # the newer fact wins a query that both answer alike (the old one scores a little higher here)
    hits = query.search(vb, embedding=axis(0), kernel="alpha", k=2)   # old: 1.0, new: 0.99
    assert [h.text for h in hits] == ["Backups run with borg at 4 am in Paris.",
                                      "Backups run with restic at 2 am in Lyon."]


def test_5000_templated_one_line_notes_none_dropped_even_with_one_vector(vb):
    """The worst case for a cosine-only dedup: every note gets the very same vector."""
    notes = [Chunk(f"Note {i}: server srv-{i:04d} rebooted at {i % 24:02d}:{i % 60:02d} by on-call.")
             for i in range(5000)]
    res = write.add(vb, "alpha", notes, [axis(0)] * len(notes))
    assert len(res.added) == 5000 and not res.dropped, res.dropped[:3]


def test_a_long_heading_before_60_distinct_paragraphs_none_dropped(vb):
    heading = ("Operations handbook of the BCUB3 infrastructure team, section on scheduled maintenance "
               "windows, change approval, rollback procedures, monitoring dashboards and escalation "
               "contacts for every production service hosted in the primary and secondary datacenters")
    topics = ["firewall", "mail relay", "backup vault", "DNS", "VPN", "wiki", "ticketing", "LDAP",
              "proxy", "storage array", "hypervisor", "load balancer"]
    verbs = ["is patched", "is restarted", "is audited", "is migrated", "is resized"]
    paras = [Chunk(f"{heading}\n\nThe {topics[i % 12]} {verbs[i // 12]} by the duty engineer.")
             for i in range(60)]
    assert len({p.text for p in paras}) == 60
    res = write.add(vb, "alpha", paras, [axis(0)] * 60)
    assert len(res.added) == 60 and not res.dropped


def test_the_borg_restic_update_with_the_real_model_keeps_the_new_fact_and_it_wins(vb):
    from nika_brain.federation.vault import store
    note = ("BCUB3 infrastructure notes. The file server is a Debian machine in rack 4. Backups run "
            "nightly with {} at {} am and are copied to the {} datacenter. Monitoring alerts go to the "
            "on-call phone.")
    old, new = note.format("restic", "2", "Lyon"), note.format("borg", "4", "Paris")
    vecs = store.embed(vb, [old, new], "passage")
    cos = float(vecs[0] @ vecs[1])
    assert cos > 0.95, cos   # the model's compressed scale: a cosine-only dedup dropped this update
    write.add(vb, "alpha", [Chunk(old)], vecs[:1])
    res = write.add(vb, "alpha", [Chunk(new)], vecs[1:])
    assert len(res.added) == 1 and not res.dropped
    hits = query.search(vb, "How are the backups run at night?", kernel="alpha", k=2)
    assert [h.text for h in hits][0] == new, [(h.text, h.score) for h in hits]


def test_the_blocked_batch_dedup_keeps_and_drops_what_the_one_by_one_comparison_does():
    """The batch dedup compares blocks of chunks with one matrix product; across block edges it must
    keep, drop and name the twin exactly as comparing each chunk with every earlier kept one does."""
    import random

    import numpy as np

    rng = random.Random(5)
    centres = np.random.default_rng(5).normal(size=(40, 16)).astype(np.float32)
    chunks, vecs = [], []
    for n in range(3 * write.BLOCK + 37):
        c = rng.randrange(40)   # the same fact worded alike, or another fact near the same vector
        chunks.append(Chunk(f"Fact {c} about host {c}{'!' * rng.randrange(3)}" if rng.random() < 0.7
                            else f"Other fact {n} about host {c}"))
        v = centres[c] + np.random.default_rng(n).normal(scale=rng.choice([0.01, 0.2, 1.0]), size=16)
        vecs.append(v / np.linalg.norm(v))
    vecs = np.asarray(vecs, dtype=np.float32)
    ids = [f"r{n}" for n in range(len(chunks))]
    got = write.AddResult()
    kept = write._kept_in_batch(chunks, vecs, list(range(len(chunks))), ids, 0.95, got)
    want_kept, want_dropped = [], []
    for i in range(len(chunks)):   # the reference: every earlier kept chunk, closest (then earliest) first
        sims = vecs[want_kept] @ vecs[i] if want_kept else np.empty(0)
        order = sorted((j for j in range(len(want_kept)) if sims[j] > 0.95), key=lambda j: (-sims[j], j))
        twin = next((j for j in order[:write.CANDIDATES]
                     if write.facts.same_thing(chunks[want_kept[j]].text, chunks[i].text)), None)
        if twin is None:
            want_kept.append(i)
        else:
            want_dropped.append((i, ids[want_kept[twin]]))
    assert kept == want_kept and [(i, t) for i, t, _ in got.dropped] == want_dropped
    assert len(want_dropped) > 100 and len(want_kept) > 100   # both sides exercised, across blocks
