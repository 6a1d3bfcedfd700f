"""`nika-brain console` with bad options: one line on stderr, a failing exit code, no traceback,
nothing left listening, no token kept."""
from __future__ import annotations

import socket

import pytest

from nika_brain.console import auth
from nika_brain.state import gates

from .consolekit import ConsoleProcess, console_brain


@pytest.fixture
def cbrain(tmp_path, cli):
    return console_brain(tmp_path / "cbrain", tmp_path, cli)


@pytest.mark.parametrize("args,env,expected", [
    (("--host", "0.0.0.0"), {}, "needs TLS"),
    (("--host", "192.0.2.1", "--insecure"), {}, "cannot listen on 192.0.2.1"),
    (("--tls-cert", "cert.pem"), {}, "go together"),
    (("--tls-cert", "nope.pem", "--tls-key", "nope.key"), {}, "no such file"),
    (("--port", "70000"), {}, "--port"),
    (("--host", "no-such-host.invalid"), {}, "--host no-such-host.invalid"),
    ((), {"CLAUDECODE": "1"}, "agent session"),
])
def test_bad_options_say_one_line(cbrain, cli, args, env, expected):
    r = cli("console", "--port", "0", *args, env=env, cwd=cbrain.root)
    assert r.returncode != 0 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not auth.token_path(cbrain.root).exists()


def test_a_busy_port_says_so(cbrain, cli):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = cli("console", "--port", str(port), cwd=cbrain.root)
    assert r.returncode == 1 and r.stderr.strip().startswith("nika-brain: cannot listen on 127.0.0.1")


def test_unknown_gate_or_decision_is_a_clear_answer(cbrain, tmp_path):
    c = ConsoleProcess(cbrain.root, tmp_path / "console.log")
    try:
        import json
        csrf = c.request("/")[1].split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
        hdr = {"Content-Type": "application/json", "Accept": "application/json", "X-CSRF-Token": csrf}
        status, text = c.request("/gates/nope/approve", method="POST", data=b"{}", headers=hdr)
        assert status == 409 and "nope" in json.loads(text)["error"]
        status, text = c.request("/gates/nope/maybe", method="POST", data=b"{}", headers=hdr)
        assert status == 409 and "approve or reject" in json.loads(text)["error"]
        status, text = c.request("/kernels/ghost/kill", method="POST", data=b'{"text": "x"}', headers=hdr)
        assert status == 409 and "ghost" in json.loads(text)["error"]
        assert c.request("/kernels/ghost")[0] == 404
        assert gates.list_gates(cbrain) == []
    finally:
        c.stop()
