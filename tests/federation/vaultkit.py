"""Helpers for the vault tests: a brain with kernels, vectors of exact cosine, a clean store."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from nika_brain.brain import Brain
from nika_brain.federation import chroma
from nika_brain.federation.vault.records import SUMMARIES, VAULT
from tests.conftest import make_brain

DIM = 384


def vault_brain(root: Path, kernels=("alpha", "beta", "gamma"), extra: str = "") -> Brain:
    brain = make_brain(root, "version: 1\nlock_poll: 0.01\n" + extra)
    for k in kernels:
        (brain.kernels_dir / k).mkdir(parents=True, exist_ok=True)
        (brain.kernels_dir / k / "kernel.yml").write_text(f"id: {k}\ngoal: goal of {k}\n")
    chroma.reset_cache()
    return brain


def reset_store(brain: Brain) -> None:
    store = chroma.open_store(brain)
    store.drop(VAULT)
    store.drop(SUMMARIES)


def axis(i: int) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[i] = 1.0
    return v


def at_cosine(base: int, other: int, cos: float) -> np.ndarray:
    """A unit vector whose cosine with axis(base) is exactly `cos` (to float32 precision)."""
    return (cos * axis(base) + np.sqrt(1.0 - cos * cos) * axis(other)).astype(np.float32)
