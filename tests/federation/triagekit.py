"""A federation brain for triage tests: the seed's five kernels + the generalist, from the French
routes file kept in bench/triage_fr/ (the same set the bench reports on)."""
from __future__ import annotations

from pathlib import Path

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
    """The French set's kernels as kernel.yml files; `policy[kid]` adds region/data_class."""
    _, entries = bench.read_routes(FR_ROUTES)
    for e in entries:
        extra = policy.get(e.id, {})
        write_kernel(brain, e.id, e.goal, tags=e.domains, examples=e.examples, **extra)
