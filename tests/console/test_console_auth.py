"""Who may use the console: the session token on every request (401 without), the CSRF token on
every state-changing one (403 without), the token kept where an agent session cannot read it."""
from __future__ import annotations

import json
import os
import stat

import pytest

from nika_brain.state import authority, gates
from tests.kit.claude import bound_env, hook

from .consolekit import ConsoleProcess, browser, console_brain, new_page  # noqa: F401


@pytest.fixture
def gated(tmp_path, cli):
    root = tmp_path / "cbrain"
    brain = console_brain(root, tmp_path, cli)
    assert cli("gate", "open", "g1", "deploy to production?", cwd=root).returncode == 0
    console = ConsoleProcess(root, tmp_path / "console.log")
    try:
        yield brain, console
    finally:
        console.stop()


def form(**fields: str) -> tuple[bytes, dict]:
    from urllib.parse import urlencode
    return urlencode(fields).encode(), {"Content-Type": "application/x-www-form-urlencoded"}


def test_every_request_needs_the_session_token(gated):
    brain, c = gated
    assert c.request("/", cookie=False)[0] == 401
    assert c.request("/events", cookie=False)[0] == 401
    assert c.request("/?token=not-the-token", cookie=False)[0] == 401
    assert c.request("/kernels/alpha", cookie=False)[0] == 401
    csrf = _csrf(c)
    body, headers = form(csrf=csrf, note="x")
    for path in ("/gates/g1/approve", "/gates/g1/reject", "/proposals/p1/approve", "/kernels/alpha/kill"):
        assert c.request(path, method="POST", data=body, headers=headers, cookie=False)[0] == 401, path
    assert gates.load_gate(brain, "g1").pending


def test_pages_cannot_be_framed_nor_redirect_elsewhere(gated):
    brain, c = gated
    import urllib.request
    req = urllib.request.Request(c.base + "/decisions", headers={"Cookie": c.cookie})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.headers["X-Frame-Options"] == "DENY" and resp.headers["Referrer-Policy"] == "no-referrer"
        assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
    csrf = _csrf(c)
    for evil in ("//evil.example/", "/\\evil.example/", "https://evil.example/"):
        body, headers = form(csrf=csrf, next=evil)
        req = urllib.request.Request(c.base + "/gates/g1/reject", data=body, headers={**headers, "Cookie": c.cookie})
        from .consolekit import NoRedirect
        try:
            urllib.request.build_opener(NoRedirect).open(req, timeout=60)
            raise AssertionError("expected a redirect")
        except urllib.error.HTTPError as exc:
            assert exc.code == 303 and exc.headers["Location"].startswith("/decisions?"), exc.headers["Location"]
    assert gates.load_gate(brain, "g1").status == "rejected"


def test_the_first_url_sets_a_strict_httponly_cookie(gated):
    _, c = gated
    import urllib.request

    from .consolekit import NoRedirect
    try:
        urllib.request.build_opener(NoRedirect).open(c.url, timeout=60)
        raise AssertionError("expected a redirect")
    except urllib.error.HTTPError as exc:
        assert exc.code == 303 and exc.headers["Location"] == "/"
        cookie = exc.headers["Set-Cookie"]
    assert cookie.startswith(f"nika_console_{c.port}={c.token};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")


def _csrf(c: ConsoleProcess) -> str:
    status, html = c.request("/")
    assert status == 200
    return html.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]


def test_a_post_needs_the_csrf_token_and_then_decides_signed(gated):
    brain, c = gated
    for fields in ({"note": "x"}, {"note": "x", "csrf": ""}, {"note": "x", "csrf": "f" * 64}):
        body, headers = form(**fields)
        assert c.request("/gates/g1/approve", method="POST", data=body, headers=headers)[0] == 403, fields
    status, _ = c.request("/gates/g1/approve", method="POST", data=b'{"note": "x"}',
                          headers={"Content-Type": "application/json"})
    assert status == 403
    assert gates.load_gate(brain, "g1").pending
    status, text = c.request("/gates/g1/approve", method="POST", data=b'{"note": "go"}',
                             headers={"Content-Type": "application/json", "Accept": "application/json",
                                      "X-CSRF-Token": _csrf(c)})
    assert status == 200 and json.loads(text)["ok"], text
    g = gates.load_gate(brain, "g1")
    assert g.status == "approved" and g.note == "go" and gates.authentic(brain, g) is None
    # Deciding it again the other way is refused with the CLI's reason, not a traceback.
    status, text = c.request("/gates/g1/reject", method="POST", data=b"{}",
                             headers={"Content-Type": "application/json", "Accept": "application/json",
                                      "X-CSRF-Token": _csrf(c)})
    assert status == 409 and "already approved" in json.loads(text)["error"]


def test_a_form_post_without_csrf_from_the_page_is_refused(gated, browser):  # noqa: F811
    brain, c = gated
    page = new_page(browser)
    page.goto(c.url)
    gate = page.locator('[data-gate="g1"]')
    gate.locator('input[name="csrf"]').evaluate("el => el.remove()")
    with page.expect_response(lambda r: r.url.endswith("/gates/g1/approve")) as resp:
        gate.locator("button.approve").click()
    assert resp.value.status == 403
    assert gates.load_gate(brain, "g1").pending
    # A page of another origin posting a form to the console (it cannot know the CSRF token).
    other = new_page(browser)
    other.set_content(f'<form method="post" action="{c.base}/gates/g1/approve">'
                      '<input name="note" value="forged"><button>go</button></form>')
    with other.expect_response(lambda r: r.url.endswith("/gates/g1/approve")) as resp:
        other.click("button")
    assert resp.value.status in (401, 403)
    assert gates.load_gate(brain, "g1").pending


def test_the_token_is_kept_where_agent_sessions_cannot_read_it(gated, cli):
    brain, c = gated
    from nika_brain.console import auth
    kept = auth.token_path(brain.root)
    assert kept.read_text().strip() == c.url
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    assert kept.parent == authority.private_dir()
    # A kernel's settings deny the folder to its sandbox and to Claude's Read...
    (brain.root / "kernels" / "alpha").mkdir(parents=True)
    (brain.root / "kernels" / "alpha" / "kernel.yml").write_text("id: alpha\ngoal: backups\n")
    assert cli("claude", "install", "--kernel", "alpha", cwd=brain.root).returncode == 0
    settings = json.loads((brain.root / "kernels" / "alpha" / ".claude" / "settings.json").read_text())
    assert str(authority.private_dir()) in settings["sandbox"]["filesystem"]["denyRead"]
    assert f"Read(/{authority.private_dir().as_posix()}/**)" in settings["permissions"]["deny"]
    # ...and the kernel session's PreToolUse hook refuses reading it, by file tool or by shell.
    env = bound_env(brain, kernel="alpha") | {"HOME": os.environ["HOME"]}
    for tool, tool_input in (("Read", {"file_path": str(kept)}), ("Bash", {"command": f"cat {kept}"})):
        ans = hook("PreToolUse", {"session_id": "s-console", "cwd": str(brain.root / "kernels" / "alpha"),
                                  "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": tool_input},
                   env=env, cwd=brain.root / "kernels" / "alpha")
        assert ans.denied, (tool, ans.stdout, ans.stderr)
    c.stop()
    assert not kept.exists(), "removed when the console stops"
