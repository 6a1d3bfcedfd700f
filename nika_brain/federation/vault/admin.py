"""`rag stats` and `rag purge`: what the vault holds, and removing what a killed kernel left."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from nika_brain.federation.vault import grants as vgrants
from nika_brain.federation.vault import store as vstore
from nika_brain.federation.vault import summaries as vsummaries
from nika_brain.federation.vault.records import check_kernel

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain


def stats(brain: Brain, kernel_id: str | None = None) -> dict:
    st = vstore.store(brain)
    where = {"kernel_id": check_kernel(kernel_id)} if kernel_id else None
    with st.errors("vault stats"):
        got = vstore.get_all(vstore.vault(brain), where, ["metadatas"]) if where else \
            _all(vstore.vault(brain))
        sums = vsummaries.list_summaries(brain, kernel_id=kernel_id)
    kernels: dict[str, dict] = {}
    for meta in got["metadatas"]:
        k = str(meta.get("kernel_id"))
        row = kernels.setdefault(k, {"records": 0, "live": 0, "super": 0, "superseded": 0,
                                     "duplicates_dropped": 0, "levels": Counter()})
        row["records"] += 1
        row["live"] += 0 if meta.get("superseded_by") else 1
        row["super"] += 1 if meta.get("kind") == "super" else 0
        row["superseded"] += 1 if meta.get("superseded_by") else 0
        row["duplicates_dropped"] += int(meta.get("dups", 0) or 0) if meta.get("kind") != "super" else 0
        row["levels"][str(meta.get("level"))] += 1
    for k, row in kernels.items():
        row["levels"] = dict(sorted(row["levels"].items()))
        row["summaries"] = sum(1 for s in sums if s.kernel_id == k)
    return {"store": st.mode, "where": st.where, "records": len(got["ids"]),
            "summaries": len(sums), "grants": len(vgrants.list_grants(brain)),
            "kernels": dict(sorted(kernels.items()))}


def _all(col) -> dict:
    out: dict[str, list] = {"ids": [], "metadatas": []}
    offset = 0
    while True:
        res = col.get(include=["metadatas"], limit=5000, offset=offset)
        out["ids"] += res["ids"]
        out["metadatas"] += res["metadatas"]
        if len(res["ids"]) < 5000:
            return out
        offset += 5000


def purge(brain: Brain, kernel_id: str) -> dict:
    """Delete every vault record and summary of a kernel, and the grants naming it."""
    check_kernel(kernel_id)
    st = vstore.store(brain)
    with st.errors("vault purge"), st.writer():
        col = vstore.vault(brain)
        ids = vstore.get_all(col, {"kernel_id": kernel_id}, [])["ids"]
        for start in range(0, len(ids), 5000):
            col.delete(ids=ids[start:start + 5000])
    n_sum = vsummaries.purge(brain, kernel_id)
    n_grants = vgrants.drop_kernel(brain, kernel_id)
    return {"kernel": kernel_id, "records": len(ids), "summaries": n_sum, "grants": n_grants}
