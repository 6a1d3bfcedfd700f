"""kill -9: of a lock holder (the TTL then frees the scope), and of a writer in the middle of its
writes (every state file stays either its old or its new version)."""
from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from nika_brain.state import claims, gates, locks
from nika_brain.state.claims import Claim, Result
from nika_brain.state.gates import Gate

# ---- a killed holder ----------------------------------------------------------------------------

HOLDER = r'''
import sys, time
from nika_brain.state import locks
from nika_brain.brain import Brain
brain = Brain.at(sys.argv[1])
t_before = time.monotonic()
lk = locks.acquire(brain, "src/", "sess-holder-step-1", ttl=float(sys.argv[2]))  # holder: this pid
t_after = time.monotonic()
print(t_before, t_after, flush=True)
time.sleep(3600)
'''


def test_kill_9_holder_frees_the_scope_after_its_ttl_and_not_before(brain):
    ttl, poll, margin = 2.0, 0.05, 60.0  # margin: a loaded 2-core CI runner stalls for seconds
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(brain.root), str(ttl)],
                            stdout=subprocess.PIPE, text=True)
    try:
        t_before, t_after = map(float, proc.stdout.readline().split())
        (held,) = locks.list_locks(brain)
        assert (held.holder.pid, held.holder.host) == (proc.pid, socket.gethostname())
        assert held.expires - held.acquired == timedelta(seconds=ttl)

        got: dict = {}

        def waiter():
            try:
                got["lock"] = locks.acquire(brain, "src/a.py", "sess-waiter-step-1", wait=ttl + 60,
                                            poll=poll)
            finally:
                got["t"] = time.monotonic()

        thread = threading.Thread(target=waiter)
        thread.start()
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
    thread.join(ttl + 90)
    assert "lock" in got, "the waiter never got the lock"
    new = got["lock"]
    # Never before the TTL: in the clock the TTL is kept in, and as measured here (monotonic).
    assert new.acquired >= held.expires
    assert got["t"] - t_before >= ttl
    # And not forever after it: within one poll, plus a wide margin for a loaded 2-core machine.
    assert got["t"] - t_after <= ttl + poll + margin
    assert new.token > held.token
    assert [lk.owner for lk in locks.list_locks(brain)] == ["sess-waiter-step-1"]


# ---- a killed writer ----------------------------------------------------------------------------

NOW = datetime(2031, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
BIG = 400_000  # characters of the payload of the file flipped between versions A and B
OWNER = "sess-20310506-0708-crash-step-1"

WRITER = r'''
import os, sys
from datetime import datetime, timezone
from nika_brain.state import claims, gates, locks
from nika_brain.brain import Brain

brain = Brain.at(sys.argv[1])
big = int(sys.argv[2])
now = datetime(2031, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
versions = {v: gates.Gate("big", v * big, "pending", now) for v in "AB"}
tag = os.getpid()
print("ready", flush=True)
i = 0
while True:
    current = gates.load_gate(brain, "big").message[0] if gates.gate_path(brain, "big").exists() else "B"
    gates.save(brain, versions["A" if current == "B" else "B"])
    c = claims.open_claim(brain, workflow="crash", step=f"{tag}-{i}", satellite_type="code",
                          scope="src/", now=now)
    claims.close_claim(brain, c.id, "ok", "done", tests_passed=3, tests_failed=0, now=now)
    g = gates.open_gate(brain, f"g-{tag}-{i}", "approve me", now=now)
    gates.decide(brain, g.id, "approve", by="tester", env={}, now=now)
    locks.acquire(brain, "src/", sys.argv[3], ttl=3600, pid=None, now=now)
    if i % 2:
        locks.release(brain, "src/", sys.argv[3])
    i += 1
    print("done", flush=True)  # one round of writes: the test kills after a number of them
'''


# The writers of the kill test are forked from one process that imported what they import (a writer's
# interpreter start and imports were most of the test's CPU, 50 times): each is still its own process,
# killed -9 in the middle of its writes, its exit status read by the process that forked it.
ZYGOTE = r'''
import importlib, os, pkgutil, sys
import nika_brain.state, nika_brain.support
for pkg in (nika_brain.state, nika_brain.support):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(info.name)
writer, argv = sys.argv[1], sys.argv[2:]
for line in sys.stdin:
    cmd, *args = line.split()
    if cmd == "fork":   # fork <stdout fifo> <stderr file> [NIKA_FAULT]: a writer, its pid on our stdout
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            if len(args) > 2:
                os.environ["NIKA_FAULT"] = args[2]
            os.dup2(os.open(args[0], os.O_WRONLY), 1)
            os.dup2(os.open(args[1], os.O_WRONLY | os.O_CREAT, 0o644), 2)
            sys.stdin.close()
            sys.argv = ["-c", *argv]
            code = 0
            try:
                exec(compile(writer, "<writer>", "exec"), {"__name__": "__main__"})
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        print(pid, flush=True)
    elif cmd == "wait":   # wait <pid>: its exit status (-9: killed by the signal)
        _, status = os.waitpid(int(args[0]), 0)
        print(os.waitstatus_to_exitcode(status), flush=True)
'''


def expected_claim(c: Claim) -> set:
    """The two versions a claim file of the writer may have: as opened, and as closed."""
    opened = Claim(c.id, "crash", "crash", c.step, "code", "domain", ("src/",), None, "open", NOW)
    closed = replace(opened, status="closed", closed=NOW, result=Result("ok", "done", 3, 0))
    return {repr(opened), repr(closed)}


def expected_gate(g: Gate) -> set:
    pending = Gate(g.id, "approve me", "pending", NOW)
    approved = replace(pending, status="approved", decided_at=NOW, decided_by="tester", via="cli")
    return {repr(pending), repr(approved)}


def check_state(brain) -> dict:
    """Every state file parses with its loader and is one of the versions the writer writes."""
    seen = {}
    yml = {d: sorted(p.name for p in d.iterdir() if p.suffix == ".yml" and not p.name.startswith("."))
           for d in (brain.claims_dir, brain.gates_dir, brain.locks_dir) if d.is_dir()}

    listed = claims.list_claims(brain)
    assert sorted(f"{c.id}.yml" for c in listed) == yml.get(brain.claims_dir, [])
    for c in listed:
        assert repr(c) in expected_claim(c), c

    big = [v for v in "AB" if (g := gates.load_gate(brain, "big")).message == v * BIG
           and g == Gate("big", v * BIG, "pending", NOW)] if (brain.gates_dir / "big.yml").exists() else []
    assert len(big) <= 1
    seen["big"] = big[0] if big else None
    if (brain.gates_dir / "big.yml").exists():
        assert big, "the big file is neither version A nor version B"

    listed_gates = gates.list_gates(brain)
    assert sorted(f"{g.id}.yml" for g in listed_gates) == yml.get(brain.gates_dir, [])
    for g in listed_gates:
        if g.id != "big":
            # An approved version carries the operator's signature: whole, and valid for its fields.
            assert repr(replace(g, signature=None)) in expected_gate(g), g
            assert g.pending or gates.authentic(brain, g) is None, g

    counter = brain.state_dir / "fencing"
    top = int(counter.read_text() or 0) if counter.exists() else 0  # created empty, then written: both read 0
    listed_locks = locks.list_locks(brain)
    assert sorted(lk.path.name for lk in listed_locks) == yml.get(brain.locks_dir, [])
    for lk in listed_locks:
        assert (lk.scope, lk.owner, lk.mode, lk.acquired, lk.expires, lk.holder) == (
            "src/", OWNER, "exclusive", NOW, NOW + timedelta(seconds=3600),
            locks.Holder(socket.gethostname()))
        assert 1 <= lk.token <= top
    seen["claims"] = len(listed)
    seen["tmp"] = sum(1 for d in yml for p in d.iterdir() if p.name.endswith(".tmp"))
    return seen


def test_kill_9_during_writes_leaves_old_or_new_versions(brain, tmp_path):
    rng = random.Random(9)
    # A leftover shaped like an interrupted write, planted up front: listings must never read it.
    for folder in (brain.claims_dir, brain.gates_dir, brain.locks_dir):
        folder.mkdir(exist_ok=True)
        (folder / ".big.yml.k1llme.tmp").write_text("id: [half a wri")
    versions_seen, kills, rounds, mid_write = set(), 50, 0, []
    zygote = subprocess.Popen([sys.executable, "-c", ZYGOTE, WRITER, str(brain.root), str(BIG), OWNER],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for kill in range(kills):
            out_path, err_path = tmp_path / f"writer-{kill}.out", tmp_path / f"writer-{kill}.err"
            os.mkfifo(out_path)
            # Every other writer kills itself with half of its Nth file written (support/faults.py
            # `mid-write@N`, N seeded: any of the files a round writes, the big one included); the rest
            # are killed from here after a seeded number of whole rounds, wherever they then are.
            fault = f"mid-write@{rng.randint(1, 24)}" if kill % 2 else ""
            zygote.stdin.write(f"fork {out_path} {err_path} {fault}\n")
            zygote.stdin.flush()
            pid = int(zygote.stdout.readline() or 0)
            assert pid, zygote.stderr.read()
            with open(out_path) as out:
                assert out.readline() == "ready\n", err_path.read_text()
                if fault:   # until it kills itself: within its first few rounds (each writes ~8 files)
                    for line in out:
                        rounds += line == "done\n"
                        if line == "done\n" and rounds > 1000:
                            os.kill(pid, signal.SIGKILL)
                            raise AssertionError(f"{fault} never fired")
                else:
                    for _round in range(rng.randint(0, 3)):
                        assert out.readline() == "done\n", err_path.read_text()
                        rounds += 1
                    os.kill(pid, signal.SIGKILL)
            zygote.stdin.write(f"wait {pid}\n")
            zygote.stdin.flush()
            code = int(zygote.stdout.readline())
            assert code == -signal.SIGKILL, err_path.read_text()  # still writing, not dead of an error
            seen = check_state(brain)
            if fault:   # it died with half a file written: its temporary file is there (never read as state)
                half = [p for p in brain.root.rglob(f".*.{pid}.*.tmp") if ".git" not in p.parts]
                assert len(half) == 1, (fault, half)
                mid_write.append(pid)
            versions_seen.add(seen["big"])
    finally:
        zygote.stdin.close()
        zygote.wait(timeout=60)
    assert {"A", "B"} <= versions_seen
    assert rounds >= 10 and seen["claims"] >= rounds  # the writer did get work done between the kills
    assert seen["tmp"] >= 3  # the planted leftovers (and any real ones) were there, and ignored
    assert len(mid_write) == kills // 2   # each self-killed writer died in the middle of a write
