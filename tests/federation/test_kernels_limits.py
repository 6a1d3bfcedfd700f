"""Hard limits and death: a kernel over its memory is stopped by the kernel (cgroup) and the death
is recorded; without writable cgroups the rlimit fallback applies and says so; kill -9 of a kernel's
process is detected by the supervisor, which releases its locks and fails its open claims."""
from __future__ import annotations

import os

import pytest

from nika_brain import bus
from nika_brain.federation.kernels import health, limits, runtimes, supervisor, verbs
from nika_brain.state import claims, kernels, locks, sessions

from .fedkit import configure, fbrain, until  # noqa: F401


def _dead(brain, kid):
    def dead():
        supervisor.check_once(brain)
        return kernels.load_kernel(brain, kid).status == "dead"
    return dead


@pytest.mark.parametrize("runtime", ["tmux", "headless"])
def test_over_memory_is_stopped_and_recorded(fbrain, runtime):  # noqa: F811
    brain = fbrain
    k = verbs.kernel_spawn(brain, "Ingest sensor data", kernel_id="delta", resource_limits={"memory": "160M"},
                           runtime=runtime)
    plan = limits.plan(k, name=limits.group_name(brain.root, "delta"))  # what this machine offers
    assert k.enforcement == plan.enforcement != "none"
    if runtime == "tmux":
        until(lambda: health.last_heartbeat(brain, "delta"))
    verbs.kernel_invoke(brain, "delta", "alloc=600 load everything")
    until(_dead(brain, "delta"))
    k = kernels.load_kernel(brain, "delta")
    if k.enforcement.startswith("cgroup"):
        # counted by the cgroup's own OOM counter (read before the supervisor removed the group)
        assert k.status_reason.startswith("out of memory: killed by the kernel's OOM killer")
        group = limits.group_name(brain.root, "delta")
        assert not any((limits.Path("/sys/fs/cgroup") / h / limits.GROUP / group).exists()
                       for h in ("memory", "cpu", "unified", "")), "its cgroup is removed"
    else:
        assert "exited" in k.status_reason or "signal" in k.status_reason
    deaths = [m for _, m in bus.open_bus(brain).read(bus.HEALTH) if m.get("kind") == "dead"]
    assert deaths and deaths[-1]["kernel"] == "delta" and deaths[-1]["reason"] == k.status_reason
    assert health.metrics(brain, "delta")["error_rate"] == 1.0


def test_without_cgroups_rlimits_apply_and_are_recorded(fbrain, tmp_path):  # noqa: F811
    brain = configure(fbrain, tmp_path, cgroup_root=str(tmp_path / "no-cgroups"))
    k = verbs.kernel_spawn(brain, "Lab benchmarks", kernel_id="beta", resource_limits={"memory": "200M",
                                                                                       "cpu": "50%"})
    assert k.enforcement == "prlimit"
    pid = runtimes.load_state(brain, "beta")["pid"]
    until(lambda: health.last_heartbeat(brain, "beta"))
    limit = [ln for ln in open(f"/proc/{pid}/limits") if ln.startswith("Max address space")][0]
    assert str(200 << 20) in limit
    verbs.kernel_invoke(brain, "beta", "alloc=400 too much")
    until(_dead(brain, "beta"))
    assert kernels.load_kernel(brain, "beta").status == "dead"


def test_kill_9_is_detected_and_what_it_held_released(fbrain):  # noqa: F811
    brain = fbrain
    verbs.kernel_spawn(brain, "Client missions", kernel_id="gamma")
    until(lambda: health.last_heartbeat(brain, "gamma"))
    sid = until(lambda: health.metrics(brain, "gamma")["session"])
    c = claims.open_claim(brain, workflow="report", step=1, satellite_type="brain-write", scope="clients/x/")
    sessions.bind(brain, sid, kernel="gamma", claim=c.id)
    locks.acquire(brain, "clients/x/", c.id, pid=None)
    from nika_brain.engine import signals
    signals.emit(brain, "CHECKPOINT", workflow="report", step="1", claim=c.id, reason="half way")
    seen = verbs.kernel_observe(brain, "gamma")
    assert [x["reason"] for x in seen["signals"]] == ["half way"] and seen["claims"][0]["id"] == c.id
    locks.acquire(brain, "clients/y.md", "gamma", pid=None)
    os.kill(runtimes.load_state(brain, "gamma")["pid"], 9)
    until(_dead(brain, "gamma"))
    k = kernels.load_kernel(brain, "gamma")
    assert "signal 9" in k.status_reason or "gone" in k.status_reason or "exited" in k.status_reason
    assert locks.list_locks(brain) == []
    closed = claims.load_claim(brain, c.id)
    assert closed.result.status == "failed" and "gamma" in closed.result.summary
    assert sessions.load(brain, sid).ended_at is not None
    assert supervisor.check_once(brain) == {}, "a dead kernel is reported once"


def test_temporary_kernel_is_decommissioned_after_its_ttl(fbrain, cli):  # noqa: F811
    brain = fbrain
    k = verbs.kernel_spawn(brain, "Ingest a burst of PDFs", kernel_id="burst", temporary=True, ttl="1s")
    assert k.temporary and k.ttl == 1.0
    until(lambda: health.last_heartbeat(brain, "burst"))
    out = until(lambda: cli("federation", "supervise", "--once").stdout.strip() or None)
    assert out in ("burst\theartbeat", "burst\tkilled-ttl")

    def decommissioned():
        supervisor.check_once(brain)
        return kernels.load_kernel(brain, "burst").status == "killed"
    until(decommissioned)
    assert "ttl" in kernels.load_kernel(brain, "burst").status_reason
    assert (brain.kernels_dir / "burst" / "kernel.yml").is_file(), "its records stay"
