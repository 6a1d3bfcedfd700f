"""The shared vault (issue 13): one Chroma store `nika_vault` for every kernel's memory (a live and a
merged collection per kernel, see store.py), scoped per kernel, with grants, dedup at write,
super-chunks, the strategy → atomic hierarchy, and `nika_federation_summaries` (one summary per
kernel per day).

Modules: chroma (the Chroma client, embedded or server, shared with the goals index), records (what
a record is, levels), chunking + ingest (files in), write (the one write path, dedup), query (scoped
reads: search, get, records, tree), grants (YAML files in grants/), superchunks, summaries, admin
(stats, purge), settings (`federation.vault`), store (collections).

The plain Python API other parts use:
- `query.search(brain, text, kernel=..., k=5)` → list[Record]   (kernel observe --query)
- `query.records(brain, kernel_id)` → (ids, embeddings)         (topic clusters, issue 14)
- `summaries.put(brain, kernel_id, key, text, meta)`            (handover, issue 14)
"""
