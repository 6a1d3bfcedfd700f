"""`kernel observe --query` reads the shared vault (issue 13) as that kernel: its records, never
another kernel's."""
from __future__ import annotations

import json

from nika_brain.federation.vault import ingest
from nika_brain.state import kernels


def test_observe_query_returns_the_kernels_own_records(brain, cli, tmp_path):
    for kid in ("alpha", "beta"):
        kernels.save_kernel(brain, kernels.new_kernel(kid, f"goal of {kid}", status="active"))
    a = tmp_path / "alpha.md"
    a.write_text("# VPN\n\nThe VPN gateway of BCUB3 restarts every night at 02:00 (canary-alpha-7).\n")
    b = tmp_path / "beta.md"
    b.write_text("# VPN\n\nThe lab VPN is only for patents work (canary-beta-3).\n")
    ingest.ingest(brain, [str(a)], "alpha")
    ingest.ingest(brain, [str(b)], "beta")
    out = cli("kernel", "observe", "alpha", "--query", "when does the VPN restart?", "--json")
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)["vault"]
    assert found and all(r["kernel_id"] == "alpha" for r in found)
    assert any("canary-alpha-7" in r["text"] for r in found)
    assert "canary-beta-3" not in out.stdout
