"""`rag stats` and `rag purge`: what the vault holds, and removing what a killed kernel left."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from nika_brain.engine import signals
from nika_brain.federation.vault import grants as vgrants
from nika_brain.federation.vault import store as vstore
from nika_brain.federation.vault import summaries as vsummaries
from nika_brain.federation.vault.records import check_kernel

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain


def stats(brain: Brain, kernel_id: str | None = None) -> dict:
    st = vstore.store(brain)
    with st.errors("vault stats"):
        ids = [check_kernel(kernel_id)] if kernel_id else vstore.kernels(brain)
        kernels: dict[str, dict] = {}
        for k in ids:
            live = vstore.get_all(vstore.collection(brain, k, create=False), None, ["metadatas"])
            merged = vstore.get_all(vstore.collection(brain, k, "merged", create=False), None,
                                    ["metadatas"])
            if not live["ids"] and not merged["ids"]:
                continue
            metas = live["metadatas"]
            kernels[k] = {
                "records": len(live["ids"]) + len(merged["ids"]), "live": len(live["ids"]),
                "super": sum(1 for m in metas if m.get("kind") == "super"),
                "superseded": len(merged["ids"]),
                "duplicates_dropped": sum(int(m.get("dups", 0) or 0) for m in metas + merged["metadatas"]
                                          if m.get("kind") != "super"),
                "levels": dict(sorted(Counter(str(m.get("level")) for m in metas).items())),
            }
        sums = vsummaries.list_summaries(brain, kernel_id=kernel_id)
    for k, row in kernels.items():
        row["summaries"] = sum(1 for s in sums if s.kernel_id == k)
    return {"store": st.mode, "where": st.where,
            "records": sum(row["records"] for row in kernels.values()),
            "summaries": len(sums), "grants": len(vgrants.list_grants(brain)), "kernels": kernels}


def purge(brain: Brain, kernel_id: str) -> dict:
    """Delete every vault record and summary of a kernel, and the grants naming it."""
    check_kernel(kernel_id)
    st = vstore.store(brain)
    n = 0
    with st.errors("vault purge"), st.writer():
        for role in vstore.ROLES:
            col = vstore.collection(brain, kernel_id, role, create=False)
            if col is not None:
                n += col.count()
                st.drop(vstore.name(kernel_id, role))
    n_sum = vsummaries.purge(brain, kernel_id)
    n_grants = vgrants.drop_kernel(brain, kernel_id)
    out = {"kernel": kernel_id, "records": n, "summaries": n_sum, "grants": n_grants}
    signals.emit(brain, "VAULT_PURGE", reason=f"kernel {kernel_id}'s vault records purged",
                 payload=out, publish=False)
    return out
