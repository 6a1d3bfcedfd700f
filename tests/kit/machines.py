"""One clone of a brain as a machine of its own: its machine id and the operator's key installed on it."""
from __future__ import annotations

import subprocess
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.state import authority, machine


def install_machine(b: Brain, name: str, operator_root: Path) -> Brain:
    machine.save(b, machine_id=name)
    for src, dst in zip(authority.key_paths(operator_root), authority.key_paths(b.root)):
        dst.write_bytes(src.read_bytes())  # the operator's key, installed on each machine
        dst.chmod(0o600)
    return b


def stop_machines(tmp: Path, procs: list[subprocess.Popen], names: tuple[str, ...] = ("m1", "m2", "m3")) -> None:
    """The tests' end for their machines: each daemon asked to stop (killed after 20 s), each
    machine's tmux server ended."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    for name in names:
        subprocess.run(["tmux", "-S", str(tmp / f"tmux-{name}.sock"), "kill-server"], capture_output=True)
