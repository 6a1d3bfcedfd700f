"""The shared vault: ingest rate with embedding, and scoped query latency over 100,000 records.

ingest   `rag ingest` of CHUNKS chunks (incident notes in Markdown files, one paragraph a chunk) into a
         fresh brain with a cold embedding cache: chunks/s, embedding, dedup and Chroma writes
         included; beside it the embedder's own raw rate on a sample of the same texts at the same
         batch size, and the ratio (the vault's overhead). Target: 1,000 chunks under 60 s.
query    `query.search` for one kernel over RECORDS records of KERNELS kernels in one embedded Chroma
         store (each kernel's records in its own collection, as the vault keeps them). The stored vectors are
         synthetic (random unit vectors with the vault's
         metadata; built once and kept in --store, reused while the count matches); every query text
         is new and embedded by the real model (the cache never hits). Prints the median and p95 of
         the whole call, and of its two parts (embedding, scoped Chroma query). Target: median
         under 50 ms.

    python bench/bench_vault.py [--chunks 1000] [--records 100000] [--kernels 10] [--queries 30]
                                [--store /tmp/nika-bench-vault] [--only ingest|query]
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nika_brain.brain import Brain
from nika_brain.federation.embedding import open_embedder
from nika_brain.federation.vault import chroma, ingest, query
from nika_brain.federation.vault import store as vstore
from nika_brain.federation.vault.records import Record
from tests.federation.vaultkit import prose

INGEST_TARGET = 60.0    # seconds for 1,000 chunks
QUERY_TARGET = 50.0     # ms, median


def new_brain(root: Path, config: str = "version: 1\n") -> Brain:
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "nika-brain.yml").write_text(config)
    return Brain.at(root)


def bench_ingest(n_chunks: int, work: Path) -> None:
    brain = new_brain(work / "ingest-brain",
                      "version: 1\nfederation:\n  vault:\n    chunk_chars: 300\n    batch: 64\n")
    docs = work / "docs"
    docs.mkdir()
    salt = random.randrange(10**9)          # new texts every run: a cold embedding cache
    texts = [f"{prose(salt + i)} Ref {salt}-{i}." for i in range(n_chunks)]
    per_file = 20
    for f in range(0, n_chunks, per_file):
        (docs / f"notes-{f // per_file:03d}.md").write_text("\n\n".join(texts[f:f + per_file]) + "\n")
    emb = open_embedder(brain)
    raw = getattr(emb, "inner", emb)
    raw.embed(["warm up"], kind="passage")
    sample = texts[: min(256, n_chunks)]
    t0 = time.perf_counter()
    for i in range(0, len(sample), 64):
        raw.embed(sample[i:i + 64], kind="passage")
    raw_rate = len(sample) / (time.perf_counter() - t0)
    c0 = time.process_time()
    t0 = time.perf_counter()
    rep = ingest.ingest(brain, [str(docs)], "alpha")
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    rate = rep.chunks / wall
    print(f"ingest: {rep.chunks} chunks from {rep.files} files in {wall:.1f} s = {rate:.1f} chunks/s "
          f"({rep.added} added, {rep.dropped} near-duplicates dropped, {len(rep.errors)} errors); "
          f"CPU time {cpu:.1f} s")
    print(f"  embedder raw rate: {raw_rate:.1f} passages/s (sample of {len(sample)}, batch 64); "
          f"vault/raw = {rate / raw_rate:.2f}")
    scaled = wall * 1000 / max(rep.chunks, 1)
    print(f"  1,000 chunks would take {scaled:.1f} s: target < {INGEST_TARGET:.0f} s "
          f"{'MET' if scaled < INGEST_TARGET else 'NOT MET'}")


def build_store(store_dir: Path, n_records: int, n_kernels: int) -> Brain:
    import numpy as np
    brain_dir = store_dir / "brain"
    marker = store_dir / f"built-v2-{n_records}-{n_kernels}"
    if marker.exists():
        chroma.reset_cache()
        return Brain.at(brain_dir)
    shutil.rmtree(store_dir, ignore_errors=True)
    brain = new_brain(brain_dir)
    st = chroma.open_store(brain)
    rng = np.random.default_rng(13)
    t0 = time.perf_counter()
    batch = 5000
    per_kernel = n_records // n_kernels
    with st.writer():
        for k in range(n_kernels):
            kernel = f"k{k:02d}"
            col = vstore.collection(brain, kernel)
            for start in range(0, per_kernel, batch):
                n = min(batch, per_kernel - start)
                vecs = rng.standard_normal((n, 384)).astype(np.float32)
                vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
                recs = [Record(id=f"{kernel}:{start + i:08d}", kernel_id=kernel,
                               text=f"synthetic record {start + i} of {kernel}",
                               level=("task", "atomic")[(start + i) % 2], added="2026-11-30T00:00:00Z",
                               day="2026-11-30") for i in range(n)]
                col.add(ids=[r.id for r in recs], embeddings=vecs, documents=[r.text for r in recs],
                        metadatas=[r.meta() for r in recs])
    print(f"  (built the {n_records:,}-record store in {time.perf_counter() - t0:.0f} s, kept in {store_dir})")
    marker.write_text("ok\n")
    return brain


def bench_query(n_records: int, n_kernels: int, n_queries: int, store_dir: Path) -> None:
    brain = build_store(store_dir, n_records, n_kernels)
    count = sum(vstore.collection(brain, k, create=False).count() for k in vstore.kernels(brain))
    emb = open_embedder(brain)
    salt = random.randrange(10**9)
    texts = [f"what happened to {prose(salt + i)[:60]}? ({salt}-{i})" for i in range(n_queries + 3)]
    for t in texts[:3]:  # warm: model, client, HNSW index loaded
        query.search(brain, t, kernel="k03", k=5)
    whole, cpu, embed_ms, chroma_ms = [], [], [], []
    for i, t in enumerate(texts[3:]):
        kernel = f"k{i % n_kernels:02d}"
        c0 = time.process_time()
        t0 = time.perf_counter()
        recs = query.search(brain, t, kernel=kernel, k=5)
        whole.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        assert recs and all(r.kernel_id == kernel for r in recs)
        t1 = time.perf_counter()
        vec = emb.embed([t + " (again)"], kind="query")[0]
        t2 = time.perf_counter()
        query.search(brain, kernel=kernel, k=5, embedding=vec)
        t3 = time.perf_counter()
        embed_ms.append((t2 - t1) * 1000)
        chroma_ms.append((t3 - t2) * 1000)

    def p95(xs):
        return sorted(xs)[max(0, round(0.95 * len(xs)) - 1)]
    med = statistics.median(whole)
    print(f"query: {count:,} records of {n_kernels} kernels, {len(whole)} scoped queries (k=5), "
          f"embedding included: median {med:.1f} ms, p95 {p95(whole):.1f} ms: target < {QUERY_TARGET:.0f} ms "
          f"{'MET' if med < QUERY_TARGET else 'NOT MET'}")
    print(f"  parts: embedding median {statistics.median(embed_ms):.1f} ms, scoped Chroma query median "
          f"{statistics.median(chroma_ms):.1f} ms (p95 {p95(chroma_ms):.1f} ms); CPU time of the whole "
          f"call median {statistics.median(cpu):.1f} ms (all threads: on a busy machine, wall >> CPU)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=1000)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--kernels", type=int, default=10)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--store", default=os.path.join(tempfile.gettempdir(), "nika-bench-vault"))
    ap.add_argument("--only", choices=("ingest", "query"))
    args = ap.parse_args()
    for name in ("NIKA_KERNEL_ID", "NIKA_BRAIN_DIR"):
        os.environ.pop(name, None)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if args.only in (None, "ingest"):
        work = Path(tempfile.mkdtemp(prefix="nika-bench-ingest-"))
        try:
            bench_ingest(args.chunks, work)
        finally:
            chroma.reset_cache()
            shutil.rmtree(work, ignore_errors=True)
    if args.only in (None, "query"):
        bench_query(args.records, args.kernels, args.queries, Path(args.store))


if __name__ == "__main__":
    main()
