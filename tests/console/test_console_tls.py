"""Another host than loopback: TLS (`--tls-cert/--tls-key`), or an explicit `--insecure`. With TLS the
console serves HTTPS only, its first line is an https URL, and its cookie is Secure."""
from __future__ import annotations

import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from nika_brain.console import server

from .consolekit import ConsoleProcess, NoRedirect, console_brain


def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "console.crt", folder / "console.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_tls_serves_https_with_a_secure_cookie(tmp_path, cli):
    root = tmp_path / "cbrain"
    console_brain(root, tmp_path, cli)
    cert, key = self_signed(tmp_path)
    c = ConsoleProcess(root, tmp_path / "console.log", "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert c.url.startswith("https://127.0.0.1:"), c.url
        trusted = ssl.create_default_context(cafile=str(cert))
        opener = urllib.request.build_opener(NoRedirect, urllib.request.HTTPSHandler(context=trusted))
        with pytest.raises(urllib.error.HTTPError) as got:
            opener.open(c.url, timeout=60)
        assert got.value.code == 303
        cookie = got.value.headers["Set-Cookie"]
        assert cookie.startswith(f"nika_console_{c.port}={c.token};") and "Secure" in cookie, cookie
        req = urllib.request.Request(c.base + "/decisions", headers={"Cookie": c.cookie})
        with opener.open(req, timeout=60) as resp:
            assert resp.status == 200 and "Decisions waiting" in resp.read().decode()
        # Plain HTTP on the same port gets no page.
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(c.base.replace("https://", "http://") + "/", timeout=60).read()
    finally:
        c.stop()


def test_another_host_needs_tls_or_insecure(tmp_path):
    cert, key = self_signed(tmp_path)
    for host in ("0.0.0.0", "192.0.2.1", "::", "example.org"):
        with pytest.raises(server.BrainError, match="needs TLS"):
            server.check_options(host, 8765, None, None, False)
        server.check_options(host, 8765, cert, key, False)     # TLS: accepted
        server.check_options(host, 8765, None, None, True)     # --insecure said: accepted
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        server.check_options(host, 8765, None, None, False)    # loopback needs neither
    assert server.url_of("0.0.0.0", 8765, "t", True).startswith(f"https://{server.socket.gethostname()}:8765/")
