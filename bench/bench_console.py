"""The operator console's figures (issue 23), on a brain made by `init` (its hooks installed), with
58 kernel records and 200 open claims, served by the real `nika-brain console` process.

The kernels are records only (kernels/<id>/kernel.yml written by `state.kernels`, heartbeats
published on the brain's bus as their hooks publish them): what the overview reads is what 58 running
kernels leave, without 58 agents on a 2-core machine.

- served: GET / (the overview, HTML) over one keep-alive connection, interleaved with GET of the
  page's stylesheet from the same server (the baseline: the server's floor); min/median/max and the
  median of the paired ratios. Target: overview median < 100 ms.
- rendered: Chromium (Debian's, driven by Playwright) loads the overview to its load event (navigation
  timing), interleaved with loading a blank page from the same server (the stylesheet); target < 1 s.
- bus to page: a heartbeat published on `nika:federation:health` from this process, to the moment the
  open overview shows it (a MutationObserver on the kernel's row stamps Date.now(); same clock);
  baseline: another process reading the same bus (`bus.read` blocked) sees it. Target < 500 ms.
- the console's RSS (VmRSS and peak VmHWM from /proc) after the runs.

    python bench/bench_console.py [--runs 20] [--kernels 58] [--claims 200] [--events 20]
                                  [--screenshots docs/console]
"""
from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from isolation import own_operator_home

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

from nika_brain import bus  # noqa: E402
from nika_brain.brain import Brain  # noqa: E402
from nika_brain.engine import signals  # noqa: E402
from nika_brain.federation.kernels import health  # noqa: E402
from nika_brain.state import claims, gates, kernels  # noqa: E402
from nika_brain.state import prompts as queue  # noqa: E402
from nika_brain.support import clock  # noqa: E402
from tests.console.consolekit import CHROMIUM, CHROMIUM_ARGS, ConsoleProcess  # noqa: E402

MACHINES = ("ops-1", "ops-2", "edge-lyon")
GOALS = ["Operate the IT of BCUB3", "Watch public tenders", "Keep the backups honest", "Answer the support inbox",
         "Review pull requests", "Track the cloud bill", "Draft the release notes", "Audit access rights"]


def nika(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nika_brain", *args], cwd=str(cwd), capture_output=True,
                          text=True, check=True)


def populate(root: Path, n_kernels: int, n_claims: int) -> Brain:
    nika("init", str(root), cwd=root.parent)
    nika("operator", "init", cwd=root)
    brain = Brain.at(root)
    b = bus.open_bus(brain)
    now = time.time()
    for i in range(n_kernels):
        kid = f"k{i:02d}"
        k = kernels.new_kernel(kid, f"{GOALS[i % len(GOALS)]} ({kid})", tags=("ops",), memory="1G", cpu="50%",
                               status="active", runtime=("tmux", "headless")[i % 2])
        # a federation of three machines; the operator's --no-sandbox on a few
        k = dataclasses.replace(k, machine=MACHINES[i % len(MACHINES)], sandbox="off" if i % 7 == 3 else "bwrap")
        kernels.save_kernel(brain, k)
        kernels.set_status(brain, kid, "active", enforcement=("cgroup-v2", "prlimit")[i % 2])
        for j in range(30 if i == 1 else 1):   # k01 has a history: the kernel page's chart
            t = now - (29 - j) * 120 if i == 1 else now - i * 5 - (600 if i % 9 == 4 else 0)
            pct = round(min(95, 8 + j * 2.3 + (i * 7) % 30), 1)
            hb = {"kind": "heartbeat", "kernel": kid, "state": "idle", "source": "bench",
                  "at": clock.iso(clock.now().fromtimestamp(t, clock.now().tzinfo)), "t": t,
                  "context_pct": pct, "error_rate": 0.0, "ttfa_s": 1.2, "queue_depth": (j // 7) % 4}
            b.publish(bus.HEALTH, hb)
        b.set(health.heartbeat_key(kid), hb)
    kernels.readjust(brain, "k01", "prioritise the backup audit", by="operator")
    queue.enqueue(brain, "k01", "check last night's backups", by="operator")
    for i in range(n_claims - 1):   # the example run holds one
        claims.open_claim(brain, workflow=f"wf{i % 20:02d}", step=str(i // 20 + 1), satellite_type="code",
                          scope=[f"src/mod{i:03d}/"])
    nika("workflow-launch", "workflows/example.yml", cwd=root)   # a run in progress, its claim open
    for i in range(5):
        gates.open_gate(brain, f"review-{i}", f"merge wf{i:02d} into main?", workflow=f"wf{i:02d}")
        signals.emit(brain, "GATE_PENDING", workflow=f"wf{i:02d}", reason=f"gate review-{i}: merge wf{i:02d}?",
                     payload={"gate": f"review-{i}"})
    return brain


def stats(values: list[float]) -> str:
    return (f"min {min(values):.1f}  median {statistics.median(values):.1f}  max {max(values):.1f}")


def served(c: ConsoleProcess, runs: int) -> dict:
    host, port = c.base.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Cookie": c.cookie}

    def get(path: str) -> float:
        t = time.perf_counter()
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200 and body, (path, resp.status)
        return (time.perf_counter() - t) * 1000
    cold = get("/")
    page, base = [], []
    for _ in range(runs):
        page.append(get("/"))
        base.append(get("/static/console.css"))
    return {"cold": cold, "page": page, "base": base}


def rendered(browser, c: ConsoleProcess, runs: int) -> dict:
    ctx = browser.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True)
    p = ctx.new_page()
    p.goto(c.url)

    def load(path: str) -> float:
        p.goto(c.base + path, wait_until="load")
        return p.evaluate("(() => { const n = performance.getEntriesByType('navigation')[0];"
                          " return n.loadEventEnd - n.startTime; })()")
    page, base, rows = [], [], 0
    for _ in range(runs):
        page.append(load("/"))
        rows = p.locator("tr[data-kernel]").count()
        base.append(load("/static/console.css"))
    ctx.close()
    return {"page": page, "base": base, "rows": rows}


def bus_to_page(browser, c: ConsoleProcess, brain: Brain, events: int) -> dict:
    ctx = browser.new_context(bypass_csp=True)  # wait_for_function strings are eval
    p = ctx.new_page()
    p.goto(c.url)
    p.wait_for_function("document.getElementById('live').classList.contains('on')", timeout=60_000)
    p.evaluate("""() => { window.__seen = {};
        new MutationObserver(() => { const t = document.querySelector('tr[data-kernel="k00"] .hb-at').textContent;
            if (!(t in window.__seen)) window.__seen[t] = Date.now(); })
        .observe(document.querySelector('tr[data-kernel="k00"]'), {subtree: true, childList: true,
                                                                  characterData: true}); }""")
    reader = subprocess.Popen([sys.executable, "-c", READER, str(brain.root), str(events)], stdout=subprocess.PIPE,
                              text=True)
    assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
    b = bus.open_bus(brain)
    lat, sent = [], {}
    for i in range(events):
        at = f"2099-01-01T00:00:{i:02d}Z"   # a marker the row shows
        t = time.time()
        sent[at] = t
        b.publish(bus.HEALTH, {"kind": "heartbeat", "kernel": "k00", "state": "idle", "at": at, "t": t,
                               "context_pct": 10 + i, "queue_depth": 0})
        shown = json.dumps(at[11:19])  # the row shows the time of day
        p.wait_for_function(f"window.__seen[{shown}] !== undefined", timeout=60_000)
        lat.append(p.evaluate(f"window.__seen[{shown}]") - t * 1000)
        time.sleep(0.1)
    seen = json.loads(reader.stdout.readline())
    reader.wait(30)
    base = [(seen[at] - sent[at]) * 1000 for at in sent if at in seen]
    ctx.close()
    return {"page": lat, "base": base}


READER = """
import json, sys, time
from nika_brain import bus
from nika_brain.brain import Brain
b = bus.open_bus(Brain.at(sys.argv[1])); n = int(sys.argv[2]); after = None
while True:
    batch = b.read(bus.HEALTH, after=after, count=1000)
    if not batch: break
    after = batch[-1][0]
print("ready", flush=True)
seen = {}
while len(seen) < n:
    for mid, m in b.read(bus.HEALTH, after=after, count=100, block=5):
        after = mid
        if m.get("kernel") == "k00": seen[m["at"]] = time.time()
print(json.dumps(seen), flush=True)
"""


def rss(pid: int) -> dict:
    out = {}
    for line in open(f"/proc/{pid}/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


def screenshots(browser, c: ConsoleProcess, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    ctx = browser.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True)
    p = ctx.new_page()
    p.goto(c.url)
    p.wait_for_function("document.getElementById('live').classList.contains('on')", timeout=60_000)
    p.screenshot(path=str(folder / "overview.png"))
    p.goto(c.base + "/kernels/k01")
    p.wait_for_function("!document.getElementById('vault-stats').textContent.includes('loading')", timeout=120_000)
    p.screenshot(path=str(folder / "kernel.png"))
    ctx.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--kernels", type=int, default=58)
    ap.add_argument("--claims", type=int, default=200)
    ap.add_argument("--events", type=int, default=20)
    ap.add_argument("--screenshots", type=Path, default=None, help="save overview.png and kernel.png here")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright
    with tempfile.TemporaryDirectory(prefix="nika-console-bench-") as tmp:
        root = Path(tmp) / "brain"
        root.mkdir()
        brain = populate(root, a.kernels, a.claims)
        print(f"brain: {a.kernels} kernels, {a.claims} open claims, 5 gates (made by init; load "
              f"{os.getloadavg()[0]:.2f})")
        c = ConsoleProcess(root, Path(tmp) / "console.log")
        try:
            s = served(c, a.runs)
            ratios = [p / b for p, b in zip(s["page"], s["base"])]
            print(f"served  GET / (ms)         {stats(s['page'])}   (first request {s['cold']:.1f})")
            print(f"        stylesheet (ms)    {stats(s['base'])}")
            print(f"        paired ratio       median {statistics.median(ratios):.1f}x   "
                  f"target median < 100 ms: {'met' if statistics.median(s['page']) < 100 else 'NOT met'}")
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                r = rendered(browser, c, max(5, a.runs // 2))
                ratios = [p / b for p, b in zip(r["page"], r["base"])]
                print(f"render  overview (ms)      {stats(r['page'])}   ({r['rows']} kernel rows)")
                print(f"        blank page (ms)    {stats(r['base'])}")
                print(f"        paired ratio       median {statistics.median(ratios):.1f}x   "
                      f"target median < 1000 ms: {'met' if statistics.median(r['page']) < 1000 else 'NOT met'}")
                e = bus_to_page(browser, c, brain, a.events)
                print(f"event   bus -> page (ms)   {stats(e['page'])}")
                if e["base"]:
                    print(f"        bus -> reader (ms) {stats(e['base'])}")
                print(f"        target median < 500 ms: {'met' if statistics.median(e['page']) < 500 else 'NOT met'}"
                      f"; max < 500 ms: {'met' if max(e['page']) < 500 else 'NOT met'}")
                m = rss(c.proc.pid)
                print(f"memory  console RSS {m['VmRSS']:.1f} MB (peak {m['VmHWM']:.1f} MB) before any kernel "
                      "page opened the vault")
                if a.screenshots:
                    screenshots(browser, c, a.screenshots)
                    print(f"screenshots: {a.screenshots}/overview.png, {a.screenshots}/kernel.png")
                browser.close()
            m = rss(c.proc.pid)
            print(f"memory  console RSS {m['VmRSS']:.1f} MB (peak {m['VmHWM']:.1f} MB) at the end"
                  + (" (the kernel page's vault stats loaded chromadb)" if a.screenshots else ""))
        finally:
            c.stop()
    return 0


if __name__ == "__main__":
    with own_operator_home():
        sys.exit(main())
