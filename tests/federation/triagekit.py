"""A federation brain for triage tests: the seed's five kernels + the generalist, from the French
routes file kept in bench/triage_fr/ (the same set the bench reports on)."""
from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

from nika_brain.brain import Brain
from nika_brain.federation.triage import bench
from nika_brain.support.yamlsafe import dumps

ROOT = Path(__file__).resolve().parents[2]
FR_ROUTES = ROOT / "bench" / "triage_fr" / "routes.yml"
FR_QUERIES = ROOT / "bench" / "triage_fr" / "queries.jsonl"
ALPHA, BETA, GAMMA, DELTA, EPSILON, GENERALIST = (
    "kernel-alpha-bcub3-it", "kernel-beta-bcub3-lab", "kernel-gamma-client-mission",
    "kernel-delta-iot-edge", "kernel-epsilon-veille-ao", "kernel-generalist")


def write_kernel(brain: Brain, kid: str, goal: str, *, tags=(), examples=(), region=None,
                 data_class=None, status="active") -> Path:
    folder = brain.kernels_dir / kid
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"id": kid, "goal": goal, "tags": list(tags), "examples": list(examples), "status": status}
    if region:
        doc["region"] = region
    if data_class:
        doc["data_class"] = data_class
    path = folder / "kernel.yml"
    path.write_text(dumps(doc), encoding="utf-8")
    return path


def seed_kernels(brain: Brain, **policy: dict) -> None:
    """The French set's kernels as kernel.yml files; `policy[kid]` adds region/data_class. The brain's
    embedding cache starts with the set's texts (as in a brain that has embedded these kernels before):
    the ~100 texts are embedded once per test process, not once per brain; anything else a test embeds
    (its prompts, an edited goal) is embedded by the model as usual."""
    _, entries = bench.read_routes(FR_ROUTES)
    for e in entries:
        extra = policy.get(e.id, {})
        write_kernel(brain, e.id, e.goal, tags=e.domains, examples=e.examples, **extra)
    seeded = _seeded_cache(entries)
    target = brain.state_dir / "embeddings" / seeded.name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(seeded, target)


_SEEDED: list[Path] = []


def _seeded_cache(entries) -> Path:
    """An embedding cache file (the brain's own format, embedding.cache_path) holding every text the
    goals index embeds for `entries` (goal lines, domains, canonical prompts)."""
    if not _SEEDED:
        from nika_brain.federation.embedding import CachedEmbedder, cache_path, open_embedder
        from nika_brain.federation.triage.goals import EMBED_KIND, Entry
        model = open_embedder(None)
        raw = getattr(model, "inner", model)
        folder = Path(tempfile.mkdtemp(prefix="nika-seeded-embeddings-"))
        atexit.register(shutil.rmtree, folder, True)
        path = cache_path(SimpleNamespace(state_dir=folder), raw.model_id)   # type: ignore[arg-type]
        assert path is not None
        cache = CachedEmbedder(raw, path)
        texts = [t for e in entries
                 for t in [Entry(e.id, e.goal, tuple(e.domains)).goal_line(), *e.domains, *e.examples]]
        cache.embed(texts, kind=EMBED_KIND)
        db = cache._conn()
        if db is not None:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.close()
        _SEEDED.append(path)
    return _SEEDED[0]


def policy_config(*sensitive: str) -> str:
    """nika-brain.yml with two data classes: public, and sensitive (these regexes) only for region fr."""
    return ("version: 1\nlock_poll: 0.01\nfederation:\n  triage:\n    default: kernel-generalist\n"
            "    data_classes:\n      - public\n"
            f"      - {{name: sensitive, patterns: {json.dumps(list(sensitive))}, regions: [fr]}}\n")
