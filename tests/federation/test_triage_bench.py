"""The `triage bench` contract: a tiny routes file, its JSON, and its malformed-input errors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

ROUTES = """default: general
kernels:
  - id: ops
    goal: Exploitation IT, serveurs et sauvegardes
    domains: [serveurs, sauvegardes]
    examples:
      - vérifie les sauvegardes de la nuit
      - redémarre le serveur web qui ne répond plus
      - crée un compte utilisateur pour le nouvel employé
      - renouvelle le certificat du serveur de messagerie
      - check the disk space left on the file server
  - id: client
    goal: Missions client, rapports et mails
    domains: [clients, rapports]
    examples:
      - rédige le compte rendu de la réunion avec le client
      - réponds au mail du client sur le planning
      - prépare le rapport mensuel pour le client
      - mets à jour le devis du client
      - draft the weekly status report for the customer
  - id: general
    goal: Généraliste
"""

QUERIES = [
    {"text": "les sauvegardes ont-elles échoué cette nuit ?", "expected": "ops"},
    {"text": "envoie le compte rendu de réunion au client", "expected": "client"},
    {"text": "quelle est la recette des crêpes ?", "expected": None},
    {"text": "vérifie les sauvegardes du serveur et rédige le rapport mensuel pour le client",
     "expected": ["ops", "client"]},
]


def _run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "nika_brain", "triage", "bench", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture
def files(tmp_path):
    routes = tmp_path / "routes.yml"
    routes.write_text(ROUTES, encoding="utf-8")
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in QUERIES), encoding="utf-8")
    return routes, queries


def test_bench_prints_the_contract(tmp_path, files):
    routes, queries = files
    cal = tmp_path / "cal.jsonl"
    cal.write_text(json.dumps({"text": "redémarre le serveur", "expected": "ops"}) + "\n"
                   + json.dumps({"text": "quel temps fait-il ?", "expected": None}) + "\n")
    r = _run("--routes", routes, "--queries", queries, "--calibration", cal, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for key in ("in_scope_accuracy", "oos_recall", "oos_precision", "split_accuracy", "p50_ms",
                "p95_ms", "n", "predictions"):
        assert key in out
    assert out["n"] == 4 and len(out["predictions"]) == 4
    assert out["in_scope_accuracy"] == 1.0 and out["oos_recall"] == 1.0 and out["oos_precision"] == 1.0
    assert out["split_accuracy"] == 1.0
    assert 0 < out["p50_ms"] <= out["p95_ms"]
    p = out["predictions"][3]
    assert p["expected"] == ["ops", "client"] and sorted(p["routed"]) == ["client", "ops"]
    assert set(p["scores"]) == {"ops", "client"}   # the generalist, without examples, is not a topic
    assert out["predictions"][2]["routed"] == ["general"]
    assert not (tmp_path / ".nika").exists()  # the federation was thrown away


def test_split_accuracy_is_null_without_hybrids(tmp_path, files):
    routes, queries = files
    queries.write_text(json.dumps(QUERIES[0]) + "\n")
    out = json.loads(_run("--routes", routes, "--queries", queries, "--json", cwd=tmp_path).stdout)
    assert out["split_accuracy"] is None and out["oos_recall"] is None and out["n"] == 1


@pytest.mark.parametrize("which, content, where", [
    ("routes", "default: general\nkernels:\n  - id: ops\n    goal: IT\n    examples: [ok, 3]\n",
     "routes.yml:5: kernels.0.examples:"),
    ("routes", "default: general\nkernels:\n  - id: ops\n    goal: IT\n  - id: ops\n    goal: again\n",
     "routes.yml:5: kernels.1.id: duplicate kernel id"),
    ("routes", "kernels: []\n", "routes.yml:1: default:"),
    ("routes", "default: general\nkernels:\n  - id: ops\n    golt: IT\n", "routes.yml:4: kernels.0.golt:"),
    ("queries", '{"text": "a", "expected": "ops"}\n{"text": "b"}\n', "queries.jsonl:2: expected:"),
    ("queries", '{"text": "a", "expected": "ops"}\nnot json\n', "queries.jsonl:2: not JSON"),
    ("queries", '{"text": "", "expected": null}\n', "queries.jsonl:1: text:"),
    ("queries", '{"text": "a", "expected": "nobody"}\n', "queries.jsonl:1: expected: unknown kernel"),
    ("queries", '{"text": "a", "expected": [1, 2]}\n', "queries.jsonl:1: expected:"),
])
def test_malformed_input_is_one_line_naming_file_line_and_key(tmp_path, files, capsys, which,
                                                              content, where):
    from nika_brain.cli import run
    routes, queries = files
    (routes if which == "routes" else queries).write_text(content, encoding="utf-8")
    code = run(["triage", "bench", "--routes", str(routes), "--queries", str(queries), "--json"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nika-brain: ") and where in lines[0], err


def test_missing_options_and_files(tmp_path, files):
    routes, queries = files
    r = _run("--routes", routes, "--json", cwd=tmp_path)
    assert r.returncode == 1 and "needs --routes ROUTES.yml and --queries" in r.stderr
    r = _run("--routes", tmp_path / "nope.yml", "--queries", queries, "--json", cwd=tmp_path)
    assert r.returncode == 1 and "no such routes file" in r.stderr and "Traceback" not in r.stderr
