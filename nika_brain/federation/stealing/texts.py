"""Where a work-stealing task's text lives: in the brain, never on the bus.

- `kernels/<owner>/tasks/<task>.<sha>.json` {"summary", "prompt"}: written when the task is enqueued;
- `kernels/<owner>/tasks/<task>.result.<sha>.json` {"result"}: a run's result (named by its hash, so a
  late run never overwrites the committed one; the done record names the committed file).
The bus keeps only ids, hashes and references: the task's record `ws:task:<id>` has `ref` and `sha`
(sha256 of the file's bytes), its done record `ws:done:<id>` `result_ref` and `result_sha`. A reader
checks the hash: a file changed after the fact (the owner's agent can write its own folder) is refused,
not run or believed.

Who reads: the owner (its own folder), the daemon's workers on the host (to score an offer and to
deliver a granted task to its kernel), and a sandboxed kernel through its door, for a task granted to it
and nothing else (`readable_by`, the door's `task` / `task_result` ops: federation/doors).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from nika_brain.errors import BrainError

FOLDER = "tasks"
MAX_RESULT = 1 << 20     # a result file is at most 1 MiB of JSON


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Texts:
    """The task texts of one brain (`brain.root`, `brain.kernels_dir`)."""

    def __init__(self, brain: Any):
        self.root = Path(brain.root).resolve()
        self.kernels_dir = Path(brain.kernels_dir).resolve()
        self.fsync = bool(getattr(getattr(brain, "config", None), "fsync", False))

    # -- paths ----------------------------------------------------------------------------------
    def _path(self, owner: str, name: str) -> Path:
        return self.kernels_dir / owner / FOLDER / name

    def _ref(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else str(path)

    def _resolve(self, ref: Any) -> Path:
        if not isinstance(ref, str) or not ref:
            raise BrainError("a task record without a text reference (written before texts left the bus?)")
        path = (self.root / ref).resolve()
        if not path.is_relative_to(self.kernels_dir) or path.parent.name != FOLDER:
            raise BrainError(f"not a task text reference: {ref}")
        return path

    def _write(self, owner: str, stem: str, obj: Any) -> tuple[str, str]:
        data = (json.dumps(obj, ensure_ascii=False, sort_keys=True, default=str) + "\n").encode("utf-8")
        digest = sha256(data)
        path = self._path(owner, f"{stem}.{digest[:16]}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        return self._ref(path), digest

    def _read(self, ref: Any, sha: Any) -> Any:
        path = self._resolve(ref)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise BrainError(f"task text {ref} is gone") from None
        if sha256(data) != sha:
            raise BrainError(f"task text {ref} changed after it was recorded (sha256 mismatch): refused")
        return json.loads(data.decode("utf-8"))

    # -- a task's text --------------------------------------------------------------------------
    def put_task(self, owner: str, tid: str, summary: str, prompt: str) -> dict:
        """Write the task's text; returns what its bus record keeps: {"ref", "sha"}."""
        ref, sha = self._write(owner, tid, {"summary": summary, "prompt": prompt})
        return {"ref": ref, "sha": sha}

    def task(self, record: dict) -> dict:
        """{"summary", "prompt"} of a task record (its hash checked)."""
        body = self._read(record.get("ref"), record.get("sha"))
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            raise BrainError(f"task text {record.get('ref')} is not a task")
        return {"summary": str(body.get("summary") or ""), "prompt": body["prompt"]}

    def full(self, record: dict) -> dict:
        """The record with its text: what a run gets."""
        return {**record, **self.task(record)}

    # -- its result -----------------------------------------------------------------------------
    def put_result(self, record: dict, result: Any) -> dict:
        """Write a run's result next to the task; returns {"result_ref", "result_sha"} for the done
        record. Written before the done record's SET NX; each file is named by its hash, so a run that
        loses the SET NX leaves a file no record names, never a changed committed one."""
        data = json.dumps({"result": result}, ensure_ascii=False, default=str)
        if len(data) > MAX_RESULT:
            result = {"failed": f"the result is over {MAX_RESULT} bytes of JSON"}
        ref, sha = self._write(str(record["owner"]), f"{record['id']}.result", {"result": result})
        return {"result_ref": ref, "result_sha": sha}

    def result(self, done: dict | None) -> Any:
        """The committed result of a done record (None when there is none)."""
        if not done:
            return None
        if "result_ref" not in done:
            return done.get("result")   # a record written without a result file (a followed task)
        body = self._read(done["result_ref"], done.get("result_sha"))
        return body.get("result") if isinstance(body, dict) else None


def readable_by(kernel: str, record: dict, grants: list[dict]) -> bool:
    """The door's rule: a kernel reads a task's text when it owns the task or the newest decision on
    it grants it to that kernel; nothing else."""
    if record.get("owner") == kernel:
        return True
    return bool(grants) and grants[-1].get("to") == kernel
