"""One clone of a brain as a machine of its own: its machine id and the operator's key installed on it."""
from __future__ import annotations

from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.state import authority, machine


def install_machine(b: Brain, name: str, operator_root: Path) -> Brain:
    machine.save(b, machine_id=name)
    for src, dst in zip(authority.key_paths(operator_root), authority.key_paths(b.root)):
        dst.write_bytes(src.read_bytes())  # the operator's key, installed on each machine
        dst.chmod(0o600)
    return b
