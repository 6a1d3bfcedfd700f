"""An agent session cannot reach the console's token: a sandboxed kernel's own shell (the stand-in
agent runs each `sh=` command inside the kernel's bubblewrap sandbox) finds neither the kept URL nor
its folder, and the console, which it can reach over loopback, answers it 401 without the token."""
from __future__ import annotations

import sys

import pytest

from nika_brain.console import auth
from nika_brain.federation.kernels import sandbox
from nika_brain.state import authority
from tests.federation.test_kernels_sandbox import _sh

from .consolekit import ConsoleProcess, console_brain, stop_kernels


def test_a_sandboxed_kernel_cannot_reach_the_console_token(tmp_path, cli):
    if sandbox.unavailable():
        pytest.fail(f"bubblewrap must run here for this test: {sandbox.unavailable()}")
    root = tmp_path / "cbrain"
    brain = console_brain(root, tmp_path, cli)
    sp = cli("kernel", "spawn", "Operate the backups", "--id", "alpha", "--runtime", "headless", cwd=root)
    assert sp.returncode == 0 and "sandbox bwrap" in sp.stdout, sp.stdout + sp.stderr
    c = ConsoleProcess(root, tmp_path / "console.log")
    try:
        kept = auth.token_path(brain.root)
        assert kept.read_text().strip() == c.url          # kept, on the host
        get = (f"{sys.executable} -c \"import urllib.request as u, urllib.error as e\n"
               f"try: u.urlopen('{c.base}/', timeout=30)\nexcept e.HTTPError as x: print('status', x.code)\"")
        attacks = {
            "read the kept URL": f"cat {kept}",
            "list the operator's private folder": f"ls {authority.private_dir()}",
            "grep the operator's folder for the token": f"grep -r {c.token[:12]} {authority.operator_dir()}",
        }
        for what, cmd in attacks.items():
            rc, out = _sh(brain, "alpha", cmd)
            assert rc != 0 and c.token not in out, f"{what}: rc {rc}: {out}"
        # The console itself is reachable over loopback (the network is shared): without the token, 401.
        rc, out = _sh(brain, "alpha", get)
        assert "status 401" in out, (rc, out)
    finally:
        c.stop()
        stop_kernels(root, tmp_path)
