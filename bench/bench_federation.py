"""Federation core figures (issue 11), with the stand-in agent (tests/federation/standin_agent.py)
on a private tmux server, in a fresh temporary brain. Medians.

- spawn -> first heartbeat (tmux): from kernel_spawn() to the kernel's first heartbeat in the bus
  (published by the agent's SessionStart hook); target < 2 s.
- kill -> released: kernel_kill() (graceful stop, forced after the grace, record, locks released,
  goal removed); target < 2 s.
- nika-brain's own memory per running kernel, with KERNELS stand-in kernels running at once: the
  supervisor process (one per brain, shared), the tmux server (shared; not Python, listed apart) and
  the peak RSS of one hook process (transient: a kernel runs its hooks one at a time); the launcher
  execs the agent, so nothing else of ours stays resident. Target < 30 MB per kernel, judged with every
  hook the agent runs (the UserPromptSubmit hook included, with the triage's wrong-kernel hint that loads
  the embedding model); the figure without that hint is printed beside it, not judged.
- directive end to end: kernel_readjust() (directive appended, published on
  nika:federation:directives) to a listener blocked on that channel receiving it, on the embedded bus
  and on Redis (a real redis-server); targets < 200 ms and < 50 ms. (The session itself picks the
  directive up from the file at its next prompt, through the UserPromptSubmit hook.)

    python bench/bench_federation.py [--runs 5] [--kernels 20] [--directives 20]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from isolation import own_operator_home

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

from nika_brain import bus  # noqa: E402
from nika_brain.brain import Brain  # noqa: E402
from nika_brain.federation.kernels import health, runtimes, verbs, watchdog  # noqa: E402
from nika_brain.state import locks  # noqa: E402
from tests.kit.wait import until  # noqa: E402

STANDIN = ROOT / "tests" / "federation" / "standin_agent.py"


def make_brain(folder: Path, **fed) -> Brain:
    folder.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(folder)], check=True)
    cfg = {"agent_command": [sys.executable, str(STANDIN)], "tmux_socket": str(folder.parent / "tmux.sock"),
           "supervisor": "manual", "kill_grace": 2, **fed}
    (folder / "nika-brain.yml").write_text("version: 1\nfederation: " + json.dumps(cfg) + "\n")
    return Brain.at(folder)


def wait_for(fn, timeout=30.0):
    return until(fn, timeout, every=0.005)


def rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def spawn_kill(tmp: Path, runs: int) -> tuple[list[float], list[float]]:
    brain = make_brain(tmp / "sk")
    spawn, kill = [], []
    for i in range(runs):
        kid = f"k{i}"
        t0 = time.perf_counter()
        verbs.kernel_spawn(brain, f"bench kernel {i}", kernel_id=kid, resource_limits={"memory": "512M"})
        wait_for(lambda kid=kid: health.last_heartbeat(brain, kid))
        spawn.append(time.perf_counter() - t0)
        locks.acquire(brain, f"area{i}/", kid, pid=None)
        t0 = time.perf_counter()
        verbs.kernel_kill(brain, kid, "bench")
        kill.append(time.perf_counter() - t0)
        assert not locks.list_locks(brain)
    return spawn, kill


def memory(tmp: Path, n: int) -> dict:
    brain = make_brain(tmp / "mem")
    for i in range(n):
        verbs.kernel_spawn(brain, f"memory kernel {i}", kernel_id=f"m{i}")
    for i in range(n):
        wait_for(lambda i=i: health.last_heartbeat(brain, f"m{i}"), timeout=120)
    sup = subprocess.Popen(watchdog.command(),  # what `kernel spawn` starts in the background
                           cwd=brain.root, env={**os.environ, "NIKA_BRAIN_DIR": str(brain.root)})
    time.sleep(6.0)  # a few passes over every kernel (one every 2 s)
    sup_rss = rss_kb(sup.pid)
    tmux_pid = int(subprocess.run(["tmux", "-S", str(tmp / "tmux.sock"), "display-message", "-p",
                                   "#{pid}"], capture_output=True, text=True).stdout.strip())
    tmux_rss = rss_kb(tmux_pid)
    # the hook processes as the agent runs them: UserPromptSubmit (directives, the triage's
    # wrong-kernel hint, taken + heartbeat) and Stop (context measure, answered + heartbeat)
    kfolder = brain.kernels_dir / "m0"
    sid = health.metrics(brain, "m0")["session"]
    hooks = []
    for event in ({"hook_event_name": "UserPromptSubmit", "prompt": "check the backups of the VPN"},
                  {"hook_event_name": "Stop", "transcript_path": ""}):
        payload = json.dumps({**event, "session_id": sid, "cwd": str(kfolder)})
        for _ in range(2):  # /usr/bin/time: the hook's own peak (a fork of this process would count ours)
            p = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "nika_brain", "hook",
                                event["hook_event_name"]], input=payload, text=True, cwd=kfolder,
                               capture_output=True,
                               env={**os.environ, "NIKA_KERNEL_ID": "m0", "NIKA_BRAIN_DIR": str(brain.root)})
            hooks.append((event["hook_event_name"], int(p.stderr.strip().splitlines()[-1])))
    # the same UserPromptSubmit without the triage's wrong-kernel hint (issue 12), which loads the
    # embedding model: what the federation core itself costs on that event
    core_only = ("import sys\nfrom nika_brain.hooks import claude as h\n"
                 "h.HANDLERS['UserPromptSubmit'] = [x for x in h.HANDLERS['UserPromptSubmit'] "
                 "if 'hint' not in str(x)]\nsys.exit(h.main(['UserPromptSubmit']))\n")
    payload = json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": "check the backups of the VPN",
                          "session_id": sid, "cwd": str(kfolder)})
    p = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-c", core_only], input=payload,
                       text=True, cwd=kfolder, capture_output=True,
                       env={**os.environ, "NIKA_KERNEL_ID": "m0", "NIKA_BRAIN_DIR": str(brain.root)})
    hooks.append(("UserPromptSubmit without the triage hint", int(p.stderr.strip().splitlines()[-1])))
    by_event = {name: max(kb for n, kb in hooks if n == name) for name, _ in hooks}
    core_kb = max(kb for name, kb in by_event.items() if name != "UserPromptSubmit")
    hook_kb = max(by_event.values())
    alive = sum(1 for k in range(n) if runtimes.get("tmux").alive(
        brain, verbs.kernels.load_kernel(brain, f"m{k}"), runtimes.load_state(brain, f"m{k}")).alive)
    sup.terminate()
    sup.wait()
    for i in range(n):
        verbs.kernel_kill(brain, f"m{i}", "bench over")
    return {"kernels": n, "alive": alive, "supervisor_kb": sup_rss, "tmux_kb": tmux_rss,
            "hook_peak_kb": hook_kb, "hooks_kb": by_event, "core_hook_kb": core_kb}


def directive_latency(brain: Brain, n: int) -> list[float]:
    from nika_brain.state import kernels
    kernels.save_kernel(brain, kernels.new_kernel("d1", "directive bench", status="active"))
    b = bus.open_bus(brain)
    last = b.read(bus.DIRECTIVES, count=10_000)
    after = [last[-1][0] if last else None]
    got: dict[str, float] = {}
    stop = threading.Event()

    def listen():
        lb = bus.BACKENDS[b.backend].from_brain(brain)  # its own connection, as another process has
        while not stop.is_set():
            for mid, msg in lb.read(bus.DIRECTIVES, after=after[0], count=100, block=1.0):
                after[0] = mid
                got[msg["text"]] = time.perf_counter()
        lb.close()

    th = threading.Thread(target=listen, daemon=True)
    th.start()
    time.sleep(0.3)
    out = []
    for i in range(n):
        text = f"directive {i} {time.time()}"
        t0 = time.perf_counter()
        verbs.kernel_readjust(brain, "d1", text, by="bench")
        wait_for(lambda text=text: text in got, timeout=10)
        out.append(got[text] - t0)
        time.sleep(0.02)
    stop.set()
    th.join(timeout=5)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kernels", type=int, default=20)
    ap.add_argument("--directives", type=int, default=20)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        try:
            spawn, kill = spawn_kill(tmp, a.runs)
            print(f"spawn -> first heartbeat (tmux, stand-in): median {statistics.median(spawn):.3f} s "
                  f"(min {min(spawn):.3f}, max {max(spawn):.3f}, n={len(spawn)}; target < 2 s)")
            print(f"kill -> released: median {statistics.median(kill):.3f} s "
                  f"(min {min(kill):.3f}, max {max(kill):.3f}; target < 2 s)")
            m = memory(tmp, a.kernels)
            per = (m["supervisor_kb"] / m["kernels"] + m["hook_peak_kb"]) / 1024
            sup_mb = m["supervisor_kb"] / 1024
            print(f"memory with {m['kernels']} stand-in kernels running ({m['alive']} alive): supervisor "
                  f"{sup_mb:.1f} MB total ({sup_mb / m['kernels']:.2f} MB "
                  f"per kernel), one hook process peak {m['hook_peak_kb'] / 1024:.1f} MB (transient), "
                  f"tmux server {m['tmux_kb'] / 1024:.1f} MB total (not Python)")
            print("hook peaks: " + ", ".join(f"{e} {kb / 1024:.1f} MB" for e, kb in m["hooks_kb"].items()))
            core = (m["supervisor_kb"] / m["kernels"] + m["core_hook_kb"]) / 1024
            verdict = "met" if per < 30 else "MISSED"
            print(f"nika-brain's own memory per running kernel (supervisor share + the largest hook, the "
                  f"prompt hook included): {per:.1f} MB; goal < 30 MB: {verdict}")
            print(f"  (for reference, not judged: {core:.1f} MB without the triage hint in the prompt hook)")
        finally:
            subprocess.run(["tmux", "-S", str(tmp / "tmux.sock"), "kill-server"], capture_output=True)
        emb = directive_latency(make_brain(tmp / "emb"), a.directives)
        print(f"directive end to end, embedded bus: median {statistics.median(emb) * 1000:.1f} ms "
              f"(p90 {sorted(emb)[int(len(emb) * 0.9) - 1] * 1000:.1f}; target < 200 ms)")
        from tests.kit.redis import RedisServer
        with RedisServer(tmp / "redis") as url:
            rb = make_brain(tmp / "red")
            (rb.root / "nika-brain.yml").write_text(
                f"version: 1\nbus: redis\nredis_url: {url}\nfederation: {{supervisor: manual}}\n")
            red = directive_latency(Brain.at(rb.root), a.directives)
        print(f"directive end to end, Redis bus: median {statistics.median(red) * 1000:.1f} ms "
              f"(p90 {sorted(red)[int(len(red) * 0.9) - 1] * 1000:.1f}; target < 50 ms)")


if __name__ == "__main__":
    with own_operator_home():
        main()
