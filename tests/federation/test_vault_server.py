"""The vault in server mode, against a real `chroma run`: ingest, scoped query, grants, summaries,
and the CLI end to end, with no embedded store created."""
from __future__ import annotations

import json

import pytest

from nika_brain.federation.vault import chroma, grants, ingest, query, summaries
from tests.federation.chroma_server import chroma_server  # noqa: F401  (fixture)
from tests.federation.vaultkit import reset_store


@pytest.fixture
def sbrain(brain, monkeypatch, chroma_server):  # noqa: F811
    monkeypatch.delenv("NIKA_KERNEL_ID", raising=False)
    (brain.root / "nika-brain.yml").write_text(
        f"version: 1\nlock_poll: 0.01\nfederation:\n  chroma_url: {chroma_server}\n")
    for k in ("alpha", "beta"):
        (brain.kernels_dir / k).mkdir(parents=True)
        (brain.kernels_dir / k / "kernel.yml").write_text(f"id: {k}\ngoal: goal of {k}\n")
    chroma.reset_cache()
    from nika_brain.brain import Brain
    b = Brain.at(brain.root)
    reset_store(b)   # the server is shared by the session's tests
    return b


def test_vault_against_a_real_chroma_server(sbrain, cli, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ops.md").write_text("# Ops\n\nALPHA-CANARY: the backup server runs restic at two.\n")
    (docs / "lab.md").write_text("# Lab\n\nThe sWELU benchmark beat the baseline by four points.\n")
    rep = ingest.ingest(sbrain, [str(docs / "ops.md")], "alpha")
    assert rep.added == 1
    assert ingest.ingest(sbrain, [str(docs / "lab.md")], "beta").added == 1
    assert chroma.open_store(sbrain).mode == "server"
    assert not (sbrain.state_dir / "chroma").exists()
    assert [r.kernel_id for r in query.search(sbrain, "backup restic", kernel="beta", k=5)] == ["beta"]
    grants.grant(sbrain, "alpha", "beta")
    hits = query.search(sbrain, "backup restic", kernel="beta", k=1, owners=["alpha"])
    assert "ALPHA-CANARY" in hits[0].text
    s = summaries.summarize(sbrain, "beta")
    assert s is not None and "ALPHA-CANARY" not in s.text
    # the CLI, in another process, sees the same server
    out = cli("rag", "query", "benchmark baseline", "--kernel", "beta", "--json")
    assert out.returncode == 0, out.stderr
    assert [r["kernel_id"] for r in json.loads(out.stdout)] == ["beta"]
    stats = json.loads(cli("rag", "stats", "--json").stdout)
    assert stats["store"] == "server" and stats["records"] == 2 and stats["summaries"] == 1
