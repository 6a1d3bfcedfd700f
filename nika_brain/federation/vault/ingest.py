"""`rag ingest`: files and folders into a kernel's vault records, in embedded batches.

Per file: read and chunk (chunking.py), skip the chunks already stored (their id is the hash of
kernel + text, so a resumed burst never duplicates), embed the rest in batches, and add them through
write.add (dedup at write). A bad file is reported in one line and the others go on. Each batch is
written as soon as it is embedded, so an interruption loses at most one batch of work.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from nika_brain.errors import BrainError
from nika_brain.federation.vault import settings as vsettings
from nika_brain.federation.vault import store as vstore
from nika_brain.federation.vault.chunking import discover, read_chunks
from nika_brain.federation.vault.records import (
    DEFAULT_LEVEL,
    check_kernel,
    check_level,
    record_id,
)
from nika_brain.federation.vault.write import (
    AddResult,
    Chunk,
    add,
    check_parent,
    existing_ids,
)
from nika_brain.support import clock

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain


@dataclass
class IngestReport:
    files: int = 0
    chunks: int = 0
    added: int = 0
    already: int = 0
    dropped: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)  # (file, message)

    def to_json(self) -> dict:
        return {"files": self.files, "chunks": self.chunks, "added": self.added,
                "already": self.already, "dropped_duplicates": self.dropped,
                "errors": [{"file": f, "error": m} for f, m in self.errors]}


Progress = Callable[[int, int], None]   # (chunks done, chunks known so far)


def ingest(brain: Brain, paths: list[str], kernel_id: str, *, level: str = DEFAULT_LEVEL,
           parent: str = "", progress: Progress | None = None,
           now: datetime | None = None) -> IngestReport:
    check_kernel(kernel_id)
    check_level(level)
    cfg = vsettings.load(brain)
    if parent:
        check_parent(brain, kernel_id, level, parent)
    now = now or clock.now()
    files, missing = discover(paths)
    report = IngestReport(errors=list(missing))
    # Read everything first (cheap beside embedding) so the progress bar knows the total.
    pending: list[Chunk] = []
    for path in files:
        try:
            chunks = read_chunks(path, chunk_chars=cfg.chunk_chars,
                                 max_bytes=int(cfg.max_file_mb * 1_000_000))
        except BrainError as exc:
            report.errors.append((str(path), exc.message))
            continue
        except OSError as exc:
            report.errors.append((str(path), f"cannot read: {exc.strerror}"))
            continue
        report.files += 1
        pending += chunks
    report.chunks = len(pending)
    done = 0
    if progress:
        progress(0, len(pending))
    total = AddResult()
    for start in range(0, len(pending), cfg.batch):
        batch = pending[start:start + cfg.batch]
        ids = [record_id(kernel_id, c.text) for c in batch]
        have = existing_ids(brain, kernel_id, ids)
        todo = [c for c, rid in zip(batch, ids) if rid not in have]
        total.already += [rid for rid in ids if rid in have]   # (a membership test in `todo` was quadratic)
        if todo:
            vecs = vstore.embed(brain, [c.text for c in todo], "passage")
            total.merge(add(brain, kernel_id, todo, vecs, level=level, parent=parent, now=now,
                            threshold=cfg.dedup_threshold))
        done += len(batch)
        if progress:
            progress(done, len(pending))
    report.added, report.already, report.dropped = len(total.added), len(total.already), len(total.dropped)
    return report
