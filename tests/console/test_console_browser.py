"""The console in a real browser (Debian's chromium, driven by Playwright): the overview lists the
spawned kernels and the pending gate; a heartbeat reaches the page without a reload; approving the
gate on the page signs it with the operator key and the run goes on; the kernel page steers a kernel
behind a confirmation."""
from __future__ import annotations

import pytest

from nika_brain.federation.kernels import runtimes
from nika_brain.state import gates, kernels, runs

from .consolekit import (  # noqa: F401
    BOUND,
    ConsoleProcess,
    browser,
    console_brain,
    finish_run,
    new_page,
    run_to_gate,
    stop_kernels,
)


@pytest.fixture
def federation(tmp_path, cli):
    root = tmp_path / "cbrain"
    brain = console_brain(root, tmp_path, cli)
    for kid, goal in (("alpha", "Operate the backups"), ("beta", "Watch public tenders")):
        sp = cli("kernel", "spawn", goal, "--id", kid, "--memory", "256M", cwd=root)
        assert sp.returncode == 0, sp.stderr
    gate = run_to_gate(cli, root)
    console = ConsoleProcess(root, tmp_path / "console.log")
    try:
        yield brain, gate, console
    finally:
        console.stop()
        stop_kernels(root, tmp_path)


def test_overview_live_heartbeat_and_signed_approval(federation, browser, cli):  # noqa: F811
    brain, gate_id, console = federation
    # Playwright polls a wait_for_function string with eval, which the console's CSP forbids (the
    # other browser tests run under it).
    page = new_page(browser, bypass_csp=True)
    page.goto(console.url)
    assert page.url == console.base + "/", "the token leaves the address bar once it is a cookie"
    for kid in ("alpha", "beta"):
        assert page.locator(f'tr[data-kernel="{kid}"]').count() == 1
    assert page.locator(f'[data-gate="{gate_id}"]').count() == 1
    page.wait_for_function("document.getElementById('live').classList.contains('on')", timeout=BOUND)

    # A heartbeat: the stand-in agent's hooks publish one when it takes and answers a prompt.
    before = page.get_attribute('tr[data-kernel="alpha"] .hb-at', "title")  # the full time
    page.evaluate("window.__sameDocument = 1")
    inv = cli("kernel", "invoke", "alpha", "check the backups", "--wait", cwd=brain.root)
    assert inv.returncode == 0, inv.stderr
    page.wait_for_function(
        "b => { const t = document.querySelector('tr[data-kernel=\"alpha\"] .hb-at').title;"
        " return t !== b && t !== ''; }", arg=before, timeout=BOUND)
    assert page.evaluate("window.__sameDocument") == 1, "updated in place, not reloaded"

    # Approve on the page: the gate is decided by the console process, signed, and the run goes on.
    run_before = runs.load_run(brain, "example")
    assert run_before.gate == gate_id
    form = page.locator(f'[data-gate="{gate_id}"]')
    form.locator('input[name="note"]').fill("greet() is fine without tests")
    form.locator("button.approve").click()
    page.wait_for_selector("#flash", timeout=BOUND)
    assert f"gate {gate_id}: approved" in page.inner_text("#flash")
    g = gates.load_gate(brain, gate_id)
    assert g.status == "approved" and g.via == "cli" and g.note == "greet() is fine without tests"
    assert gates.authentic(brain, g) is None, "signed with the operator key"
    run_after = runs.load_run(brain, "example")
    assert run_after.gate is None and run_after.cursor != run_before.cursor, "the run took its next step"
    assert page.locator(f'[data-gate="{gate_id}"]').count() == 0
    # The workflows page draws the run's chain: the first step done, the cursor on the next.
    page.click('a[href="/workflows"]')  # returns once the navigation starts, not when it ends
    page.wait_for_selector('[data-run="example"] li.step', timeout=BOUND)
    chain = page.locator('[data-run="example"] li.step')
    assert chain.count() == 3
    assert "done" in chain.nth(0).get_attribute("class")
    assert "cursor" in chain.nth(1).get_attribute("class")
    # The run's last two steps done on the CLI: the page shows DONE and its report, without a reload.
    page.evaluate("window.__sameDocument = 2")
    finish_run(cli, brain.root)
    assert runs.load_run(brain, "example").status == "done"
    page.wait_for_selector('[data-run="example"][data-status="done"] details.report', timeout=BOUND)
    report = page.inner_text('[data-run="example"] details.report pre')
    assert '"delivered"' in report and '"2"' in report and '"3"' in report and gate_id in report, report
    assert page.evaluate("window.__sameDocument") == 2, "updated in place, not reloaded"


def test_a_spawn_proposal_approved_on_the_page_spawns_the_kernel(federation, browser, cli):  # noqa: F811
    from nika_brain.federation.spawning import proposals
    brain, _, console = federation
    assert cli("kernel", "propose", "Audit the firewall rules", cwd=brain.root).returncode == 0
    pid = proposals.list_proposals(brain, "pending")[0]["id"]
    page = new_page(browser)
    page.goto(console.url)
    card = page.locator(f'[data-proposal="{pid}"]')
    assert "Audit the firewall rules" in card.inner_text()
    page.once("dialog", lambda d: d.accept())
    card.locator("button.approve").click()
    page.wait_for_selector("#flash", timeout=BOUND)
    p = proposals.load(brain, pid)
    assert p["status"] == "spawned", p
    g = gates.load_gate(brain, p["gate"])
    assert g.status == "approved" and gates.authentic(brain, g) is None
    assert page.locator(f'tr[data-kernel="{p["spawned"]}"]').count() == 1


def test_kernel_page_steers_behind_a_confirmation(federation, browser):  # noqa: F811
    brain, _, console = federation
    page = new_page(browser)
    page.goto(console.url)
    page.click('a[href="/kernels/alpha"]')
    page.wait_for_selector("[data-kernel-page=alpha]")
    assert "Operate the backups" in page.inner_text("#kernel-head")
    # Dismissed: nothing is sent.
    page.once("dialog", lambda d: d.dismiss())
    page.fill("form.readjust input[name=text]", "audit the backups first")
    page.click("form.readjust button")
    assert kernels.list_directives(brain, "alpha") == []  # and the single directive below proves it
    # Accepted: the directive is written, as `kernel readjust` writes it.
    page.once("dialog", lambda d: d.accept())
    page.click("form.readjust button")
    page.wait_for_selector("#flash", timeout=BOUND)
    assert [d.text for d in kernels.list_directives(brain, "alpha")] == ["audit the backups first"]
    assert "audit the backups first" in page.inner_text("#directives")
    # Invoke: the prompt is delivered as by `kernel invoke` (the agent's own hook says it took it).
    page.once("dialog", lambda d: d.accept())
    page.fill("form.invoke input[name=text]", "list the backups")
    page.click("form.invoke button")
    page.wait_for_selector("#flash", timeout=BOUND)
    assert "taken by alpha" in page.inner_text("#flash"), page.inner_text("#flash")
    # The kernel's heartbeats (its hooks publish them as it takes and answers) draw its chart, and
    # its vault stats come after the page.
    # A line through two heartbeats or more (its points are joined by spaces), attached rather than
    # "visible": an idle queue draws a flat line, whose geometric box has no height, and Playwright
    # counts a box with no height as hidden (the stroke the user sees is outside that box).
    page.wait_for_selector('#chart polyline.queue[points*=" "]', state="attached", timeout=BOUND)
    vault = page.locator("#vault-stats:not(:has-text('loading'))")
    vault.wait_for(timeout=BOUND)
    assert "records" in vault.inner_text(), vault.inner_text()
    # Restart: a new process for the same kernel.
    pid = runtimes.load_state(brain, "alpha").get("pid")
    page.once("dialog", lambda d: d.accept())
    page.click("form.restart button")
    page.wait_for_selector("#flash", timeout=BOUND)
    assert "restarted" in page.inner_text("#flash"), page.inner_text("#flash")
    assert kernels.load_kernel(brain, "alpha").status == "active"
    assert runtimes.load_state(brain, "alpha").get("pid") != pid
    # Kill, confirmed: the kernel is killed as by `kernel kill`, with the reason.
    page.once("dialog", lambda d: d.accept())
    page.fill("form.kill input[name=text]", "mission over")
    page.click("form.kill button")
    page.wait_for_selector("#flash", timeout=BOUND)
    k = kernels.load_kernel(brain, "alpha")
    assert k.status == "killed" and "mission over" in (k.status_reason or "")
