"""The federation's Chroma store: embedded under `<brain>/.nika/chroma`, or a Chroma server.

`open_store(brain)` gives a `VectorStore`. Its collections are created with the cosine space and no
embedding function: nika-brain always passes its own embeddings (see `embedding.py`), so Chroma never
downloads or runs a model of its own.

Two modes:
- embedded (default): a `PersistentClient` on `<brain>/.nika/chroma`. Chroma's embedded store is not
  safe with several writing processes on one folder, so every write goes through `store.writer()`, an
  flock held by one process at a time; the others wait up to `chroma_writer_wait` seconds (config,
  default 30) and then fail with a clear Busy error. The lock is reentrant within a process.
- server: when `federation.chroma_url` is set in nika-brain.yml (`http://host:port`), an `HttpClient`;
  the server serialises writes itself, so `writer()` is a no-op. This is the answer for many writers
  and for brains on several machines.

chromadb is imported lazily (it costs ~1 s), and its errors are translated into BrainError here:
callers wrap their calls in `store.errors()` (or use the helpers of this module).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from nika_brain.errors import BrainError, Busy, Invalid, MissingExtra

if TYPE_CHECKING:  # pragma: no cover
    from nika_brain.brain import Brain

DEFAULT_WRITER_WAIT = 30.0
POLL = 0.05


def _fed(brain: Brain) -> dict:
    fed = getattr(brain.config, "federation", None) or {}
    return dict(fed)


def chroma_url(brain: Brain) -> str | None:
    url = _fed(brain).get("chroma_url")
    if url in (None, ""):
        return None
    if not isinstance(url, str):
        raise Invalid("federation.chroma_url must be a URL string (http://host:port)",
                         file="nika-brain.yml", key="federation.chroma_url")
    return url


def _parse_url(url: str) -> tuple[str, int, bool]:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid(f"federation.chroma_url {url!r} is not an http(s)://host:port URL",
                         file="nika-brain.yml", key="federation.chroma_url")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 8000)
    except ValueError as exc:
        raise Invalid(f"federation.chroma_url {url!r}: bad port", file="nika-brain.yml",
                         key="federation.chroma_url") from exc
    return parts.hostname, port, parts.scheme == "https"


def _writer_wait(brain: Brain) -> float:
    value = _fed(brain).get("chroma_writer_wait", DEFAULT_WRITER_WAIT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise Invalid("federation.chroma_writer_wait must be a number of seconds >= 0",
                         file="nika-brain.yml", key="federation.chroma_writer_wait")
    return float(value)


@contextlib.contextmanager
def translate(what: str = "chroma") -> Iterator[None]:
    """Turn chromadb's (and its transport's) exceptions into one BrainError line."""
    try:
        yield
    except BrainError:
        raise
    except (AttributeError, NameError, AssertionError):
        raise  # our own bugs keep their traceback
    except Exception as exc:  # chromadb raises many types (ChromaError, ValueError, httpx errors...)
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BrainError(f"{what}: {type(exc).__name__}: {msg[:300]}") from exc


class _WriterLock:
    """A process-wide reentrant flock: one writing process at a time on an embedded store."""

    def __init__(self, path: Path, wait: float):
        self.path = path
        self.gen_path = path.with_suffix(".generation")
        self.wait = wait
        self._tlock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    @contextlib.contextmanager
    def hold(self) -> Iterator[bool]:
        """Hold the lock; yields True for the outermost hold of this process."""
        with self._tlock:
            outer = self._depth == 0
            if outer:
                self._acquire()
            self._depth += 1
            try:
                yield outer
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    os.close(self._fd)  # closing releases the flock
                    self._fd = None

    def _acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BrainError(f"cannot open the Chroma writer lock {self.path}: {exc.strerror}") from exc
        deadline = time.monotonic() + self.wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _read_holder(fd)
                    os.close(fd)
                    raise Busy(
                        f"the embedded Chroma store is being written by another process{holder}; "
                        f"waited {self.wait:g}s (raise federation.chroma_writer_wait, or set "
                        "federation.chroma_url to use a Chroma server for many writers)") from None
                time.sleep(POLL)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd


    def generation(self) -> int:
        """How many write holds the store has seen (any process): a change means another process
        wrote, and this process's client must reload what it caches."""
        try:
            return int(self.gen_path.read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def bump(self) -> int:
        """Count one more write hold; call only while holding the lock."""
        gen = self.generation() + 1
        tmp = self.gen_path.with_name(f".{self.gen_path.name}.{os.getpid()}")
        tmp.write_text(f"{gen}\n")
        os.replace(tmp, self.gen_path)
        return gen


def _read_holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


_LOCKS: dict[Path, _WriterLock] = {}
_LOCKS_GUARD = threading.Lock()


class VectorStore:
    """One Chroma client for a brain, embedded or server; see the module docstring."""

    def __init__(self, client: Any, mode: str, where: str, lock: _WriterLock | None,
                 make: Any = None):
        self.client = client
        self._make = make                  # builds a fresh client (embedded mode)
        self._gen = lock.generation() if lock is not None else 0
        self.mode = mode            # "embedded" | "server"
        self.where = where          # folder or URL, for messages and `rag stats`
        self._lock = lock
        self._cols: dict[str, Any] = {}   # name -> collection handle (one lookup per process)
        self._reopen = threading.RLock()  # threads sharing this store rebuild its client one at a time

    def errors(self, what: str | None = None):
        return translate(what or f"chroma ({self.mode} {self.where})")

    def collection(self, name: str, *, create: bool = True, metadata: dict | None = None):
        """The named collection, created on first use (cosine space, no embedding function, the
        given metadata); with create=False, None when it does not exist (a read never creates).

        Embedded, what comes back is a handle that resolves the chromadb collection on every use,
        so that a handle taken before `writer()` still talks to the client that block refreshed."""
        col = self._handle(name, create=create, metadata=metadata)
        if col is None or self._make is None:
            return col
        return _Collection(self, name)

    def _handle(self, name: str, *, create: bool = False, metadata: dict | None = None):
        self._refresh()
        col = self._cols.get(name)
        if col is not None:
            return col
        with self.errors(f"chroma collection {name}"):
            try:
                col = self.client.get_collection(name, embedding_function=None)
            except Exception as exc:
                if not _is_not_found(exc):
                    raise
                if not create:
                    return None
                with self.writer():
                    col = self.client.get_or_create_collection(
                        name, embedding_function=None, metadata=metadata or None,
                        configuration={"hnsw": {"space": "cosine"}})
        self._cols[name] = col
        return col

    def drop(self, name: str) -> bool:
        """Delete a whole collection; False when it did not exist."""
        self._cols.pop(name, None)
        with self.errors(f"chroma collection {name}"), self.writer():
            try:
                self.client.delete_collection(name)
                return True
            except Exception as exc:
                if _is_not_found(exc):
                    return False
                raise

    def names(self) -> list[str]:
        return [name for name, _ in self.listing()]

    def listing(self) -> list[tuple[str, dict]]:
        """(name, metadata) of every collection, by name."""
        with self.errors():
            cols = self.client.list_collections()
        return sorted((getattr(c, "name", str(c)), dict(getattr(c, "metadata", None) or {}))
                      for c in cols)

    @contextlib.contextmanager
    def writer(self) -> Iterator[None]:
        """Hold the right to write (embedded: one process at a time; server: a no-op).

        Embedded, the client caches segments in memory: when another process wrote since this one
        last looked, the client is rebuilt on entry, so that this process neither reads stale data
        nor writes over what the other wrote. Take collection handles inside the block."""
        if self._lock is None:
            yield
            return
        with self._lock.hold() as outer:
            if outer:
                self._refresh()
            try:
                yield
            finally:
                if outer:
                    self._gen = self._lock.bump()

    def _refresh(self) -> None:
        if self._lock is None or self._make is None:
            return
        gen = self._lock.generation()
        if gen == self._gen:
            return
        with self._reopen:
            if gen == self._gen:
                return   # another thread reopened it meanwhile
            from chromadb.api.shared_system_client import SharedSystemClient
            with translate("chroma: cannot reopen the store"):
                SharedSystemClient.clear_system_cache()
                self.client = self._make()
            self._cols.clear()
            self._gen = gen


class _Collection:
    """A chromadb collection of an embedded store, looked up afresh (cheaply) at each use."""

    def __init__(self, store: VectorStore, name: str):
        self._store = store
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        col = self._store._handle(self._name)
        if col is None:
            raise BrainError(f"chroma collection {self._name} no longer exists (dropped by another "
                             "process?)")
        return getattr(col, attr)

    def __repr__(self) -> str:
        return f"<collection {self._name} of {self._store.where}>"


def _is_not_found(exc: Exception) -> bool:
    # chromadb raises different types across versions and modes (and a plain ValueError in some): its
    # type names and its not-found text are the only stable signal.
    name = type(exc).__name__
    return name in ("NotFoundError", "InvalidCollectionException") or "does not exist" in str(exc)


_STORES: dict[tuple[str, str], VectorStore] = {}
_OPENING = threading.Lock()


def open_store(brain: Brain) -> VectorStore:
    """The brain's store (one per process and location; clients are not cheap to build)."""
    url = chroma_url(brain)
    key = ("server", url) if url else ("embedded", str(brain.state_dir / "chroma"))
    store = _STORES.get(key)
    if store is not None:
        return store
    with _OPENING:  # chromadb's client cache is not thread-safe: two threads building one collide
        store = _STORES.get(key)
        if store is None:
            store = _STORES[key] = _open(brain, url)
    return store


def _open(brain: Brain, url: str | None) -> VectorStore:
    try:
        import chromadb
    except ImportError as exc:
        raise MissingExtra.federation("chromadb") from exc
    with translate("chroma: cannot open the store"):
        from chromadb.config import Settings
        settings = Settings(anonymized_telemetry=False)
        if url:
            host, port, ssl = _parse_url(url)
            client = chromadb.HttpClient(host=host, port=port, ssl=ssl, settings=settings)
            store = VectorStore(client, "server", url, None)
        else:
            folder = brain.state_dir / "chroma"
            folder.mkdir(parents=True, exist_ok=True)
            lock_path = brain.state_dir / "mutex" / "chroma-writer.lock"
            with _LOCKS_GUARD:
                lock = _LOCKS.get(lock_path)
                if lock is None:
                    lock = _LOCKS[lock_path] = _WriterLock(lock_path, _writer_wait(brain))
            def make() -> Any:
                return chromadb.PersistentClient(path=str(folder), settings=settings)
            store = VectorStore(make(), "embedded", str(folder), lock, make)
    return store


def reset_cache() -> None:
    """Forget cached clients (tests that reopen a brain under another config)."""
    _STORES.clear()
