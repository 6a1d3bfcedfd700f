"""Bad input and faults on the kernel verbs: one clear line, a documented exit code, no traceback,
nothing half-created."""
from __future__ import annotations

import os
import sys

import pytest

from nika_brain.state import kernels

from .fedkit import fbrain  # noqa: F401


def _one_line(out, code):
    assert out.returncode == code, (out.returncode, out.stderr)
    assert out.stderr.startswith("nika-brain: ") and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("args,needle", [
    (["", "--id", "k1"], "goal cannot be empty"),
    (["x" * 600, "--id", "k1"], "at most 500"),
    (["a goal", "--id", "k1", "--memory", "lots"], "memory limit does not parse"),
    (["a goal", "--id", "k1", "--memory", "1K"], "too small"),
    (["a goal", "--id", "k1", "--cpu", "0%"], "cpu limit out of range"),
    (["a goal", "--id", "../etc"], "not a valid kernel id"),
    (["a goal", "--id", "k1", "--runtime", "docker"], "unknown runtime"),
    (["a goal", "--id", "k1", "--temporary"], "needs a ttl"),
    (["a goal", "--id", "k1", "--scope", "/etc/"], "inside the brain"),
    (["a goal", "--id", "k1", "--examples", "/nonexistent/ex.txt"], "cannot read examples"),
])
def test_spawn_refuses_bad_input_and_creates_nothing(fbrain, cli, args, needle):  # noqa: F811
    out = cli("kernel", "spawn", *args)
    _one_line(out, 1)
    assert needle in out.stderr
    assert not fbrain.kernels_dir.exists() or list(fbrain.kernels_dir.iterdir()) == []


def test_unknown_and_duplicate_ids(fbrain, cli):  # noqa: F811
    for verb in (["invoke", "ghost", "hi"], ["observe", "ghost"], ["kill", "ghost", "--reason", "x"],
                 ["readjust", "ghost", "x"]):
        out = cli("kernel", *verb)
        _one_line(out, 1)
        assert "ghost" in out.stderr
    kernels.save_kernel(fbrain, kernels.new_kernel("alpha", "old one", status="killed"))
    dup = cli("kernel", "spawn", "another", "--id", "alpha")
    _one_line(dup, 1)
    assert "exists already" in dup.stderr and kernels.load_kernel(fbrain, "alpha").goal == "old one"
    _one_line(cli("kernel", "kill", "alpha", "--reason", "again"), 1)
    _one_line(cli("kernel", "observe", "alpha", "--since", "yesterday"), 1)
    _one_line(cli("kernel", "invoke", "alpha", "   "), 1)


def test_missing_tmux_is_exit_7_and_nothing_created(fbrain, cli, tmp_path):  # noqa: F811
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(sys.executable, bin_dir / "python3")
    out = cli("kernel", "spawn", "a goal", "--id", "k1", env={"PATH": str(bin_dir)})
    _one_line(out, 7)
    assert "tmux is not installed" in out.stderr and not kernels.kernel_dir(fbrain, "k1").exists()


def test_agent_that_cannot_start_marks_the_kernel_failed(fbrain, cli, tmp_path):  # noqa: F811
    from .fedkit import fed_config
    (fbrain.root / "nika-brain.yml").write_text(
        fed_config(tmp_path, agent_command=["/nonexistent/agent"]))
    out = cli("kernel", "spawn", "a goal", "--id", "k1", "--runtime", "headless")
    _one_line(out, 7)
    assert "not installed" in out.stderr and not kernels.kernel_dir(fbrain, "k1").exists()


def test_bad_federation_settings_are_one_line(fbrain, cli, tmp_path):  # noqa: F811
    (fbrain.root / "nika-brain.yml").write_text(
        "version: 1\nfederation: {heartbeat_ttl: soon, supervisor: manual}\n")
    kernels.save_kernel(fbrain, kernels.new_kernel("alpha", "g", status="active"))
    out = cli("federation", "status")
    _one_line(out, 1)
    assert "federation.heartbeat_ttl" in out.stderr


def test_status_with_the_bus_gone_shows_the_records_and_fails(fbrain, cli):  # noqa: F811
    from tests.kit.redis import nothing_listening
    kernels.save_kernel(fbrain, kernels.new_kernel("alpha", "g", status="active"))
    with nothing_listening() as url:
        (fbrain.root / "nika-brain.yml").write_text(
            f"version: 1\nbus: redis\nredis_url: {url}\nfederation: {{supervisor: manual}}\n")
        out = cli("federation", "status")
    assert out.returncode == 1 and "unreachable" in out.stdout and "alpha\tstale" in out.stdout
    assert "Traceback" not in out.stderr


def test_a_failed_start_marks_the_kernel_failed_and_leaves_others_alone(fbrain, cli, tmp_path):  # noqa: F811
    import subprocess
    sock = str(tmp_path / "tmux.sock")
    subprocess.run(["tmux", "-S", sock, "new-session", "-d", "-s", "nika-os-k1", "sleep 300"], check=True)
    out = cli("kernel", "spawn", "a goal", "--id", "k1")
    _one_line(out, 1)
    assert "exists already" in out.stderr
    k = kernels.load_kernel(fbrain, "k1")
    assert k.status == "failed" and "spawn failed" in k.status_reason
    assert subprocess.run(["tmux", "-S", sock, "has-session", "-t", "=nika-os-k1"]).returncode == 0, \
        "a session that was not ours is left alone"
    listed = cli("kernel", "list")
    assert "k1\tfailed" in listed.stdout
