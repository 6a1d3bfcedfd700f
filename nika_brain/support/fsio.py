"""Atomic writes and inter-process mutexes for the brain's state files.

A process killed at any moment must leave each file either old or new: we write a temporary file in
the same folder, fsync it, and rename it over the target (rename is atomic on POSIX). The data is
fsynced so that a power loss never leaves an empty file behind the rename; the folder is not (a lost
rename after a power loss leaves the old version, which is still whole). Read-modify-write
of shared state happens under an flock-based mutex in the git-ignored state folder.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from nika_brain.errors import BrainError


def atomic_write(path: Path | str, text: str, *, fsync: bool = True) -> None:
    path = Path(path)
    # Not tempfile.mkstemp: importing tempfile costs ~7 ms on the hook path of every tool call.
    fd, tmp = _temp_file(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


_counter = 0


def _temp_file(path: Path) -> tuple[int, str]:
    """A fresh `.name.<pid>.<n>.tmp` beside `path`, created exclusively (loaders skip dot files)."""
    global _counter
    while True:
        _counter += 1
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.{_counter}.tmp")
        try:
            return _open_creating_parents(Path(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL), tmp
        except FileExistsError:
            continue


def _open_creating_parents(path: Path, flags: int) -> int:
    # mkdir only when the folder is missing: a mkdir per write is a syscall on every lock cycle.
    try:
        return os.open(path, flags, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o644)


def remove(path: Path | str) -> bool:
    """Unlink if present; True when something was removed."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def mutex(path: Path | str, *, shared: bool = False) -> Iterator[None]:
    """Hold an exclusive (or shared) flock on `path` for the duration of the block.

    flock is released by the kernel when the holder dies, so a kill -9 never leaves it stuck.
    """
    try:
        fd = _open_creating_parents(Path(path), os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise BrainError(f"cannot open mutex {path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_text(path: Path | str, *, limit: int) -> str:
    """Read a UTF-8 file of at most `limit` bytes, with the failures worded for a user."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError as exc:
        raise BrainError("no such file", file=str(path)) from exc
    except IsADirectoryError as exc:
        raise BrainError("is a directory, expected a file", file=str(path)) from exc
    except OSError as exc:
        raise BrainError(f"cannot read: {exc.strerror}", file=str(path)) from exc
    if len(data) > limit:
        raise BrainError(f"file too large (over {limit} bytes)", file=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BrainError(f"not valid UTF-8 (byte {exc.start})", file=str(path)) from exc
