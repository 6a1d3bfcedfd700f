"""The shared vault: ingest rate with embedding, and scoped query latency over 100,000 records.

ingest   `ingest` of about CHUNKS chunks (incident notes in Markdown files, packed into chunks of the
         default size, 1,200 characters) into a fresh brain with the default vault settings and a
         cold embedding cache, in ROUNDS rounds; each round is paired with the raw embedder embedding
         as many chunks of the same shape (made by the vault's own chunker from other new notes, in
         batches of the default size), the two in turn (the order alternates). Prints s per chunk of
         both sides and the paired ratios vault/raw (min / median / max: the vault's own overhead).
         Target: 1,000 chunks under 60 s.
query    `query.search` for one kernel over RECORDS records of KERNELS kernels in one embedded Chroma
         store (each kernel's records in its own collection, as the vault keeps them). The stored vectors are
         synthetic (random unit vectors with the vault's
         metadata; built once and kept in --store, reused while the count matches); every query text
         is new and embedded by the real model (the cache never hits). Prints the median and p95 of
         the whole call, and of its two parts (embedding, scoped Chroma query). Target: median
         under 50 ms.

    python bench/bench_vault.py [--chunks 1000] [--rounds 5] [--records 100000] [--kernels 10]
                                [--queries 30] [--store /tmp/nika-bench-vault] [--only ingest|query]
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

from isolation import own_operator_home

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


def _notes(folder: Path, n_chunks: int, salt: int) -> None:
    """Markdown files that the default chunker packs into about n_chunks chunks: new texts (salt)."""
    folder.mkdir(parents=True)
    per_chunk = 5  # ~230-character notes: five fill a default 1,200-character chunk
    texts = [f"{prose(salt + i)} Ref {salt}-{i}." for i in range(n_chunks * per_chunk)]
    per_file = 20 * per_chunk
    for f in range(0, len(texts), per_file):
        (folder / f"notes-{f // per_file:03d}.md").write_text("\n\n".join(texts[f:f + per_file]) + "\n")


def bench_ingest(n_chunks: int, rounds: int, work: Path) -> None:
    from nika_brain.federation.vault import settings as vsettings
    from nika_brain.federation.vault.chunking import read_chunks
    brain = new_brain(work / "ingest-brain")   # the default vault settings
    cfg = vsettings.load(brain)
    emb = open_embedder(brain)
    raw = getattr(emb, "inner", emb)
    raw.embed(["warm up"], kind="passage")
    per_round = max(1, n_chunks // rounds)
    chunks_total, ingest_s, raw_s, ratios = 0, [], [], []
    for r in range(rounds):
        salt = random.randrange(10**9)          # new texts every round: a cold embedding cache
        _notes(work / f"docs-{r}", per_round, salt)
        _notes(work / f"raw-{r}", per_round, salt + 10**8)

        def measured(r=r) -> tuple[float, int]:
            t0 = time.perf_counter()
            rep = ingest.ingest(brain, [str(work / f"docs-{r}")], "alpha")
            assert not rep.errors, rep.errors
            return time.perf_counter() - t0, rep.chunks

        def baseline(r=r) -> tuple[float, int]:
            texts = [c.text for p in sorted((work / f"raw-{r}").iterdir())
                     for c in read_chunks(p, chunk_chars=cfg.chunk_chars, max_bytes=10**7)]
            t0 = time.perf_counter()
            for i in range(0, len(texts), cfg.batch):
                raw.embed(texts[i:i + cfg.batch], kind="passage")
            return time.perf_counter() - t0, len(texts)

        if r % 2:
            (m, mc), (b, bc) = measured(), baseline()
        else:
            (b, bc), (m, mc) = baseline(), measured()
        chunks_total += mc
        ingest_s.append(m / mc)
        raw_s.append(b / bc)
        ratios.append((m / mc) / (b / bc))
    med = statistics.median
    print(f"ingest: {chunks_total} chunks of <= {cfg.chunk_chars} characters in {rounds} rounds, "
          f"s per chunk min / median / max: {min(ingest_s):.4f} / {med(ingest_s):.4f} / {max(ingest_s):.4f}")
    print(f"  raw embedder (batch {cfg.batch}), same shape, paired: "
          f"{min(raw_s):.4f} / {med(raw_s):.4f} / {max(raw_s):.4f} s per chunk")
    print(f"  paired ratio vault/raw min / median / max: {min(ratios):.2f} / {med(ratios):.2f} / "
          f"{max(ratios):.2f}x (the vault's own overhead: dedup, ids, Chroma writes)")
    scaled = med(ingest_s) * 1000
    print(f"  1,000 chunks would take {scaled:.1f} s: target < {INGEST_TARGET:.0f} s "
          f"{'met' if scaled < INGEST_TARGET else 'MISSED'}")


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
    ap.add_argument("--rounds", type=int, default=5)
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
            bench_ingest(args.chunks, args.rounds, work)
        finally:
            chroma.reset_cache()
            shutil.rmtree(work, ignore_errors=True)
    if args.only in (None, "query"):
        bench_query(args.records, args.kernels, args.queries, Path(args.store))


if __name__ == "__main__":
    with own_operator_home():
        main()
