"""Handover: from the threshold crossing to the successor's first heartbeat (issue 14: under 5 s).

Each run makes a temporary brain whose kernels run the stand-in agent (tests/federation/
standin_agent.py: it runs the real hooks and writes a transcript, 2,000 tokens a turn) on a private
tmux server, with a 10,000-token window: the third prompt crosses 41 %. The crossing time is when
the Stop hook asked for the handover (the session record's `handover.at`); the federation daemon's
supervisor service, ticking every 5 s as under `federation up`, does it outside the kernel's sandbox;
the end is the successor's first heartbeat on nika:federation:health (`t`). Prints the median over
RUNS runs.

    python bench/bench_handover.py [--runs 3]
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
from pathlib import Path

from isolation import own_operator_home

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nika_brain.brain import Brain  # noqa: E402
from nika_brain.federation.daemon import supervise  # noqa: E402
from nika_brain.federation.kernels import health, verbs  # noqa: E402
from nika_brain.state import sessions  # noqa: E402
from tests.kit import wait  # noqa: E402
from tests.kit.brain import IDENTITY  # noqa: E402

STANDIN = ROOT / "tests" / "federation" / "standin_agent.py"


def until(fn, timeout=60.0):
    return wait.until(fn, timeout, every=0.02)


def one(tmp: Path) -> float:
    root = tmp / "brain"
    root.mkdir(parents=True)
    env = {**os.environ, **IDENTITY}
    fed = {
        "agent_command": [sys.executable, str(STANDIN)],
        "tmux_socket": str(tmp / "tmux.sock"),
        "supervisor": "manual",
        "deliver_timeout": 30,
        "kill_grace": 2,
        "handover": {"window": 10000},
    }
    (root / "nika-brain.yml").write_text("version: 1\nfederation: " + json.dumps(fed) + "\n")
    (root / ".gitignore").write_text(".nika/\n")
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "init"], check=True, env=env)
    os.environ["NIKA_BUS"] = "embedded"
    os.environ["PYTHONPATH"] = str(ROOT)  # the hooks the agent runs import this checkout
    brain = Brain.at(root)
    try:
        halt = threading.Event()
        verbs.kernel_spawn(brain, "Operate the servers and backups", kernel_id="alpha")
        until(lambda: health.last_heartbeat(brain, "alpha"))
        # the daemon's supervisor service, ticking as `federation up` does, does the handover
        daemon = supervise.service(brain)
        def tick_forever() -> None:
            while not halt.wait(daemon.every):
                daemon.tick()

        ticker = threading.Thread(target=tick_forever, daemon=True)
        ticker.start()
        for prompt in ("check the backups", "list the servers", "restore the file server"):
            verbs.kernel_invoke(brain, "alpha", prompt, wait=True)
        old = next(s.id for s in sessions.list_sessions(brain) if s.kernel == "alpha")
        asked = until(lambda: (sessions.raw(brain, old).get("handover") or {}).get("at"))
        hb = until(lambda: health.last_heartbeat(brain, "alpha-s2"))
        return hb["t"] - asked
    finally:
        halt.set()
        subprocess.run(
            ["tmux", "-S", str(tmp / "tmux.sock"), "kill-server"], capture_output=True, check=False
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    times = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-handover-") as tmp:
            times.append(one(Path(tmp)))
    print(
        "handover: threshold crossing -> successor's first heartbeat: "
        f"median {statistics.median(times):.2f} s "
        f"(runs: {', '.join(f'{t:.2f}' for t in times)}); target < 5 s"
    )
    return 0


if __name__ == "__main__":
    with own_operator_home():
        raise SystemExit(main())
