"""The vault's dedup under concurrency on a shared Chroma server (issue 22, item 6): two writers
(two machines) ingest the same chunk, worded apart, at the same moment. Each writer waits for the
other at its near-neighbour query (dedup's read), so without the cross-machine write lock both would read
"absent" and both add; with it, the second reads the first's record and drops its twin."""
from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
import redis

from nika_brain.brain import Brain
from nika_brain.federation.vault import chroma, write
from nika_brain.federation.vault import store as vstore
from tests.federation.chroma_server import chroma_server  # noqa: F401  (fixture)
from tests.federation.vaultkit import reset_store
from tests.kit.wait import until

TEXTS = ("The backup server runs restic at two.", "the backup server runs restic at two")


def _brain(brain, chroma_server, redis_url: str | None) -> Brain:  # noqa: F811
    fed = f"  chroma_url: {chroma_server}\n" + (f"  redis_url: {redis_url}\n" if redis_url else "")
    (brain.root / "nika-brain.yml").write_text(f"version: 1\nlock_poll: 0.01\nfederation:\n{fed}")
    (brain.kernels_dir / "alpha").mkdir(parents=True, exist_ok=True)
    (brain.kernels_dir / "alpha" / "kernel.yml").write_text("id: alpha\ngoal: goal of alpha\n")
    chroma.reset_cache()
    b = Brain.at(brain.root)
    reset_store(b)
    return b


def _race(b: Brain, monkeypatch) -> int:
    # Each writer, just before it queries its near neighbours (the read half of dedup), waits for the
    # other, on conditions rather than a timeout (a slow writer on a busy machine is waited for however
    # long it takes): the other about to query too (no lock between them: both are let go at once,
    # both read "no twin" and both add), or past its query, or waiting for the Redis write lock this
    # one holds (serialised: it will read this one's record).
    where: dict[int, str] = {}
    meet = threading.Barrier(2)
    real_writer, real_collection = write.shared_writer, vstore.collection
    url = (b.config.federation or {}).get("redis_url")
    lock = redis.Redis.from_url(url) if url else None

    @contextlib.contextmanager
    def writer(brain, kernel_id, mode, **kw):
        where[threading.get_ident()] = "waiting for the write lock"
        with real_writer(brain, kernel_id, mode, **kw):
            yield

    def other_writer() -> str | None:
        me = threading.get_ident()
        there = [w for t, w in where.items() if t != me]
        if not there:
            return None
        if there[0] == "waiting for the write lock":
            held = lock is not None and lock.exists("nika:lease:vault:alpha")
            return "behind the lock" if held else None
        return there[0]

    class Col:
        def __init__(self, col):
            self._col = col

        def __getattr__(self, name):
            return getattr(self._col, name)

        def query(self, **kw):
            me = threading.get_ident()
            where[me] = "querying"
            if until(other_writer, what="the other writer at its neighbour query or behind the write "
                                        "lock") == "querying":
                meet.wait(timeout=120)   # both are there: let go together
            try:
                return self._col.query(**kw)
            finally:
                where[me] = "queried"

    def collection(brain, kernel, *a, **kw):
        col = real_collection(brain, kernel, *a, **kw)
        return col if col is None else Col(col)
    # The collection holds a record already (an unrelated one): two first writes racing on an empty
    # collection meet Chroma's own "Error creating hnsw segment reader: Nothing found on disk", which
    # is not the dedup race under test. Its count is left out of what the race kept.
    other = np.zeros((1, 8), dtype=np.float32)
    other[0, 0] = 1.0
    write.add(b, "alpha", [write.Chunk("The coffee machine on floor 3 is broken.", "other.md")], other)
    monkeypatch.setattr(vstore, "collection", collection)
    monkeypatch.setattr(write, "shared_writer", writer)
    vec = np.ones((1, 8), dtype=np.float32) / np.sqrt(8)
    errors: list[BaseException] = []

    def one(text):
        try:
            write.add(b, "alpha", [write.Chunk(text, "ops.md")], vec)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
    threads = [threading.Thread(target=one, args=(t,)) for t in TEXTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with vstore.store(b).errors():
        return vstore.collection(b, "alpha").count() - 1


def test_two_machines_ingesting_one_chunk_at_once_keep_one(brain, chroma_server, redis_server,  # noqa: F811
                                                           monkeypatch):
    b = _brain(brain, chroma_server, redis_server)
    assert chroma.open_store(b).mode == "server"
    assert _race(b, monkeypatch) == 1


@pytest.mark.parametrize("why", ["the race is real without the lock"])
def test_without_a_shared_redis_the_race_keeps_both(brain, chroma_server, monkeypatch, why):  # noqa: F811
    b = _brain(brain, chroma_server, None)  # what the lock prevents: the test above could fail
    assert _race(b, monkeypatch) == 2, why
