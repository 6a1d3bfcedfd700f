"""Regions that mean something (issue 22, item 4): a machine declares its region; a kernel bound to
another region is refused here; the kernel's record and `kernel list` say which machine it is on."""
from __future__ import annotations

import json
import subprocess

from nika_brain.state import kernels

from .fedkit import fbrain  # noqa: F401


def test_a_region_fr_kernel_is_refused_on_a_machine_elsewhere_and_placed_on_one_in_fr(fbrain, cli):  # noqa: F811
    brain = fbrain
    assert cli("machine", "--id", "lyon-1", "--region", "de").returncode == 0
    refused = cli("kernel", "spawn", "Client data in France", "--id", "gamma", "--region", "fr",
                  "--runtime", "headless")
    assert refused.returncode == 6 and "region fr" in refused.stderr and "lyon-1" in refused.stderr
    assert refused.stderr.count("\n") == 1 and not kernels.kernel_dir(brain, "gamma").exists()
    shown = cli("machine", "--region", "fr")
    assert shown.returncode == 0 and "machine lyon-1: region fr" in shown.stdout
    placed = cli("kernel", "spawn", "Client data in France", "--id", "gamma", "--region", "fr",
                 "--runtime", "headless")
    assert placed.returncode == 0, placed.stderr
    assert kernels.load_kernel(brain, "gamma").machine == "lyon-1"
    rows = json.loads(cli("kernel", "list", "--json").stdout)
    assert [(r["id"], r["machine"], r["region"]) for r in rows] == [("gamma", "lyon-1", "fr")]
    assert "headless@lyon-1" in cli("kernel", "list").stdout
    cli("kernel", "kill", "gamma", "--reason", "done")


def test_a_machine_with_no_region_declared_keeps_regions_as_labels(fbrain, cli):  # noqa: F811
    out = cli("kernel", "spawn", "Public tenders watch", "--id", "eps", "--region", "neutral",
              "--runtime", "headless")
    assert out.returncode == 0, out.stderr
    host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip().split(".")[0]
    assert kernels.load_kernel(fbrain, "eps").machine in (host, "localhost")
    bad = cli("machine", "--region", "../x")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    cli("kernel", "kill", "eps", "--reason", "done")


def test_the_triage_sees_a_kernels_region_where_it_actually_runs(fbrain):  # noqa: F811
    from nika_brain.federation.triage import goals
    from nika_brain.state import machine
    from nika_brain.support.yamlsafe import dumps
    for kid, region, where in (("onfr", None, "paris-1"), ("labelled", "fr", "paris-1"),
                               ("elsewhere", "fr", "unknown-9")):
        (fbrain.kernels_dir / kid).mkdir(parents=True)
        doc = {"id": kid, "goal": f"goal of {kid}", "status": "active", "machine": where,
               "runtime": "tmux", **({"region": region} if region else {})}
        (fbrain.kernels_dir / kid / "kernel.yml").write_text(dumps(doc))
    before = {e.id: e.region for e in goals.entries_from_kernels(fbrain)}
    assert before == {"onfr": None, "labelled": "fr", "elsewhere": "fr"}  # no region declared: labels
    machine.save(fbrain, machine_id="paris-1", region="us")
    after = {e.id: e.region for e in goals.entries_from_kernels(fbrain)}
    # placed on a machine in region us: a fr label does not make it fr; unknown machine: its label
    assert after == {"onfr": "us", "labelled": "us", "elsewhere": "fr"}
