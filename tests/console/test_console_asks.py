"""The Asks page in a real browser: each `nika-brain ask` with the triage's decision, its scores and
its routes; the operator corrects the triage from the page as `nika-brain triage correct <ask-id>` does
(the real e5 model triages; the kernels are records, not started: their routes stay queued)."""
from __future__ import annotations

import json

import pytest

from nika_brain.federation.asking import record
from nika_brain.federation.triage import corrections
from tests.federation.fedkit import fed_config
from tests.federation.triagekit import ALPHA, GAMMA, GENERALIST, seed_kernels
from tests.kit.brain import git_out

from .consolekit import BOUND, ConsoleProcess, browser, console_brain, new_page  # noqa: F401

BACKUPS = "vérifie les sauvegardes du serveur de fichiers"
CREPES = "quelle est la recette de la pâte à crêpes ?"


@pytest.fixture
def asked(tmp_path, cli):
    root = tmp_path / "cbrain"
    brain = console_brain(root, tmp_path, cli)
    (root / "nika-brain.yml").write_text(fed_config(tmp_path, triage={"default": GENERALIST}), encoding="utf-8")
    git_out(root, "commit", "-q", "-am", "federation: the generalist")
    seed_kernels(brain)
    ids = {}
    for prompt in (BACKUPS, CREPES):
        out = cli("ask", prompt, "--json", cwd=root)
        assert out.returncode == 8, out.stderr   # no kernel process: the route stays queued (said)
        ids[prompt] = json.loads(out.stdout)["ask"]
    console = ConsoleProcess(root, tmp_path / "console.log")
    try:
        yield brain, ids, console
    finally:
        console.stop()


def test_asks_page_shows_the_triage_and_corrects_it(asked, browser):  # noqa: F811
    brain, ids, console = asked
    page = new_page(browser)
    page.goto(console.url)
    page.click('a[href="/asks"]')
    backups, crepes = (page.locator(f'[data-ask="{ids[p]}"]') for p in (BACKUPS, CREPES))
    # The decision, the kernel whose score passes its threshold, and the route with its status.
    assert backups.get_attribute("data-decision") == "kernel"
    assert backups.locator(f'tr.score.passes[data-score-kernel="{ALPHA}"]').count() == 1
    assert backups.locator(f'tr.route[data-route-kernel="{ALPHA}"] .state').inner_text() == "queued"
    assert crepes.get_attribute("data-decision") == "fallback"
    assert crepes.locator("tr.score.passes").count() == 0
    assert crepes.locator(f'tr.route[data-route-kernel="{GENERALIST}"]').count() == 1
    scores = record.load_ask(brain, ids[BACKUPS])["scores"]
    assert scores[0]["kernel"] == ALPHA and scores[0]["passes"]
    shown = backups.locator(f'tr.score[data-score-kernel="{ALPHA}"] td').nth(1).inner_text()
    assert shown == f"{scores[0]['score']:.2f}"

    # The operator says the crêpes belong to the client-mission kernel: recorded as `triage correct`.
    crepes.locator("select[name=kernel]").select_option(GAMMA)
    crepes.locator("form.correct button").click()
    page.wait_for_selector("#flash", timeout=BOUND)
    assert f"ask {ids[CREPES]} belongs to {GAMMA}" in page.inner_text("#flash")
    assert [(c.prompt, c.kernel, c.ask) for c in corrections.load_all(brain)] == [(CREPES, GAMMA, ids[CREPES])]
    assert f"corrected: {GAMMA}" in page.locator(f'[data-ask="{ids[CREPES]}"] .corrected').inner_text()
    # ...and that the backups ask belongs to no kernel.
    backups = page.locator(f'[data-ask="{ids[BACKUPS]}"]')
    backups.locator("select[name=kernel]").select_option("-")
    backups.locator("form.correct button").click()
    page.wait_for_selector("#flash", timeout=BOUND)
    assert {c.ask: c.kernel for c in corrections.load_all(brain)} == {ids[CREPES]: GAMMA, ids[BACKUPS]: None}


def test_a_correction_needs_the_csrf_token_and_a_real_ask_and_kernel(asked):
    brain, ids, c = asked
    from urllib.parse import urlencode
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    body = urlencode({"kernel": GAMMA}).encode()
    assert c.request(f"/asks/{ids[CREPES]}/correct", method="POST", data=body, headers=form)[0] == 403
    assert c.request(f"/asks/{ids[CREPES]}/correct", method="POST", data=body, headers=form, cookie=False)[0] == 401
    csrf = c.request("/asks")[1].split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
    hdr = {"Content-Type": "application/json", "Accept": "application/json", "X-CSRF-Token": csrf}
    for path, fields, said in ((f"/asks/{ids[CREPES]}/correct", {"kernel": "kernel-nope"}, "no kernel 'kernel-nope'"),
                               (f"/asks/{ids[CREPES]}/correct", {}, "names the kernel"),
                               ("/asks/a-20260101T000000-abcdef/correct", {"kernel": GAMMA}, "no ask"),
                               ("/asks/nope/correct", {"kernel": GAMMA}, "not an ask id")):
        status, text = c.request(path, method="POST", data=json.dumps(fields).encode(), headers=hdr)
        assert status == 409 and said in json.loads(text)["error"], (path, text)
    assert corrections.load_all(brain) == []
