"""`nika-brain ask`: the federation's way in, on the French kernel set with the real e5 model, kernels
running the STAND-IN agent (tests/federation/standin_agent.py) on a private tmux server."""
from __future__ import annotations

import json

import pytest

from nika_brain.brain import Brain
from nika_brain.claude import settings as claude_settings
from nika_brain.federation.asking import record
from nika_brain.federation.kernels import verbs
from tests.federation.fedkit import fed_config
from tests.federation.triagekit import ALPHA, GAMMA, GENERALIST, seed_kernels


@pytest.fixture
def askbrain(brain, tmp_path):
    cfg = fed_config(tmp_path, triage={"default": GENERALIST})
    (brain.root / "nika-brain.yml").write_text(cfg, encoding="utf-8")
    b = Brain.at(brain.root)
    seed_kernels(b)
    for kid in (ALPHA, GAMMA, GENERALIST):
        claude_settings.install(b.kernels_dir / kid, kernel_id=kid, brain_dir=b.root)
        verbs.kernel_start(b, kid)
    yield b
    import subprocess
    subprocess.run(["tmux", "-S", str(tmp_path / "tmux.sock"), "kill-server"], capture_output=True)


def _ask(cli, *args):
    out = cli("ask", *args)
    return out, (json.loads(out.stdout) if out.stdout.strip().startswith("{") else None)


def test_ask_routes_splits_falls_back_waits_and_records(askbrain, cli):
    out, one = _ask(cli, "envoie au client le compte rendu de la réunion d'hier", "--wait", "--json",
                    "--timeout", "120")
    assert out.returncode == 0, out.stderr
    assert one["decision"] == "kernel" and [r["kernel"] for r in one["routes"]] == [GAMMA]
    (r,) = one["routes"]
    assert r["status"] == "answered" and r["prompt_id"] == "q1"
    assert r["answer"].startswith("stand-in answer to: envoie au client le compte rendu")

    out, split = _ask(cli, "génère un plan technique ISO pour le client X et vérifie les sauvegardes "
                           "de son serveur", "--wait", "--json", "--timeout", "120")
    assert out.returncode == 0, out.stderr
    assert split["decision"] == "split" and [r["kernel"] for r in split["routes"]] == [GAMMA, ALPHA]
    for r in split["routes"]:
        assert r["status"] == "answered" and r["answer"].startswith(f"stand-in answer to: {r['prompt']}")
    assert "sauvegardes" in split["routes"][1]["prompt"]

    out, fb = _ask(cli, "quelle est la recette de la pâte à crêpes ?", "--wait", "--json", "--timeout", "120")
    assert out.returncode == 0, out.stderr
    assert fb["decision"] == "fallback" and fb["routes"][0]["kernel"] == GENERALIST
    assert fb["routes"][0]["answer"].startswith("stand-in answer to: quelle est la recette")

    # every ask is recorded; answers by reference (not copied into the record), resolved on show
    raw = json.loads((record.folder(askbrain) / f"{split['ask']}.json").read_text())
    assert all("answer" not in r and r["answer_ref"]["kernel"] == r["kernel"] for r in raw["routes"])
    shown = json.loads(cli("ask", "show", split["ask"], "--json").stdout)
    assert shown == {k: v for k, v in split.items()}
    # a plain call runs without typer (cli/askfast.py); the typer command prints the same, byte for byte
    for args in (("show", split["ask"], "--json"), ("show", split["ask"]), ("--json", "show", fb["ask"])):
        fast, framework = cli("ask", *args), cli("ask", *args, env={"NIKA_NO_FAST_CLI": "1"})
        assert (fast.returncode, fast.stdout) == (framework.returncode, framework.stdout) and fast.stdout
    assert [a["ask"] for a in record.list_asks(askbrain)][0] == fb["ask"]
    assert record.load_ask(askbrain, one["ask"])["routes"][0]["answer"] == one["routes"][0]["answer"]


def test_ask_without_wait_and_a_route_that_cannot_be_taken(askbrain, cli):
    out, taken = _ask(cli, "the mail server is down, restart it", "--json")
    assert out.returncode == 0, out.stderr
    assert taken["routes"][0] == {**taken["routes"][0], "kernel": ALPHA, "status": "taken", "answer": None}
    # a kernel whose record is active but has no process: the prompt stays queued, exit 8, said why
    out, queued = _ask(cli, "list the open public tenders on cloud hosting", "--json")
    assert out.returncode == 8
    r = queued["routes"][0]
    assert r["status"] == "queued" and r["prompt_id"] == "q1" and "stays queued" in r["reason"]


def test_ask_bad_input_is_one_line(askbrain, cli):
    for args, code in ((["   "], 1), (["show", "nope"], 1), (["show", "a-20260101T000000-abcdef"], 1),
                       (["x", "--timeout", "0"], 1), (["a", "b"], 1)):
        out = cli("ask", *args)
        assert out.returncode == code and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, \
            (args, out.stderr)
        framework = cli("ask", *args, env={"NIKA_NO_FAST_CLI": "1"})   # the same line through typer
        assert (framework.returncode, framework.stderr) == (out.returncode, out.stderr), args
    # what the fast path does not parse goes to typer: its usage errors, its help
    for args in (["--timeout", "soon", "x"], ["--bogus", "x"], []):
        out = cli("ask", *args)
        assert out.returncode == 2 and "Traceback" not in out.stderr and "Usage" in out.stderr, (args, out.stderr)
    assert cli("ask", "--help").returncode == 0
