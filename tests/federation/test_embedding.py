"""The embedder registry: the real e5 model, an ONNX model folder the test builds, and the cache."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation import embedding
from nika_brain.federation.embedding import CachedEmbedder, OnnxEmbedder, open_embedder

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "backup", "server", "patent", "benchmark", "client", "report",
         "dimension", "probe"]


def build_model_folder(folder: Path, *, dim: int = 8, pooled: bool = False) -> Path:
    """A tiny sentence-embedding model: a token embedding table, mean pooling done by the caller."""
    onnx = pytest.importorskip("onnx")  # in the test extra; the skip only guards odd local setups
    from onnx import TensorProto, helper
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))

    rng = np.random.default_rng(7)
    table = rng.normal(size=(len(VOCAB), dim)).astype(np.float32)
    table[0] = 0.0
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["states"], axis=0)]
    out_name, out_shape = "states", ["n", "seq", dim]
    if pooled:
        nodes.append(helper.make_node("ReduceMean", ["states"], ["pooled"], axes=[1], keepdims=0))
        out_name, out_shape = "pooled", ["n", dim]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["n", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["n", "seq"])],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, out_shape)],
        [helper.make_tensor("table", TensorProto.FLOAT, table.shape, table.flatten().tolist())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))
    np.save(folder / "table.npy", table)
    return folder


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_onnx_mean_pooling_matches_the_table(tmp_path):
    folder = build_model_folder(tmp_path / "tiny")
    table = np.load(folder / "table.npy")
    emb = OnnxEmbedder(folder, pooling="mean")
    assert emb.dim == 8
    out = emb.embed(["backup server", "patent"], kind="passage")
    assert out.shape == (2, 8) and out.dtype == np.float32
    # padding of the shorter text must not leak into its mean
    np.testing.assert_allclose(out[0], _unit(table[3] + table[4]), atol=1e-5)
    np.testing.assert_allclose(out[1], _unit(table[5]), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_onnx_cls_pooling_prefixes_and_model_id(tmp_path):
    folder = build_model_folder(tmp_path / "tiny")
    table = np.load(folder / "table.npy")
    cls = OnnxEmbedder(folder, pooling="cls", query_prefix="client ")
    q = cls.embed(["server"], kind="query")
    np.testing.assert_allclose(q[0], _unit(table[VOCAB.index("client")]), atol=1e-5)
    p = cls.embed(["server"], kind="passage")
    np.testing.assert_allclose(p[0], _unit(table[4]), atol=1e-5)
    mean = OnnxEmbedder(folder, pooling="mean")
    assert cls.model_id != mean.model_id  # pooling is part of the id, so of the cache keys
    assert OnnxEmbedder(folder, pooling="mean").model_id == mean.model_id


def test_onnx_model_that_pools_itself(tmp_path):
    folder = build_model_folder(tmp_path / "pooled", dim=5, pooled=True)
    emb = OnnxEmbedder(folder)
    assert emb.embed(["client report"], kind="query").shape == (1, 5)


def test_onnx_through_the_brain_config(tmp_path):
    build_model_folder(tmp_path / "models" / "tiny")
    (tmp_path / "nika-brain.yml").write_text(
        "version: 1\nfederation:\n  embedder: {backend: onnx, path: models/tiny, pooling: mean}\n")
    brain = Brain.at(tmp_path)
    emb = open_embedder(brain)
    assert emb.model_id.startswith("onnx/tiny/")
    emb.embed(["backup server"], kind="query")
    assert isinstance(emb, CachedEmbedder) and emb.path is not None and emb.path.is_file()
    assert emb.path.is_relative_to(brain.state_dir)
    assert open_embedder(brain) is emb  # one hot model per process


@pytest.mark.parametrize("conf, key", [
    ("{backend: bert}", "federation.embedder.backend"),
    ("{backend: onnx}", "federation.embedder.path"),
    ("{backend: onnx, path: nowhere}", "federation.embedder.path"),
    ("{pooling: max}", "federation.embedder.pooling"),
    ("{normalize: 3}", "federation.embedder.normalize"),
    ("{colour: blue}", "federation.embedder.colour"),
    ("[e5]", "federation.embedder"),
])
def test_bad_embedder_config_is_one_clear_error(tmp_path, conf, key):
    (tmp_path / "nika-brain.yml").write_text(f"version: 1\nfederation:\n  embedder: {conf}\n")
    with pytest.raises(BrainError) as err:
        open_embedder(Brain.at(tmp_path))
    assert err.value.key == key and "nika-brain.yml" in str(err.value)


def test_corrupt_onnx_file_is_one_clear_error(tmp_path):
    folder = build_model_folder(tmp_path / "tiny")
    (folder / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(BrainError, match="onnxruntime cannot load it"):
        OnnxEmbedder(folder)


class Counting:
    model_id = "counting/1"
    dim = 3

    def __init__(self):
        self.calls: list[list[str]] = []

    def embed(self, texts, *, kind):
        self.calls.append(list(texts))
        return np.array([_unit(np.array([len(t), 1.0 if kind == "query" else 2.0, 1.0]))
                         for t in texts], dtype=np.float32).reshape(len(texts), 3)


def test_cache_embeds_each_text_once_across_processes(tmp_path):
    path = tmp_path / "cache.sqlite"
    inner = Counting()
    cache = CachedEmbedder(inner, path)
    a = cache.embed(["aa", "b", "aa"], kind="passage")
    assert inner.calls == [["aa", "b"]]
    np.testing.assert_array_equal(a[0], a[2])
    # kind is part of the key: the same text as a query is a different vector
    q = cache.embed(["aa"], kind="query")
    assert inner.calls[-1] == ["aa"] and not np.allclose(q[0], a[0])
    # a new process (a fresh wrapper on the same file) finds them all on disk
    other = Counting()
    again = CachedEmbedder(other, path).embed(["b", "aa"], kind="passage")
    assert other.calls == []
    np.testing.assert_array_equal(again, a[[1, 0]])


def _open_fresh_cache(path: str, go, out) -> None:
    go.wait()
    try:
        CachedEmbedder(Counting(), Path(path)).embed([f"text of {os.getpid()}"], kind="query")
        out.put("ok")
    except Exception as exc:  # noqa: BLE001 (what the test reports)
        out.put(f"{type(exc).__name__}: {exc}")


def test_a_new_cache_file_is_switched_to_wal_by_one_opener_at_a_time(tmp_path):
    """Processes opening a cache file that does not exist yet all switch it to WAL; SQLite answers
    "database is locked" at once (no busy wait) to all but one of those who try together, which
    ended a kernel starting beside two others (the work-stealing stress test, once in CI). The
    switch is made under a file mutex: held here, an opener waits for it."""
    import threading

    from nika_brain.support import fsio
    path = tmp_path / "fresh.sqlite"
    done = threading.Event()

    def open_it():
        CachedEmbedder(Counting(), path).embed(["x"], kind="query")
        done.set()
    with fsio.mutex(tmp_path / "mutex" / "fresh.sqlite.lock"):
        t = threading.Thread(target=open_it, daemon=True)
        t.start()
        assert not done.wait(0.5), "the new file was switched to WAL without its mutex"
    assert done.wait(60)
    import sqlite3
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # and for real: eight processes at once on new files, every one of them opens it
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    said = []
    for trial in range(10):
        go, out = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_open_fresh_cache, args=(str(tmp_path / f"t{trial}.sqlite"), go, out))
                 for _ in range(8)]
        for p in procs:
            p.start()
        go.set()
        said += [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(60)
    assert said == ["ok"] * 80, [s for s in said if s != "ok"][:3]


def test_e5_default_backend_is_real_and_bilingual():
    emb = embedding.E5Embedder()
    assert emb.dim == 384 and "e5" in emb.model_id
    vecs = emb.embed(["vérifie les sauvegardes du serveur", "check the server backups",
                      "rédige la réponse à l'appel d'offres"], kind="query")
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]  # French and English of one request are closest
    with pytest.raises(BrainError):
        emb.embed(["x"], kind="document")  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["😀" * 1000, "中" * 1000, "é" * 600])
def test_e5_cuts_short_texts_of_many_tokens(text):
    """Fewer characters than twice the window is no proof: 1,000 emojis are 1,004 tokens (issue 25 §5)."""
    emb = embedding.E5Embedder()
    cut = emb._fit(text, True)
    assert emb._model.token_count(cut, True) <= embedding.MAX_TOKENS < emb._model.token_count(text, True)


def test_e5_cuts_a_text_whose_start_is_denser_than_the_rest_to_its_window():
    """A Chinese summary above an English body: a cut in proportion to the whole text's count keeps a
    start that holds more tokens per character than the average, still past the window (598 tokens
    here); the cut is counted again until it fits, and keeps as much as fits."""
    emb = embedding.E5Embedder()
    text = ("摘要：服务器备份失败，请检查日志。" * 20 + "\n\n"
            + "The nightly backup of the file server failed again; check the logs and tell the on-call engineer. " * 40)
    for kind in ("query", "passage"):
        cut = emb._fit(text, kind == "query")
        assert text.startswith(cut)
        n = emb.token_count(cut, kind=kind)
        assert embedding.MAX_TOKENS - 32 <= n <= embedding.MAX_TOKENS < emb.token_count(text, kind=kind), (kind, n)


def test_e5_cuts_long_texts_to_its_window():
    emb = embedding.E5Embedder()
    long = "sauvegarde du serveur " * 1500
    cut = emb._fit(long, True)
    assert emb._model.token_count(cut, True) <= embedding.MAX_TOKENS < emb._model.token_count(long, True)
    assert long.startswith(cut)
    vec = emb.embed([long], kind="query")
    np.testing.assert_allclose(vec, emb.embed([cut], kind="query"), atol=1e-6)


def test_one_texts_threads_follow_the_load_and_never_change_the_vector(monkeypatch):
    """One core for one text on a busy machine (a team of two waits for a descheduled thread at
    every barrier), every core on a quiet one; the vectors are the same either way."""
    assert embedding.single_text_threads(0.3, 2) == 2
    assert embedding.single_text_threads(2.0, 2) == 1 and embedding.single_text_threads(9.5, 4) == 1
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    emb = embedding.E5Embedder()
    assert emb._threads is not None     # the engine's own libgomp, found in this process
    calls: list[int] = []
    real = emb._threads
    monkeypatch.setattr(emb, "_threads", lambda n: (calls.append(n), real(n)))
    text = "vérifie que les sauvegardes de cette nuit se sont bien terminées"
    monkeypatch.setattr(embedding.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    quiet = emb.embed([text], kind="query")
    monkeypatch.setattr(embedding.os, "getloadavg", lambda: (50.0, 50.0, 50.0))
    busy = emb.embed([text], kind="query")
    batch = emb.embed([text, "bonjour"], kind="query")
    assert calls == [emb._cores, 1, emb._cores]    # a batch runs one text per thread: every core
    assert np.allclose(quiet, busy, atol=1e-6) and np.allclose(batch[0], quiet[0], atol=1e-6)


def test_a_thread_count_set_by_the_environment_is_left_alone(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert embedding.E5Embedder()._threads is None
