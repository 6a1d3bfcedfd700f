"""Parsed state files, kept while their file is unchanged.

The console is a long-lived process polled by pages: re-parsing every kernel.yml, claim and gate on
each request would cost far more than the 100 ms an overview may take. A file is parsed again only
when its (mtime_ns, size, inode) changed; a file that is gone drops out.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable

from nika_brain.errors import BrainError


class Records:
    def __init__(self) -> None:
        self._seen: dict[str, tuple[tuple[int, int, int], Any]] = {}
        self._lock = threading.Lock()

    def load(self, path: Path | str, loader: Callable[[Path], Any]) -> Any:
        """The parsed file (a BrainError when broken); FileNotFoundError when it is not there."""
        name = os.fspath(path)
        st = os.stat(name)
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._lock:
            hit = self._seen.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = loader(Path(name))
        with self._lock:
            self._seen[name] = (key, value)
        return value

    # Paths are joined as strings: a Path object per file per request cost more than the stat itself
    # (200 claims, 58 kernels: the overview's budget is 100 ms).

    def folder(self, folder: Path, loader: Callable[[Path], Any]) -> tuple[list[Any], list[str]]:
        """Every `*.yml` of a folder, sorted by name; and the lines saying which files are broken."""
        base = os.fspath(folder)
        try:
            names = sorted(n for n in os.listdir(base) if n.endswith(".yml") and not n.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        out, bad = [], []
        for n in names:
            try:
                out.append(self.load(f"{base}/{n}", loader))
            except FileNotFoundError:
                continue  # removed while we looked
            except BrainError as exc:
                bad.append(f"{folder.name}/{n}: {exc}")
        return out, bad

    def kernels(self, kernels_dir: Path, loader: Callable[[Path], Any]) -> tuple[list[Any], list[str]]:
        """kernels/<id>/kernel.yml of every kernel folder."""
        base = os.fspath(kernels_dir)
        try:
            ids = sorted(os.listdir(base))
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        out, bad = [], []
        for kid in ids:
            try:
                out.append(self.load(f"{base}/{kid}/kernel.yml", loader))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except BrainError as exc:
                bad.append(f"kernels/{kid}/kernel.yml: {exc}")
        return out, bad
