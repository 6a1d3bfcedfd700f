"""Campaign, faults and contention: kill -9 of state writers after a seeded random number of the writes
they report done (the kill lands in the write that follows, wherever it is), and of `workflow-launch` /
`claim close` at seeded random sequences of the named fault points, then validate, index and resume;
N processes x M lock cycles on the same and overlapping scopes with an O_EXCL sentinel held while the
lock is held. No kill waits a guessed delay: a loaded machine only makes the runs slower."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter

from nika_brain.engine import orchestrator
from nika_brain.state import claims, locks, validate
from nika_brain.support import faults, fsio
from tests.kit.brain import git_out as git
from tests.kit.orch import nb, orch_brain, run_file, worktree

from .corpus import SCALE, SEED

WRITER = r"""
import sys, os
sys.path.insert(0, sys.argv[2])
from nika_brain.brain import Brain
from nika_brain.state import claims, gates, locks
brain = Brain.at(sys.argv[1])

def done(what):  # one line per write completed: the test kills after a number of them
    print(what, flush=True)

n = 0
while True:
    n += 1
    owner, scope = f"sess-w{os.getpid()}-{n}", f"src/{os.getpid()}/{n % 7}/"  # a killed writer's lock stays
    locks.acquire(brain, scope, owner, pid=None, ttl=600)
    done("acquire")
    c = claims.open_claim(brain, workflow="w", step=n % 5, satellite_type="code", scope=scope)
    done("open")
    locks.renew(brain, scope, owner, ttl=900)
    done("renew")
    gates.open_gate(brain, f"g-{os.getpid()}-{n}", "ok?")
    done("gate")
    claims.close_claim(brain, c.id, "ok", "x" * (n % 300))
    done("close")
    locks.release(brain, scope, owner)
    done("release")
"""

CHECKOUT = str(__import__("pathlib").Path(__file__).resolve().parents[2])


def test_kill_9_of_writers_after_a_random_number_of_writes(brain):
    rng = random.Random(SEED)
    opened = 0
    for _ in range(12 * SCALE):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(brain.root), CHECKOUT],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for _write in range(rng.randint(1, 14)):
                line = proc.stdout.readline()
                assert line, f"the writer died by itself: {proc.stderr.read()[-2000:]}"
                opened += line == "open\n"
            proc.send_signal(signal.SIGKILL)       # it is in the middle of its next write, or between two
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == -9, err[-2000:]
    report = validate.validate(brain.root)
    assert report.problems == []                      # every file whole: old or new, never torn
    assert opened > 0 and len(claims.list_claims(brain)) >= opened
    # Temp files left by the kills: never committed, swept once their writer is gone.
    orchestrator.commit_state(brain, "state after kills")
    assert ".tmp" not in git(brain.root, "ls-files")
    for folder in (brain.claims_dir, brain.locks_dir, brain.gates_dir):
        fsio.sweep_temp(folder, min_age=0)
        assert [n for n in os.listdir(folder) if fsio.temp_pid(n) is not None] == []
    # Locks of killed writers (TTL-only) are the only ones left; fencing went on increasing.
    assert all(lk.owner.startswith("sess-w") for lk in locks.list_locks(brain))
    nxt = locks.acquire(brain, "other/", "sess-after", pid=None)
    assert all(nxt.token > lk.token for lk in locks.list_locks(brain) if lk.owner != "sess-after")


CHAIN = """name: crash
branch: theme/crash
chain:
  - step: 1
    type: search
    scope: notes/
  - step: 2
    type: brain-write
    scope: docs/
  - step: 3
    type: search
    scope: notes/more/
"""


def _run(brain, point: str | None, *args) -> subprocess.CompletedProcess:
    """`nika-brain ARGS`, killed by itself (kill -9) if it reaches the fault point `point`."""
    env = {k: v for k, v in os.environ.items() if k != "NIKA_FAULT"}
    if point:
        env["NIKA_FAULT"] = point
    return subprocess.run([sys.executable, "-m", "nika_brain", *args], cwd=brain.root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_kill_9_of_workflow_launch_at_random_fault_points_then_validate_index_resume(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"crash": CHAIN})
    rng = random.Random(SEED + 7)
    # The step boundaries in a seeded random order, then the merge: each is armed (NIKA_FAULT) on every
    # command until a process reaches it and dies there, then the next one is. The step boundaries
    # recur at each of the 3 steps, so at least 3 of them are hit whatever the order.
    per_step = [p for p in faults.POINTS if p not in ("after-gate-open", "before-merge", "after-merge")]
    armed = [*rng.sample(per_step, len(per_step)), "before-merge", "after-merge"]
    killed_at: list[str] = []
    for _round in range(60):
        run = run_file(brain, "crash") if (brain.root / "runs" / "crash.yml").exists() else None
        if run and run["status"] == "done":
            break
        claim = run.get("claim") if run else None
        point = armed[len(killed_at)] if len(killed_at) < len(armed) else None
        if claim and claims.load_claim(brain, claim).is_open:
            (worktree(brain, "theme/crash") / "notes").mkdir(parents=True, exist_ok=True)
            (worktree(brain, "theme/crash") / "notes" / f"{claim}.md").write_text("done\n")
            p = _run(brain, point, "claim", "close", claim, "--status", "ok")
        else:
            p = _run(brain, point, "workflow-launch", "crash")
        if p.returncode == -9:
            assert point, p.stderr                     # only a named point kills
            killed_at.append(point)
            continue
        assert "Traceback" not in p.stderr, p.stderr
        assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    else:
        raise AssertionError(f"never finished: {run_file(brain, 'crash')}")
    assert len(killed_at) >= 3 and killed_at == armed[:len(killed_at)], killed_at
    assert run_file(brain, "crash")["status"] == "done"
    # No step ran twice: one ok claim per step.
    done = Counter(c.step for c in claims.list_claims(brain, "closed")
                   if c.result and c.result.status == "ok")
    assert done == Counter({"1": 1, "2": 1, "3": 1}), done
    assert locks.list_locks(brain) == []              # no orphan lock
    assert validate.validate(brain.root).problems == []
    nb(brain, "index", check=0)
    nb(brain, "workflow", "resume", "crash")          # a resume of a finished run changes nothing
    assert ".tmp" not in git(brain.root, "ls-files")


CYCLER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[2])
from nika_brain.brain import Brain
from nika_brain.state import locks
root, _, scope, cycles, sentinel, log = sys.argv[1:7]
brain = Brain.at(root)
overlaps = 0
for i in range(int(cycles)):
    owner = f"sess-c{os.getpid()}-{i}"
    lk = locks.acquire(brain, scope, owner, wait=600, poll=0.002)
    try:
        fd = os.open(sentinel, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        overlaps += 1
        fd = None
    with open(log, "a") as fh:
        fh.write(f"{lk.token}\n")
    if fd is not None:
        os.close(fd)
        os.unlink(sentinel)
    locks.release(brain, scope, owner)
print(overlaps)
"""


def test_contention_on_same_and_overlapping_scopes(brain, tmp_path):
    n, m = 4, 25 * SCALE
    scopes = ["src/", "src/a/", "src/a/b.py", "src/"]   # all overlap: one sentinel for all
    sentinel, log = tmp_path / "sentinel", tmp_path / "grants"
    procs = [subprocess.Popen([sys.executable, "-c", CYCLER, str(brain.root), CHECKOUT, scopes[i % 4], str(m),
                               str(sentinel), str(log)], stdout=subprocess.PIPE, text=True)
             for i in range(n)]
    overlaps = [int(p.communicate(timeout=600)[0]) for p in procs]
    assert [p.returncode for p in procs] == [0] * n
    assert sum(overlaps) == 0
    tokens = [int(t) for t in log.read_text().split()]
    assert len(tokens) == n * m
    assert all(a < b for a, b in zip(tokens, tokens[1:])), "tokens not strictly increasing in grant order"
    assert locks.list_locks(brain) == []
