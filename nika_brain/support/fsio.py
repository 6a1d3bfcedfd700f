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
from typing import Iterable, Iterator

from nika_brain.errors import BrainError


def atomic_write(path: Path | str, text: str, *, fsync: bool = True, mode: int | None = None) -> None:
    """Write `text` to a temporary file beside `path` and rename it over `path`; `mode` is set on
    the temporary file before anything is written (a secret is never readable by others)."""
    path = Path(path)
    # Not tempfile.mkstemp: importing tempfile costs ~7 ms on the hook path of every tool call.
    fd, tmp = _temp_file(path)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if "NIKA_FAULT" in os.environ:   # a crash test may kill this process with half the text written
                from nika_brain.support import faults
                fh.write(text[:len(text) // 2])
                fh.flush()
                faults.point("mid-write")
                text = text[len(text) // 2:]
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


# ---- temp files left by killed writers ------------------------------------------------------------
# `.<name>.<pid>.<n>.tmp`: git ignores them (init writes `.*.tmp` to .gitignore), commit_state never
# stages them, the commands that list a state folder sweep them once their writer is gone, and
# `validate` reports them.
TEMP_GLOB = ".*.tmp"
SWEEP_AGE = 60.0  # seconds: a live writer renames its temp file within milliseconds


def temp_pid(name: str) -> int | None:
    """The writer pid in a temp file name of ours, or None when `name` is not one."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return None
    parts = name[:-4].rsplit(".", 2)
    if len(parts) != 3 or not parts[1].isascii() or not parts[1].isdigit():
        return None
    return int(parts[1])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or a pid we cannot judge): keep its file
    return True


def sweep_temp(folder: Path | str, names: list[str] | None = None, *, min_age: float = SWEEP_AGE,
               now: float | None = None) -> list[str]:
    """Remove our temp files in `folder` older than `min_age` whose writer process is gone."""
    import time
    folder = Path(folder)
    if names is None:
        try:
            names = os.listdir(folder)
        except OSError:
            return []
    now = time.time() if now is None else now
    removed = []
    for n in names:
        pid = temp_pid(n)
        if pid is None or pid == os.getpid() or _pid_alive(pid):
            continue  # not ours, or its writer may still rename it
        try:
            if now - os.stat(folder / n).st_mtime < min_age:
                continue
            os.unlink(folder / n)
            removed.append(n)
        except OSError:
            continue
    return removed


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
    """Read a regular UTF-8 file of at most `limit` bytes, with the failures worded for a user. A FIFO,
    a device (/dev/zero) or a socket is refused before any read: opened without blocking, checked by
    fstat, so nothing waits on a writer that never comes or reads an endless stream."""
    import stat
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise BrainError("no such file", file=str(path)) from exc
    except OSError as exc:
        raise BrainError(f"cannot read: {exc.strerror}", file=str(path)) from exc
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise BrainError("is a directory, expected a file", file=str(path))
        if not stat.S_ISREG(mode):
            raise BrainError("not a regular file (a pipe, device or socket); give a file", file=str(path))
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise BrainError(f"cannot read: {exc.strerror}", file=str(path)) from exc
    finally:
        os.close(fd)
    return decode_text(data, path, limit=limit)


def decode_text(data: bytes, path: Path | str, *, limit: int) -> str:
    """The text of a regular file's bytes (already read, at most limit + 1 of them), refused as
    `read_text` refuses it: too large, or not UTF-8."""
    if len(data) > limit:
        raise BrainError(f"file too large (over {limit} bytes)", file=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BrainError(f"not valid UTF-8 (byte {exc.start})", file=str(path)) from exc


def json_objects(lines: "Iterable[str | bytes]") -> list[dict]:
    """The JSON objects of a JSONL file's lines; a torn or foreign line (a writer killed mid-append,
    a hand edit) is skipped, not fatal."""
    import json
    out = []
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out
