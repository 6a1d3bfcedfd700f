"""Topic-diversity trigger: the measure over a kernel's 10,000 records (issue 14: under 5 s).

Records are vectors as the vault stores them (e5-small passages, 384-d). Embedding 10,000 texts
takes minutes on this machine and is the ingest's cost, not the trigger's, so the script embeds 140
real sentences (20 per topic, 7 topics, from templates) and derives 10,000 records from them with
small Gaussian noise (sigma 0.01 per dimension, renormalised): same geometry, realistic size. It
prints the median time of `triggers.topic_clusters` over RUNS runs and the clusters it found.

    python bench/bench_diversity.py [--records 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from isolation import own_operator_home

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nika_brain.federation.spawning import triggers  # noqa: E402
from nika_brain.federation.stealing.aptitude import open_embedder  # noqa: E402

TOPICS = {
    "backup": ("restore the {} backup of the file server", "the {} backup job failed on the NAS"),
    "patent": ("draft the {} patent claims for the sensor", "prior art search for the {} patent"),
    "invoice": ("send the {} invoice to the client", "the client has not paid the {} invoice"),
    "tender": ("answer the {} public tender of the city", "deadline of the {} call for tenders"),
    "iot": ("the {} sensor on the edge gateway stopped reporting", "update the {} IoT gateway firmware"),
    "recipe": ("a {} chocolate cake recipe", "how long to bake the {} sponge cake"),
    "football": ("the {} football match ended two to one", "who scored in the {} football final"),
}
WORDS = ("nightly", "weekly", "monthly", "urgent", "new", "old", "main", "second", "last", "next")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    import numpy as np

    texts = [t.format(w) for pair in TOPICS.values() for t in pair for w in WORDS]
    emb = open_embedder(None)
    base = emb.embed(texts, kind="passage")
    ref = triggers.reference_mean(emb)
    rng = np.random.default_rng(0)
    idx = rng.integers(len(base), size=args.records)
    x = base[idx] + rng.normal(0, 0.01, size=(args.records, base.shape[1])).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    times, res = [], None
    for _ in range(args.runs):
        t0 = time.perf_counter()
        res = triggers.topic_clusters(x, ref)
        times.append(time.perf_counter() - t0)
    print(
        f"topic diversity over {args.records:,} records: median {statistics.median(times):.3f} s "
        f"(runs: {', '.join(f'{t:.3f}' for t in times)}); {res['clusters']} clusters {res['sizes']} "
        f"by {res['method']}; {len(TOPICS)} topics planted; target < 5 s"
    )
    return 0


if __name__ == "__main__":
    with own_operator_home():
        raise SystemExit(main())
