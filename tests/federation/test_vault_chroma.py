"""The federation's Chroma store (nika_brain.federation.vault.chroma): embedded and server modes, the
one-writer rule of the embedded store, and chromadb's errors turned into one BrainError line."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from nika_brain.brain import Brain
from nika_brain.errors import EXIT_BUSY, BrainError
from nika_brain.federation.vault import chroma
from tests.federation.chroma_server import chroma_server  # noqa: F401  (fixture)
from tests.kit.brain import make_brain
from tests.kit.servers import free_port


@pytest.fixture(autouse=True)
def _fresh_cache():
    chroma.reset_cache()
    yield
    chroma.reset_cache()


def _unit(v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


def _roundtrip(store):
    col = store.collection("nika_test")
    assert col.configuration_json["hnsw"]["space"] == "cosine"
    with store.writer():
        col.add(ids=["a", "b"], embeddings=[_unit([1, 0, 0]), _unit([0, 1, 0])],
                documents=["alpha", "beta"], metadatas=[{"k": "x"}, {"k": "y"}])
    res = col.query(query_embeddings=[_unit([1, 0.1, 0])], n_results=1)
    assert res["ids"] == [["a"]]
    # cosine distance: 1 - cos, so a near-identical vector is close to 0
    assert res["distances"][0][0] < 0.01


def test_embedded_collection_is_cosine_without_embedding_function(brain: Brain):
    store = chroma.open_store(brain)
    assert store.mode == "embedded"
    assert (brain.state_dir / "chroma").is_dir()
    _roundtrip(store)
    assert "nika_test" in store.names()
    assert store.drop("nika_test") is True
    assert store.drop("nika_test") is False


def test_server_mode_against_a_real_chroma_run(tmp_path, git_env, chroma_server):  # noqa: F811
    brain = make_brain(tmp_path / "b", f"version: 1\nfederation:\n  chroma_url: {chroma_server}\n")
    store = chroma.open_store(brain)
    assert store.mode == "server"
    with store.writer():  # a no-op: the server serialises writes itself
        pass
    _roundtrip(store)
    assert not (brain.state_dir / "chroma").exists()


def test_bad_url_and_dead_server_are_one_clear_line(tmp_path, git_env):
    brain = make_brain(tmp_path / "b", "version: 1\nfederation:\n  chroma_url: ftp://x\n")
    with pytest.raises(BrainError, match="chroma_url"):
        chroma.open_store(brain)
    port = free_port()
    brain = make_brain(tmp_path / "c", f"version: 1\nfederation:\n  chroma_url: http://127.0.0.1:{port}\n")
    with pytest.raises(BrainError, match="chroma"):
        chroma.open_store(brain).collection("x")


HOLDER = textwrap.dedent("""
    import sys, time
    from nika_brain.brain import Brain
    from nika_brain.federation.vault.chroma import open_store
    store = open_store(Brain.at(sys.argv[1]))
    with store.writer():
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def _hold(brain: Brain, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(brain.root), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_process_waits_then_fails_with_busy(tmp_path, git_env):
    brain = make_brain(tmp_path / "b", "version: 1\nfederation:\n  chroma_writer_wait: 0.3\n")
    holder = _hold(brain, 30)
    try:
        store = chroma.open_store(brain)
        with pytest.raises(BrainError) as err, store.writer():
            pytest.fail("entered the writer while another process holds it")
        assert err.value.exit_code == EXIT_BUSY
        assert f"pid {holder.pid}" in str(err.value)
    finally:
        holder.kill()
        holder.wait()
    with store.writer(), store.writer():  # free again once the holder is gone; reentrant
        pass


def test_a_waiting_writer_gets_in_when_the_holder_finishes(tmp_path, git_env):
    brain = make_brain(tmp_path / "b", "version: 1\nfederation:\n  chroma_writer_wait: 60\n")
    holder = _hold(brain, 1.0)
    store = chroma.open_store(brain)
    with store.writer():
        assert holder.poll() is not None or _finishes(holder)
    holder.wait()


def _finishes(proc: subprocess.Popen) -> bool:
    # we hold the writer now, so the holder has left its block; it exits right after
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return True
        time.sleep(0.05)
    return False


OTHER_WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from nika_brain.brain import Brain
    from nika_brain.federation.vault import query, write
    from nika_brain.federation.vault.write import Chunk
    brain = Brain.at(sys.argv[1])
    if sys.argv[2] == "add":
        v = np.zeros(384, np.float32); v[1] = 1
        print(len(write.add(brain, "alpha", [Chunk("second, from another process")], [v]).added))
    else:
        print(len(query.records(brain, "alpha")[0]))
""")


def test_a_long_lived_process_sees_and_keeps_another_process_writes(tmp_path, git_env, monkeypatch):
    """Embedded Chroma caches segments per process: without the generation check, this process
    would neither see the other's record nor keep it once it writes again itself."""
    from nika_brain.federation.vault import query, write
    from nika_brain.federation.vault.write import Chunk
    from tests.federation.vaultkit import axis, vault_brain
    monkeypatch.delenv("NIKA_KERNEL_ID", raising=False)
    vb = vault_brain(tmp_path / "b")

    def other(what: str) -> str:
        return subprocess.run([sys.executable, "-c", OTHER_WRITER, str(vb.root), what], check=True,
                              capture_output=True, text=True).stdout.strip()
    from nika_brain.federation.vault import store as vstore
    write.add(vb, "alpha", [Chunk("first")], [axis(0)])
    handle = vstore.collection(vb, "alpha")          # taken before the other process writes
    assert other("add") == "1"
    assert handle.count() == 2
    texts = {r.text for r in query.search(vb, embedding=axis(1), kernel="alpha", k=10)}
    assert texts == {"first", "second, from another process"}
    write.add(vb, "alpha", [Chunk("third")], [axis(2)])
    assert other("count") == "3"


OPENERS = textwrap.dedent("""
    import sys, threading
    from nika_brain.brain import Brain
    from nika_brain.federation.vault import chroma
    brain = Brain.at(sys.argv[1])
    gate, got, errors = threading.Barrier(6), [], []
    def one():
        gate.wait()
        try:
            st = chroma.open_store(brain)
            st.names()
            got.append(id(st))
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    threads = [threading.Thread(target=one) for _ in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    print(len(set(got)), len(got), errors)
""")


def test_threads_opening_the_store_at_once_share_one_client(tmp_path, git_env):
    """The console opens the store from worker threads (two pages at once): chromadb's client cache
    is not thread-safe, so two threads building the first client must not collide."""
    brain = make_brain(tmp_path / "b", "version: 1\n")
    for _ in range(3):  # the collision needs the threads' timing: a few fresh processes
        out = subprocess.run([sys.executable, "-c", OPENERS, str(brain.root)], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split("\n")[0] == "1 6 []", out.stdout
