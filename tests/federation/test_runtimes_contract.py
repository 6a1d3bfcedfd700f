"""One contract for every runtime in the registry: what the service relies on, whatever runs the
kernel (tmux, headless, kubernetes without a context)."""
from __future__ import annotations

import json
import subprocess

import pytest

from nika_brain.errors import BrainError
from nika_brain.federation.kernels import health, runtimes, verbs
from nika_brain.state import kernels

from .fedkit import fbrain  # noqa: F401

TAKES_PROMPTS = {"tmux": True, "headless": True, "kubernetes": False}


@pytest.mark.parametrize("name", runtimes.names())
def test_runtime_contract(fbrain, name):  # noqa: F811
    brain = fbrain
    rt = runtimes.get(name)
    assert isinstance(rt, runtimes.Runtime) and rt.name == name and name in TAKES_PROMPTS
    assert rt.missing(brain) is None  # tmux is installed; kubernetes without a context needs nothing
    if name == "kubernetes":   # its pod clones the brain from the brain's own remote
        subprocess.run(["git", "-C", str(brain.root), "remote", "add", "origin", "https://git.example.invalid/b.git"],
                       check=True)
    k = verbs.kernel_spawn(brain, f"contract of {name}", kernel_id=f"c-{name}", runtime=name,
                           resource_limits={"memory": "256M"})
    assert k.status in ("active", "starting") and k.enforcement
    state = runtimes.load_state(brain, k.id)
    json.dumps(state)  # runtime state is plain JSON
    live = rt.alive(brain, k, state)
    assert isinstance(live, runtimes.Liveness) and live.alive
    if TAKES_PROMPTS[name]:
        out = verbs.kernel_invoke(brain, k.id, f"hello {name}", wait=True, timeout=180)
        assert out["answer"].startswith(f"stand-in answer to: hello {name}")
        assert any(e["event"] == "taken" for e in health.read_events(brain, k.id)[0])
    else:
        with pytest.raises(BrainError):
            verbs.kernel_invoke(brain, k.id, f"hello {name}")
        assert verbs.queue.pending(brain, k.id), "the prompt it could not take stays queued"
    state = runtimes.load_state(brain, k.id)
    verbs.kernel_kill(brain, k.id, "contract over")
    rt.stop(brain, k, state, 0.2)  # stopping twice is fine
    assert not runtimes.pid_alive(state.get("pid"))
    assert kernels.load_kernel(brain, k.id).status == "killed"
    with pytest.raises(BrainError, match="already killed"):
        verbs.kernel_kill(brain, k.id, "again")
