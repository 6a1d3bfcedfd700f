"""The federation daemon, measured as a user pays it (issue 19). Whole processes, a brain made by
`nika-brain init` with its hooks, the French kernel set (bench/triage_fr) as its kernels.

  hook      the UserPromptSubmit hook of a kernel session (its wrong-kernel hint answered by the
            daemon's resident model) vs a bare `python -c pass`, interleaved; min/median/max of the
            paired ratios (goal <= 2.5x) and the hook process's max RSS (goal < 30 MB)
  ask       `nika-brain ask "<prompt>"` vs `nika-brain kernel invoke <k> "<prompt>"` to the kernel
            the ask routes to, interleaved (a kernel running the STAND-IN agent of the tests: no
            model behind it); ask's own cost = the paired difference (goal < 50 ms warm)
  daemon    the daemon's RSS with 20 live kernels, embedder loaded, stealing workers running
            (goal < 150 MB), and its CPU over an idle minute (goal < 1 %)
  spawn     `kernel spawn` -> ready (SessionStart) with the real `claude` CLI under tmux, against
            the Messages API stand-in (tests/claudecli/standin.py)

    python bench/bench_daemon.py [--runs 15] [--idle 60] [--only hook,ask,daemon,spawn]
"""
from __future__ import annotations

import argparse
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

from nika_brain.brain import Brain  # noqa: E402

STANDIN = ROOT / "tests" / "federation" / "standin_agent.py"
PY = sys.executable
GENERALIST = "kernel-generalist"


os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)


def nb(root: Path, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    root.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([PY, "-m", "nika_brain", *args], cwd=root, capture_output=True, text=True,
                       env={**os.environ, **(env or {})}, timeout=600)
    if check and p.returncode != 0:
        raise SystemExit(f"nika-brain {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


def timed(argv: list[str], cwd: Path, env: dict, stdin: str | None = None) -> tuple[float, int, float]:
    """Wall seconds, max RSS (kB) and CPU seconds (user + system) of one whole process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    if stdin is not None:
        p.stdin.write(stdin.encode())
    p.stdin.close()
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) not in (0, 8):
        raise SystemExit(f"{argv[:5]} exited {os.waitstatus_to_exitcode(status)}")
    return dt, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def spread(xs: list[float], fmt: str = "{:.2f}") -> str:
    return f"min {fmt.format(min(xs))}  median {fmt.format(statistics.median(xs))}  max {fmt.format(max(xs))}"


def make_brain(tmp: Path, kernels: int = 0) -> Brain:
    root = tmp / "brain"
    nb(tmp, "init", str(root))
    fed = {"agent_command": [PY, str(STANDIN)], "tmux_socket": str(tmp / "tmux.sock"),
           "supervisor": "manual", "deliver_timeout": 60, "kill_grace": 2,
           "triage": {"default": GENERALIST}}
    (root / "nika-brain.yml").write_text("version: 1\nfederation: " + json.dumps(fed) + "\n")
    # in another process: this one must not hold the model (a forked child's max RSS counts the
    # parent's pages until it execs)
    subprocess.run([PY, "-c", "import sys; from nika_brain.brain import Brain; "
                    "from tests.federation.triagekit import seed_kernels; b = Brain.at(sys.argv[1]); "
                    "seed_kernels(b); sys.argv[2:] and [__import__('tests.federation.triagekit', fromlist=['x'])"
                    ".write_kernel(b, f'k-extra-{n:02d}', f'extra kernel {n}: inventaire des licences lot {n}')"
                    " for n in range(int(sys.argv[2]))]", str(root), *([str(kernels)] if kernels else [])],
                   check=True, cwd=ROOT)
    return Brain.at(root)


def start_kernels(brain: Brain, ids: list[str]) -> None:
    for kid in ids:
        nb(brain.root, "claude", "install", "--kernel", kid)
        nb(brain.root, "kernel", "start", kid)


def bench_hook(brain: Brain, runs: int) -> None:
    from tests.federation.triagekit import ALPHA
    env = {**os.environ, "NIKA_BRAIN_DIR": str(brain.root), "NIKA_KERNEL_ID": ALPHA}
    payload = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s-bench", "cwd": str(brain.root),
                          "prompt": "prépare le rapport mensuel d'avancement pour le client"})
    hook = [PY, "-m", "nika_brain", "hook", "UserPromptSubmit"]
    base = [PY, "-c", "pass"]
    for _ in range(3):
        timed(hook, brain.root, env, payload)
    ratios, cpu_ratios, rss, hook_ms, base_ms = [], [], [], [], []
    for i in range(runs):  # interleaved; the order inside a pair alternates
        if i % 2:
            h, r, hc = timed(hook, brain.root, env, payload)
            b, _, bc = timed(base, brain.root, env)
        else:
            b, _, bc = timed(base, brain.root, env)
            h, r, hc = timed(hook, brain.root, env, payload)
        ratios.append(h / b)
        cpu_ratios.append(hc / max(bc, 1e-3))
        rss.append(r / 1024)
        hook_ms.append(h * 1000)
        base_ms.append(b * 1000)
    print(f"hook UserPromptSubmit (hint through the daemon): {spread(hook_ms, '{:.0f}')} ms;"
          f" python -c pass: {spread(base_ms, '{:.0f}')} ms")
    print(f"  paired wall ratio hook / python -c pass: {spread(ratios)}  (goal <= 2.5)")
    print(f"  paired CPU ratio (the hook process's own CPU; the daemon's embedding not counted): "
          f"{spread(cpu_ratios)}")
    print(f"  hook max RSS: {spread(rss, '{:.1f}')} MB  (goal < 30)")


def bench_ask(brain: Brain, runs: int) -> None:
    from tests.federation.triagekit import GAMMA
    prompt = "envoie au client le compte rendu de la réunion d'hier"
    env = dict(os.environ)
    ask = [PY, "-m", "nika_brain", "ask", prompt]
    inv = [PY, "-m", "nika_brain", "kernel", "invoke", GAMMA, prompt]
    for _ in range(2):
        timed(ask, brain.root, env)
        timed(inv, brain.root, env)
    diffs, a_ms, i_ms = [], [], []
    for n in range(runs):
        if n % 2:
            a, _, _ = timed(ask, brain.root, env)
            i, _, _ = timed(inv, brain.root, env)
        else:
            i, _, _ = timed(inv, brain.root, env)
            a, _, _ = timed(ask, brain.root, env)
        diffs.append((a - i) * 1000)
        a_ms.append(a * 1000)
        i_ms.append(i * 1000)
    print(f"ask: {spread(a_ms, '{:.0f}')} ms; direct invoke: {spread(i_ms, '{:.0f}')} ms")
    print(f"  ask's own cost (paired ask - invoke): {spread(diffs, '{:.0f}')} ms  (goal < 50 warm)")


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def bench_daemon(tmp: Path, idle: float) -> None:
    from nika_brain.federation import resident
    from nika_brain.state import kernels
    brain = make_brain(tmp / "d20", kernels=14)
    ids = [k.id for k in kernels.list_kernels(brain)]
    start_kernels(brain, ids)
    nb(brain.root, "federation", "up", "--detach")
    pid = resident.daemon_pid(brain.state_dir)
    from nika_brain.federation.daemon import host
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # every kernel's stealing worker started
        st = host.status(brain)["services"].get("stealing", {})
        if st.get("ticks", 0) >= 3:
            break
        time.sleep(1)
    time.sleep(10)
    c0, t0 = _cpu_s(pid), time.monotonic()
    time.sleep(idle)
    cpu = 100 * (_cpu_s(pid) - c0) / (time.monotonic() - t0)
    rss = _rss_kb(pid) / 1024
    print(f"daemon with {len(ids)} live kernels: RSS {rss:.0f} MB (goal < 150), idle CPU {cpu:.2f} % "
          f"over {idle:g}s (goal < 1)")
    nb(brain.root, "federation", "down")
    subprocess.run(["tmux", "-S", str(tmp / "d20" / "tmux.sock"), "kill-server"], capture_output=True)


def bench_spawn(tmp: Path, runs: int) -> None:
    from nika_brain.federation.kernels import health
    from tests.claudecli.standin import MessagesStandin, text
    claude = os.environ.get("NIKA_TEST_CLAUDE") or "claude"
    root = tmp / "spawn" / "brain"
    nb(tmp, "init", str(root))
    sock = tmp / "spawn" / "tmux.sock"
    fed = {"agent_command": [claude], "tmux_socket": str(sock), "supervisor": "manual"}
    (root / "nika-brain.yml").write_text("version: 1\nfederation: " + json.dumps(fed) + "\n")
    brain = Brain.at(root)
    cfg = tmp / "spawn" / "claude-config"
    cfg.mkdir()
    (cfg / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
    secs = []
    with MessagesStandin([[text("ok")]]) as standin:
        envf = tmp / "spawn" / "k.env"
        envf.write_text(f"ANTHROPIC_BASE_URL={standin.url}\nANTHROPIC_API_KEY=sk-standin-bench-000000000000\n"
                        f"CLAUDE_CONFIG_DIR={cfg}\nDISABLE_AUTOUPDATER=1\nDISABLE_TELEMETRY=1\n"
                        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\n")
        env = {"PYTHONPATH": str(ROOT)}
        for n in range(runs):
            kid = f"k{n}"
            t0 = time.perf_counter()
            nb(root, "kernel", "spawn", f"bench kernel {n}", "--id", kid, "--env-file", str(envf), env=env)
            while not any(e.get("event") == "session" for e in health.read_events(brain, kid)[0]):
                if time.perf_counter() - t0 > 180:
                    raise SystemExit(f"{kid}: no SessionStart within 180 s")
                time.sleep(0.05)
            secs.append(time.perf_counter() - t0)
            nb(root, "kernel", "kill", kid, "--reason", "bench", env=env)
    subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)
    print(f"spawn -> ready (SessionStart) with the real claude: {spread(secs)} s over {runs} spawns")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--idle", type=float, default=60.0)
    ap.add_argument("--only", default="hook,ask,daemon,spawn")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="bench-daemon-") as t:
        tmp = Path(t)
        if only & {"hook", "ask"}:
            from tests.federation.triagekit import ALPHA, GAMMA
            brain = make_brain(tmp / "main")
            start_kernels(brain, [ALPHA, GAMMA, GENERALIST])
            nb(brain.root, "federation", "up", "--detach")
            try:
                if "hook" in only:
                    bench_hook(brain, args.runs)
                if "ask" in only:
                    bench_ask(brain, args.runs)
            finally:
                nb(brain.root, "federation", "down", check=False)
                subprocess.run(["tmux", "-S", str(tmp / "main" / "tmux.sock"), "kill-server"],
                               capture_output=True)
        if "daemon" in only:
            bench_daemon(tmp, args.idle)
        if "spawn" in only:
            bench_spawn(tmp, max(1, min(args.runs, 3)))
    return 0


if __name__ == "__main__":
    with own_operator_home():
        raise SystemExit(main())
