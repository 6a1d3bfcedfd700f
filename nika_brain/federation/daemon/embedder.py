"""The resident embedder: the model loaded once, in the daemon, served over the brain's unix socket
(federation/resident.py has the protocol and the client). Serves `embed` (the embedding.py backend
`ResidentEmbedder` uses it), `triage` (what `nika-brain ask` decides, without loading anything) and
`hint` (the UserPromptSubmit wrong-kernel hint, so the hook process loads no model).
"""
from __future__ import annotations

import base64
import json
import os
import socketserver
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation import resident

MAX_REQUEST = 4 * 1024 * 1024


class EmbedderService:
    name = "embedder"
    every = 30.0

    def __init__(self, brain: Brain):
        self.brain = brain
        self.server: socketserver.ThreadingUnixStreamServer | None = None
        self.lock = threading.Lock()
        self._triage: tuple[Any, Any] | None = None
        # the model runs on two long-lived threads, not on each request's own: OpenMP keeps a team of
        # worker threads per calling thread, and a new caller per request builds one every time.
        # Prompts (triage, hint, one query text) and bulk embedding (the vault's chunks) each have
        # their own, so a prompt never waits behind a batch of chunks.
        self.pools = {"prompt": ThreadPoolExecutor(1, thread_name_prefix="embedder-prompts"),
                      "bulk": ThreadPoolExecutor(1, thread_name_prefix="embedder-bulk")}

    def start(self) -> None:
        from nika_brain.federation.embedding import open_embedder
        self.emb = open_embedder(self.brain)
        self.emb.embed(["warm up"], kind="query")  # the model is loaded now, not at the first prompt
        path = resident.socket_path(self.brain.state_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.unlink()  # ours: the host holds the brain's daemon lock
        svc = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                raw = self.rfile.readline(MAX_REQUEST)
                try:
                    req = json.loads(raw)
                    req = req if isinstance(req, dict) else {}
                    answer = svc.pools[svc.pool_of(req)].submit(svc.answer, req).result()
                except (ValueError, BrainError) as exc:
                    answer = {"error": str(exc)}
                except Exception as exc:  # noqa: BLE001 (an answer, never a dead server thread)
                    answer = {"error": f"{type(exc).__name__}: {exc}"}
                self.wfile.write(json.dumps(answer).encode("utf-8"))

        self.server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
        self.server.daemon_threads = True
        os.chmod(path, 0o600)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 1.0},
                         daemon=True, name="embedder").start()

    def tick(self) -> None:
        pass

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            for pool in self.pools.values():
                pool.shutdown(wait=False, cancel_futures=True)
            try:
                resident.socket_path(self.brain.state_dir).unlink()
            except OSError:
                pass

    # ---- requests ----------------------------------------------------------------------------
    @staticmethod
    def pool_of(req: dict) -> str:
        """A batch of texts to embed is bulk work; a prompt, a hint or one query text is a prompt's."""
        texts = req.get("texts")
        return "bulk" if req.get("op") == "embed" and isinstance(texts, list) and len(texts) > 1 else "prompt"

    def triage(self) -> Any:
        """The Triage on the current goals index (reopened when the index file changed)."""
        from nika_brain.federation.triage import goals
        from nika_brain.federation.triage.decide import Triage
        index = goals.current(self.brain, rebuild=True)
        with self.lock:
            if self._triage is None or self._triage[0].digest != index.digest:
                self._triage = (index, Triage(index, getattr(self.emb, "inner", self.emb),
                                              goals.settings(self.brain)))
            return self._triage[1]

    def answer(self, req: dict) -> dict:
        op = req.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "model_id": self.emb.model_id, "dim": self.emb.dim}
        if op == "embed":
            texts, kind = req.get("texts"), req.get("kind")
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise BrainError("embed: texts must be a list of strings")
            vecs = self.emb.embed(texts, kind=kind)
            return {"model_id": self.emb.model_id, "dim": self.emb.dim, "n": len(texts),
                    "vectors": base64.b64encode(vecs.astype("float32").tobytes()).decode("ascii")}
        if op == "triage":
            prompt = req.get("prompt")
            if not isinstance(prompt, str):
                raise BrainError("triage: prompt must be a string")
            return {"decision": self.triage().decide(prompt, context=req.get("context")).as_dict()}
        if op == "hint":   # what triage.hint decides in a hook process, on the resident Triage
            from nika_brain.federation.triage import hint
            prompt, kernel = req.get("prompt"), req.get("kernel")
            if not isinstance(prompt, str) or not isinstance(kernel, str):
                raise BrainError("hint: prompt and kernel must be strings")
            if not prompt.strip():
                return {"hint": None}
            tri = self.triage()
            if kernel not in tri.index.model.kernels:
                return {"hint": None}
            d = tri.decide(prompt[:hint.MAX_HINT_PROMPT], context=kernel, aspects=False)
            return {"hint": hint.hint_text(d) if d.wrong_kernel else None}
        raise BrainError(f"unknown op {op!r}")


def service(brain: Brain) -> EmbedderService:
    return EmbedderService(brain)
