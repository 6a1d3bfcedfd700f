"""The vault's operations beyond ingest: grants as files (journaled), a kernel session bound to its
kernel, the strategy → atomic tree, super-chunks, summaries replaced not duplicated, stats, purge."""
from __future__ import annotations

import json
import sys

import pytest

from nika_brain.engine import signals
from nika_brain.errors import EXIT_REFUSED, BrainError
from nika_brain.federation.vault import (
    admin,
    grants,
    query,
    summaries,
    superchunks,
    write,
)
from nika_brain.federation.vault.write import Chunk
from nika_brain.support.yamlsafe import load_file
from tests.federation.vaultkit import at_cosine, axis, vault_brain


@pytest.fixture
def vb(brain, monkeypatch):
    monkeypatch.delenv("NIKA_KERNEL_ID", raising=False)
    return vault_brain(brain.root.parent / "vault-brain")


@pytest.fixture
def kbrain(brain, cli, monkeypatch):
    """The `cli` fixture's brain, with kernels alpha, beta, gamma."""
    monkeypatch.delenv("NIKA_KERNEL_ID", raising=False)
    for k in ("alpha", "beta", "gamma"):
        (brain.kernels_dir / k).mkdir(parents=True)
        (brain.kernels_dir / k / "kernel.yml").write_text(f"id: {k}\ngoal: goal of {k}\n")
    return brain


def test_grant_and_revoke_are_files_in_the_brain_and_journaled(kbrain, cli):
    r = cli("rag", "grant", "alpha", "beta", "--level", "task", "--until", "2999-01-01T00:00:00Z")
    assert r.returncode == 0, r.stderr
    path = kbrain.root / "grants" / "alpha--beta.yml"
    data = load_file(path)
    assert data["owner"] == "alpha" and data["reader"] == "beta" and data["levels"] == ["task"]
    assert data["until"] == "2999-01-01T00:00:00Z"
    assert cli("rag", "grants").stdout.startswith("alpha -> beta\ttask")
    assert cli("index").returncode == 0  # grants are visible in BRAIN-INDEX.md
    assert "| `alpha` | `beta` | task | 2999-01-01T00:00:00Z |" in (kbrain.root / "BRAIN-INDEX.md").read_text()
    assert cli("validate", "grants/").returncode == 0
    assert cli("rag", "revoke", "alpha", "beta").returncode == 0
    assert not path.exists()
    again = cli("rag", "revoke", "alpha", "beta")
    assert again.returncode == 1 and again.stderr.strip() == "nika-brain: no grant from alpha to beta"
    types = [s["type"] for s in signals.read(kbrain)]
    assert types == ["VAULT_GRANT", "VAULT_REVOKE"]
    bad = cli("rag", "grant", "alpha", "nobody")
    assert bad.returncode == 1 and "no such kernel: nobody" in bad.stderr
    past = cli("rag", "grant", "alpha", "beta", "--until", "2000-01-01")
    assert past.returncode == 1 and "not in the future" in past.stderr
    # a kernel session may share its own records, never another kernel's
    r = cli("rag", "grant", "alpha", "gamma", env={"NIKA_KERNEL_ID": "beta"})
    assert r.returncode == EXIT_REFUSED and r.stderr.count("\n") == 1
    assert cli("rag", "grant", "beta", "gamma", env={"NIKA_KERNEL_ID": "beta"}).returncode == 0


def test_a_broken_grant_file_is_one_line_naming_the_file(vb):
    (vb.root / "grants").mkdir()
    (vb.root / "grants" / "alpha--beta.yml").write_text("owner: alpha\nreader: beta\nlevels: [epic]\n")
    with pytest.raises(BrainError) as err:
        query.search(vb, embedding=axis(0), kernel="beta", owners=["alpha"])
    assert "alpha--beta.yml" in str(err.value) and "levels" in str(err.value)


def test_a_kernel_session_reads_only_as_its_kernel(vb, monkeypatch):
    write.add(vb, "alpha", [Chunk("alpha's plan")], [axis(0)])
    write.add(vb, "beta", [Chunk("beta's plan")], [axis(0)])
    monkeypatch.setenv("NIKA_KERNEL_ID", "beta")
    assert [r.text for r in query.search(vb, embedding=axis(0))] == ["beta's plan"]
    for call in (lambda: query.search(vb, embedding=axis(0), kernel="alpha"),
                 lambda: query.records(vb, "alpha"),
                 lambda: query.get(vb, ["alpha:x"], kernel="alpha"),
                 lambda: summaries.put(vb, "alpha", "k", "text"),
                 lambda: write.delete(vb, "alpha", ["alpha:x"]),
                 lambda: grants.grant(vb, "alpha", "beta")):
        with pytest.raises(BrainError) as err:
            call()
        assert err.value.exit_code == EXIT_REFUSED
    with pytest.raises(BrainError, match="no grant"):
        query.search(vb, embedding=axis(0), owners=["alpha"])


def test_tree_shows_ancestors_and_children_and_levels_are_ordered(vb):
    s = write.add(vb, "alpha", [Chunk("Strategy: win public tenders")], [axis(0)], level="strategy").added[0]
    p = write.add(vb, "alpha", [Chunk("Project: city network tender")], [axis(1)], level="project",
                  parent=s).added[0]
    t = write.add(vb, "alpha", [Chunk("Task: price the routers")], [axis(2)], level="task", parent=p).added[0]
    kids = write.add(vb, "alpha", [Chunk("router quote A"), Chunk("router quote B")], [axis(3), axis(4)],
                     parent=t).added
    tr = query.tree(vb, t, kernel="alpha")
    assert [r.id for r in tr["ancestors"]] == [s, p]
    assert sorted(r.id for r in tr["children"]) == sorted(kids)
    with pytest.raises(BrainError, match="cannot have a task parent"):
        write.add(vb, "alpha", [Chunk("a project under a task")], [axis(5)], level="project", parent=t)
    with pytest.raises(BrainError, match="not a record of kernel beta"):
        write.add(vb, "beta", [Chunk("borrowed parent")], [axis(6)], parent=t)
    with pytest.raises(BrainError, match="kernel beta has no grant"):
        query.tree(vb, t, kernel="beta")
    grants.grant(vb, "alpha", "beta")
    assert query.tree(vb, t, kernel="beta")["record"].id == t


def _near_group(vb, kernel):
    base = write.add(vb, kernel, [Chunk("The VPN gateway drops sessions at night. Restart it first.")],
                     [axis(0)]).added[0]
    write.add(vb, kernel, [Chunk("the VPN gateway drops sessions at night; restart it first!")],
              [at_cosine(0, 1, 0.96)])   # the same thing: dropped, counted on base
    texts = [f"The VPN gateway drops sessions at night. Variant {i} seen in {c}." for i, c in
             enumerate(("Lyon", "Oslo", "Porto"))]
    members = write.add(vb, kernel, [Chunk(t) for t in texts],
                        [at_cosine(0, 10 + i, 0.93) for i in range(3)]).added
    write.add(vb, kernel, [Chunk("Unrelated: the invoice batch is late.")], [axis(50)])
    return base, members


def test_superchunks_merge_frequent_near_duplicates_and_keep_links(vb):
    base, members = _near_group(vb, "alpha")
    _near_group(vb, "beta")
    made = superchunks.merge(vb, "alpha")
    assert len(made) == 1
    sup = made[0]
    assert set(sup.replaces) == {base, *members} and sup.kind == "super"
    assert sup.text.startswith("The VPN gateway drops sessions at night.")
    assert sup.text.count("The VPN gateway drops sessions at night.") == 1   # extractive, no repeats
    assert all(f"Variant {i}" in sup.text for i in range(3))
    got = query.get(vb, list(sup.replaces), kernel="alpha")
    assert {r.superseded_by for r in got} == {sup.id}
    live = {r.id for r in query.search(vb, embedding=axis(0), kernel="alpha", k=10)}
    assert sup.id in live and not live & set(sup.replaces)
    everything = {r.id for r in query.search(vb, embedding=axis(0), kernel="alpha", k=10,
                                             include_superseded=True)}
    assert set(sup.replaces) <= everything
    assert superchunks.merge(vb, "alpha") == []            # nothing left to merge
    assert admin.stats(vb)["kernels"]["beta"]["super"] == 0  # beta untouched


def test_superchunk_command_is_used_when_configured(tmp_path, git_env, monkeypatch):
    monkeypatch.delenv("NIKA_KERNEL_ID", raising=False)
    script = tmp_path / "summ.py"
    script.write_text("import sys\nparts = sys.stdin.read().split('\\n---\\n')\n"
                      "print(f'LLM summary of {len(parts)} chunks')\n")
    vb = vault_brain(tmp_path / "b", extra=("federation:\n  vault:\n    superchunk_command: "
                                            f"[{json.dumps(sys.executable)}, {json.dumps(str(script))}]\n"))
    _near_group(vb, "alpha")
    assert [s.text for s in superchunks.merge(vb, "alpha")] == ["LLM summary of 4 chunks"]


def test_summaries_are_replaced_not_duplicated(vb):
    day = "2026-11-30"
    from datetime import datetime, timezone
    t = datetime(2026, 11, 30, 10, tzinfo=timezone.utc)
    write.add(vb, "alpha", [Chunk("ALPHA-CANARY the backup server failed twice.")], [axis(0)], now=t)
    write.add(vb, "alpha", [Chunk("yesterday's note")], [axis(1)],
              now=datetime(2026, 11, 29, 10, tzinfo=timezone.utc))
    write.add(vb, "beta", [Chunk("beta tuned the sensors.")], [axis(0)], now=t)
    signals.emit(vb, "INFO", reason="x", payload={"kernel_id": "alpha"}, now=t, publish=False)
    first = summaries.summarize(vb, "alpha", day, now=t)
    assert "ALPHA-CANARY" in first.text and "yesterday" not in first.text and "INFO ×1" in first.text
    write.add(vb, "alpha", [Chunk("the firewall was audited.")], [axis(2)], now=t)
    second = summaries.summarize(vb, "alpha", day, now=t)
    listed = summaries.list_summaries(vb, kernel_id="alpha")
    assert [s.id for s in listed] == [first.id] == [second.id]
    assert "firewall" in listed[0].text
    beta = summaries.summarize(vb, "beta", day, now=t)
    assert "ALPHA-CANARY" not in beta.text
    assert summaries.summarize(vb, "gamma", day, now=t) is None
    summaries.put(vb, "alpha", "handover:s1", "state before handover", {"session": "s1"})
    summaries.put(vb, "alpha", "handover:s1", "state before handover, v2", {"session": "s1"})
    got = summaries.get(vb, "alpha", "handover:s1")
    assert got.text.endswith("v2") and got.meta["session"] == "s1"
    assert len(summaries.list_summaries(vb, kernel_id="alpha")) == 2
    with pytest.raises(BrainError, match="YYYY-MM-DD"):
        summaries.summarize(vb, "alpha", "30/11/2026")


def test_stats_and_purge(kbrain, cli):
    write.add(kbrain, "alpha", [Chunk("a1"), Chunk("a2")], [axis(0), axis(1)])
    write.add(kbrain, "beta", [Chunk("b1")], [axis(0)])
    grants.grant(kbrain, "alpha", "beta")
    grants.grant(kbrain, "beta", "gamma")
    s = json.loads(cli("rag", "stats", "--json").stdout)
    assert s["records"] == 3 and s["kernels"]["alpha"]["records"] == 2 and s["grants"] == 2
    refused = cli("rag", "purge", "--kernel", "alpha")
    assert refused.returncode == 1 and "--yes" in refused.stderr
    done = cli("rag", "purge", "--kernel", "alpha", "--yes")
    assert done.returncode == 0, done.stderr
    assert "2 record(s)" in done.stdout
    from nika_brain.federation.vault import chroma
    chroma.reset_cache()
    s = admin.stats(kbrain)
    assert s["records"] == 1 and list(s["kernels"]) == ["beta"] and s["grants"] == 1
    assert signals.read(kbrain, types=("VAULT_PURGE",))[0]["payload"]["records"] == 2


def test_a_bad_where_or_k_is_one_line_and_records_gives_vectors(vb):
    write.add(vb, "alpha", [Chunk("a"), Chunk("b")], [axis(0), axis(1)])
    with pytest.raises(BrainError, match="vault query"):
        query.search(vb, embedding=axis(0), kernel="alpha", where={"$nonsense": 1})
    with pytest.raises(BrainError, match="--k must be between"):
        query.search(vb, embedding=axis(0), kernel="alpha", k=0)
    ids, vecs = query.records(vb, "alpha")
    assert len(ids) == 2 and vecs.shape == (2, 384)
    assert query.records(vb, "beta")[0] == []


def test_summaries_quote_no_record_of_a_restricted_class(tmp_path):
    """Summaries are read by every kernel: a sensitive kernel's records, and a record whose text
    matches a restricted class's pattern, are counted by class and never quoted (issue 20, item 6)."""
    from datetime import datetime, timezone
    extra = ("federation:\n  triage:\n    data_classes: [public, {name: client, patterns: ['(?i)confidentiel'], "
             "regions: [fr]}, sensitive]\n")
    vb = vault_brain(tmp_path / "b", kernels=("pub", "client"), extra=extra)
    (vb.kernels_dir / "client" / "kernel.yml").write_text("id: client\ngoal: Client Pulsa\ndata_class: sensitive\n")
    day, t = "2026-11-30", datetime(2026, 11, 30, 10, tzinfo=timezone.utc)
    write.add(vb, "client", [Chunk("Client Pulsa: the contract is worth 480 000 euros.")], [axis(0)], now=t)
    write.add(vb, "pub", [Chunk("The VPN is rebooted on Sundays."),
                          Chunk("Dossier Pulsa confidentiel: marge de 12 %.")], [axis(0), axis(1)], now=t)
    client = summaries.summarize(vb, "client", day, now=t).text
    assert "480 000" not in client and "Pulsa" not in client and "1 sensitive" in client, client
    pub = summaries.summarize(vb, "pub", day, now=t).text
    assert "VPN is rebooted" in pub and "marge" not in pub and "1 client" in pub, pub
