"""Spawn triggers behind a human: each trigger writes one proposal and spawns nothing; approving
spawns (the real kernel_spawn, stand-in agent under tmux); rejecting silences the trigger until its
measure changes; an agent session cannot approve."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nika_brain.errors import EXIT_REFUSED, BrainError
from nika_brain.federation.spawning import proposals, triggers
from nika_brain.state import gates, kernels
from nika_brain.support.yamlsafe import dumps

from .fedkit import configure, fbrain, transcript_turn, until  # noqa: F401

GOAL = "IT operations: servers, backups, network and user accounts"
TOPICS = {
    "backup": [
        "restore the nightly backup of the file server",
        "the backup job failed on the NAS last night",
        "verify the backup retention policy for the file server",
        "schedule a full backup of the database server",
        "backup snapshots are missing for the mail server",
    ],
    "patent": [
        "draft the patent claims for the humidity sensor",
        "prior art search for the sensor patent",
        "file the patent application for the new sensor",
        "respond to the patent examiner's objections",
        "patent claims must cover the sensor calibration method",
    ],
    "invoice": [
        "send the invoice for the March consulting days",
        "the client has not paid last month's invoice",
        "correct the VAT on the invoice",
        "invoice the client for the extra delivery",
        "payment reminder for the overdue invoice",
    ],
    "tender": [
        "find public tenders for IT maintenance in Lyon",
        "deadline of the public tender for network cabling",
        "answer the call for tenders of the city council",
        "public procurement notice for cloud hosting",
        "compare the tender requirements with our offer",
    ],
    "iot": [
        "the temperature sensor on the edge gateway stopped reporting",
        "update the firmware of the IoT gateway",
        "MQTT messages from the field sensors are delayed",
        "calibrate the edge device's humidity readings",
        "the gateway reboots when the sensors flood it",
    ],
    "recipe": [
        "a recipe for chocolate cake with dark chocolate",
        "how long to bake a sponge cake",
        "chocolate mousse recipe without eggs",
        "bake cookies with brown butter",
        "the cake recipe needs less sugar",
    ],
    "football": [
        "the football match ended two to one",
        "who scored in the football final",
        "the striker was injured in the football match",
        "football league standings after the weekend",
        "the goalkeeper saved a penalty in the match",
    ],
}


def add_kernel(brain, kid="alpha", **kw):
    k = kernels.new_kernel(kid, GOAL, status="active", **kw)
    kernels.kernel_dir(brain, kid).mkdir(parents=True)
    return kernels.save_kernel(brain, k)


def no_spawn(brain, *before):
    assert sorted(k.id for k in kernels.list_kernels(brain)) == sorted(before)


def hook(brain, event, payload, env=None):
    import os

    full = {**os.environ, "NIKA_BRAIN_DIR": str(brain.root), **(env or {})}
    p = subprocess.run(
        [sys.executable, "-m", "nika_brain", "hook", event],
        check=False,
        input=json.dumps({"hook_event_name": event, **payload}),
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
    )
    return json.loads(p.stdout) if p.stdout.strip() else {}


def test_saturation_through_the_stop_hook(brain, tmp_path):
    brain = configure(brain, tmp_path, handover={"window": 10000, "threshold": 99})
    add_kernel(brain)
    transcript = tmp_path / "t.jsonl"
    transcript_turn(transcript, input_tokens=8000, model="x", text="ok")
    from nika_brain.state import sessions

    sessions.bind(brain, "s1", kernel="alpha", claim=None)
    for _ in range(3):  # 80 % three times: mean 80 % > 70 %
        hook(brain, "Stop", {"session_id": "s1", "transcript_path": str(transcript), "cwd": str(brain.root)})
    [p] = proposals.list_proposals(brain)
    assert p["trigger"] == "saturation" and p["measures"]["mean"] == 80.0 and p["status"] == "pending"
    assert gates.load_gate(brain, p["gate"]).pending and p["memory_estimate"] == "1G"
    no_spawn(brain, "alpha")
    assert triggers.check_saturation(brain, "alpha") is None  # pending: no second one
    proposals.decide(brain, p["id"], "reject", note="not now")
    assert triggers.check_saturation(brain, "alpha") is None  # silenced, the measure did not change
    for _ in range(6):
        triggers.record_context(brain, "alpha", "s1", 100.0)  # mean 93.3: a different measure
    again = triggers.check_saturation(brain, "alpha")
    assert again is not None and again["measures"]["mean"] > 90


def _rnd_doctrine(folder, external_writes: str) -> None:
    """The R&D doctrine of kernel alpha, with the external_writes invariant given."""
    (folder / "rnd-exploration.yml").write_text(dumps({
        "id": "rnd-exploration", "title": "R&D explores", "status": "active", "kernels": ["alpha"],
        "invariants": {"external_writes": external_writes, "tests": "required"}}))


def test_doctrine_conflict(brain):
    add_kernel(brain, doctrine="client-validation")
    folder = brain.root / "doctrines"
    folder.mkdir()
    _rnd_doctrine(folder, "allowed")
    (folder / "client-validation.yml").write_text(
        dumps(
            {
                "id": "client-validation",
                "title": "Client files are validated",
                "status": "active",
                "kernels": [],
                "invariants": {"external_writes": "forbidden", "tests": "required"},
            }
        )
    )
    p = triggers.check_doctrine(brain, "alpha")
    assert p["trigger"] == "doctrine" and "external_writes" in p["why"]
    assert p["measures"]["conflicts"] == [
        {
            "a": "client-validation",
            "b": "rnd-exploration",
            "invariant": "external_writes",
            "values": ["forbidden", "allowed"],
        }
    ]
    no_spawn(brain, "alpha")
    proposals.decide(brain, p["id"], "reject")
    assert triggers.check_doctrine(brain, "alpha") is None
    _rnd_doctrine(folder, "sandbox-only")
    assert triggers.check_doctrine(brain, "alpha") is not None  # the measure changed
    (folder / "bad.yml").write_text("id: bad\ninvariants: []\n")
    with pytest.raises(BrainError, match="needs invariants"):
        triggers.doctrines(brain)


def test_topic_diversity_on_real_embeddings(brain):
    from nika_brain.federation.stealing.aptitude import open_embedder

    add_kernel(brain)
    texts = [t for group in TOPICS.values() for t in group]
    vecs = open_embedder(brain).embed(texts, kind="passage")
    few = triggers.topic_clusters(vecs[:10], triggers.reference_mean(open_embedder(brain)))
    assert few["clusters"] <= 5
    assert triggers.check_diversity(brain, "alpha", vectors=vecs[:10]) is None
    p = triggers.check_diversity(brain, "alpha", vectors=vecs)
    assert p is not None and p["measures"]["clusters"] > 5 and p["measures"]["records"] == 35
    no_spawn(brain, "alpha")


def test_explicit_from_a_session_and_the_cli(fbrain, cli, tmp_path):  # noqa: F811
    brain = fbrain
    ans = hook(
        brain,
        "UserPromptSubmit",
        {"session_id": "s9", "prompt": "/kernel new Watch public tenders", "cwd": str(brain.root)},
    )
    assert ans["decision"] == "block" and "Nothing was spawned" in ans["reason"]
    [p] = proposals.list_proposals(brain)
    assert p["trigger"] == "explicit" and p["goal"] == "Watch public tenders"
    no_spawn(brain)
    # an agent session cannot approve, neither through the proposal nor through its gate
    refused = cli("kernel", "approve", p["id"], env={"CLAUDECODE": "1"})
    assert refused.returncode == EXIT_REFUSED and "agent session" in refused.stderr
    refused = cli("gate", "approve", p["gate"], env={"CLAUDECODE": "1"})
    assert refused.returncode != 0
    assert proposals.load(brain, p["id"])["status"] == "pending"
    no_spawn(brain)
    listing = cli("kernel", "proposals")
    assert p["id"] in listing.stdout and "pending" in listing.stdout
    ok = cli("kernel", "approve", p["id"])
    assert ok.returncode == 0, ok.stderr
    done = proposals.load(brain, p["id"])
    assert done["status"] == "spawned"
    k = kernels.load_kernel(brain, done["spawned"])
    assert k.goal == "Watch public tenders" and k.status == "active"
    # rejection silences the same request
    second = cli("kernel", "propose", "Audit the VPN")
    pid = second.stdout.split()[0]
    assert cli("kernel", "reject", pid, "--note", "no").returncode == 0
    assert "not proposed" in cli("kernel", "propose", "Audit the VPN").stdout
    assert len(kernels.list_kernels(brain)) == 1


def test_a_gate_decided_elsewhere_is_applied(brain, cli):
    p = triggers.explicit(brain, "Crunch the sensor data", by="test")
    assert cli("gate", "reject", p["gate"]).returncode == 0
    out = cli("kernel", "proposals", "--json")
    assert json.loads(out.stdout)[0]["status"] == "rejected"


def test_burst_worker_is_decommissioned_and_its_records_stay(fbrain, cli, monkeypatch):  # noqa: F811
    from datetime import timedelta

    from nika_brain import bus as busmod
    from nika_brain.federation.kernels import supervisor
    from nika_brain.federation.lineage import registry
    from nika_brain.federation.stealing import protocol as stealing
    from nika_brain.support import clock

    brain = fbrain
    out = cli(
        "kernel", "spawn", "Ingest the PDF burst of the lab", "--id", "burst", "--temporary", "--ttl", "2h"
    )
    assert out.returncode == 0, out.stderr
    k = kernels.load_kernel(brain, "burst")
    assert k.temporary and k.ttl == 7200
    # it does work that stays attributed: a stolen-style task committed by it, a registry session
    bus = busmod.open_bus(brain)
    from nika_brain.federation.stealing.texts import Texts
    stealing.enqueue(bus, "burst", "ingest lab-report.pdf", texts=Texts(brain), task_id="pdf-1")
    w = stealing.Worker(bus, "burst", lambda t: {"chunks": 12}, aptitude=lambda xs: [0.0] * len(xs),
                        texts=Texts(brain))
    w.recover()
    until(lambda: w.step() and bus.get("ws:done:pdf-1"))
    registry.link_session(brain, "burst-session", kernel="burst")
    assert supervisor.check_kernel(brain, k, ttl=60, beat_every=20) != "killed-ttl"  # within its ttl
    monkeypatch.setenv("NIKA_NOW", clock.iso(k.created + timedelta(hours=2, minutes=1)))
    assert (
        supervisor.check_kernel(brain, kernels.load_kernel(brain, "burst"), ttl=1e9, beat_every=1e9)
        == "killed-ttl"
    )
    monkeypatch.delenv("NIKA_NOW")
    gone = kernels.load_kernel(brain, "burst")
    assert gone.status == "killed" and "ttl" in gone.status_reason
    assert (brain.kernels_dir / "burst" / "kernel.yml").is_file()
    assert bus.get("ws:done:pdf-1")["kernel"] == "burst"
    assert registry.show(brain, "burst-session")["kernel"] == "burst"


def test_a_gate_file_edited_by_hand_does_not_spawn(brain):
    p = triggers.explicit(brain, "Crunch the sensor data", by="test")
    path = brain.gates_dir / f"{p['gate']}.yml"
    text = path.read_text().replace("status: pending", "status: approved")
    path.write_text(text.replace("decided_at: null", "decided_at: '2026-11-30T10:00:00Z'"))
    with pytest.raises(BrainError, match="cannot be trusted"):
        proposals.apply(brain, p["id"])
    assert proposals.load(brain, p["id"])["status"] == "pending"
    no_spawn(brain)


def test_context_samples_are_cut_to_the_last_day(brain):
    import time

    now = time.time()
    for i in range(4000):  # two days of old samples: more than SAMPLES_MAX bytes
        triggers.record_context(brain, "alpha", "s-old", 99.0, t=now - 2 * 86400 + i)
    triggers.record_context(brain, "alpha", "s-new", 50.0, t=now)
    path = brain.state_dir / "federation" / "alpha" / "context.jsonl"
    assert path.stat().st_size < triggers.SAMPLES_MAX
    assert triggers.saturation(brain, "alpha", now) == {"mean": 50.0, "samples": 1}


def test_topic_diversity_reads_the_kernels_vault_records(brain):
    """The trigger on records written into the real vault (embedded Chroma), nothing passed in."""
    from nika_brain.federation.stealing.aptitude import open_embedder
    from nika_brain.federation.vault import write as vault_write

    add_kernel(brain)
    texts = [t for group in TOPICS.values() for t in group]
    vecs = open_embedder(brain).embed(texts, kind="passage")
    res = vault_write.add(
        brain,
        "alpha",
        [vault_write.Chunk(t, "topics.txt", i) for i, t in enumerate(texts)],
        vecs,
        threshold=0.999,
    )
    assert len(triggers.kernel_vectors(brain, "alpha")) == 35, res
    p = triggers.check_diversity(brain, "alpha")
    assert p is not None and p["measures"]["records"] == 35 and p["measures"]["clusters"] > 5
    assert triggers.run_all(brain, ["alpha"]) == []  # pending: nothing new
