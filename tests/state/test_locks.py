"""Path locks: scopes, TTL and takeover, holders, fencing tokens, shared mode, the CLI, and mutual
exclusion between real processes. Time is injected (`now=`, NIKA_NOW) instead of slept."""
from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from nika_brain.errors import EXIT_BUSY, EXIT_REFUSED, BrainError
from nika_brain.state import locks, scopes
from nika_brain.support import clock
from nika_brain.support.yamlsafe import dump_plain, dumps, load_file
from tests.kit.wait import until

T0 = datetime(2031, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
A, B, C = "sess-20310506-0708-alpha-step-1", "sess-20310506-0708-beta-step-1", "sess-x-step-9"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def busy(fn, *args, **kwargs) -> BrainError:
    with pytest.raises(BrainError) as info:
        fn(*args, **kwargs)
    assert info.value.exit_code == EXIT_BUSY, str(info.value)
    return info.value


# ---- scopes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b, overlap", [
    ("src/", "src/a.py", True),
    ("src", "src/a.py", True),
    ("src/a.py", "src/a.py", True),
    ("src/*.py", "src/a.py", True),
    ("src/*.py", "src/b.txt", False),
    ("src/*.py", "src/", True),           # the folder covers every file the glob can name
    ("src/*.py", "src/*.txt", True),      # two wildcards meet: assumed to overlap (safe side)
    (".", "anything/deep/file", True),
    ("", "src/", True),
    ("src/", "srcx/", False),
    ("src/", "lib/", False),
    ("src/a.py", "src/b.py", False),
    ("src/**", "src/x/y/z.py", True),
    ("docs/*.md", "src/a.md", False),
    ("src/a.py/", "src/a.py", True),
])
def test_scope_overlap(a, b, overlap):
    assert scopes.scopes_overlap(a, b) is overlap
    assert scopes.scopes_overlap(b, a) is overlap


@pytest.mark.parametrize("raw, norm", [("./src//a.py", "src/a.py"), ("src/", "src/"), ("./", "."),
                                       ("", "."), ("a\\b", "a/b")])
def test_normalize_scope(raw, norm):
    assert scopes.normalize_scope(raw) == norm


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "src/../../x", ".."])
def test_scope_outside_the_brain_is_refused(brain, bad):
    with pytest.raises(BrainError, match="inside the brain"):
        locks.acquire(brain, bad, A)
    assert list(brain.iter_yaml(brain.locks_dir)) == []


# ---- the lock file ------------------------------------------------------------------------------

def test_lock_file_records_owner_holder_times_and_token(brain):
    lk = locks.acquire(brain, "src/", A, ttl=90, now=T0)
    data = load_file(lk.path)
    assert data == {
        "scope": "src/", "mode": "exclusive", "owner": A, "token": lk.token,
        "acquired": "2031-05-06T07:08:09Z", "expires": "2031-05-06T07:09:39Z",
        "holder": {"host": socket.gethostname(), "pid": os.getpid(),
                   "started": locks._start_ticks(os.getpid())},
    }
    assert isinstance(lk.token, int) and lk.token >= 1
    assert lk.path.parent == brain.locks_dir
    assert locks.list_locks(brain) == [lk]


def test_tokens_strictly_increase_per_scope_and_globally(brain):
    tokens = []
    for i in range(6):
        scope = ("src/", "docs/")[i % 2]
        tokens.append((scope, locks.acquire(brain, scope, f"sess-t-step-{i}").token))
        locks.release(brain, scope, f"sess-t-step-{i}")
    flat = [t for _, t in tokens]
    assert flat == sorted(flat) and len(set(flat)) == len(flat)
    for scope in ("src/", "docs/"):
        mine = [t for s, t in tokens if s == scope]
        assert all(x < y for x, y in zip(mine, mine[1:]))


def test_token_never_goes_back_when_the_state_folder_is_wiped(brain):
    for i in range(3):
        locks.acquire(brain, f"f{i}", A)
    held = locks.acquire(brain, "src/", A)
    (brain.state_dir / "fencing").unlink()
    assert locks.acquire(brain, "lib/", B).token > held.token


def test_corrupt_fencing_counter_fails_closed(brain):
    locks.acquire(brain, "src/", A)
    (brain.state_dir / "fencing").write_text("not a number")
    with pytest.raises(BrainError, match="fencing counter .* is corrupt"):
        locks.acquire(brain, "lib/", B)


def test_non_canonical_counter_is_rewritten_not_patched(brain):
    # "0009" patched in place with "10" would read back as 1009.
    (brain.state_dir).mkdir(exist_ok=True)
    (brain.state_dir / "fencing").write_text("0009\n")
    assert locks.acquire(brain, "src/", A).token == 10
    assert (brain.state_dir / "fencing").read_text() == "10"
    assert locks.acquire(brain, "lib/", A).token == 11
    assert (brain.state_dir / "fencing").read_text() == "11"


def test_reacquire_by_owner_renews_and_keeps_token(brain):
    first = locks.acquire(brain, "src/", A, ttl=60, now=T0)
    again = locks.acquire(brain, "src/", A, ttl=60, now=at(45))
    assert again.token == first.token
    assert again.acquired == T0
    assert again.expires == at(105)
    assert len(locks.list_locks(brain)) == 1
    assert load_file(again.path)["expires"] == clock.iso(at(105))


def test_owner_may_nest_scopes(brain):
    locks.acquire(brain, "src/", A)
    inner = locks.acquire(brain, "src/a.py", A)
    assert inner.scope == "src/a.py"
    busy(locks.acquire, brain, "src/a.py", B)


# ---- TTL and takeover ---------------------------------------------------------------------------

def test_ttl_lock_without_process_is_taken_over_only_after_expiry(brain):
    old = locks.acquire(brain, "src/", A, ttl=60, pid=None, now=T0)
    err = busy(locks.acquire, brain, "src/a.py", B, now=at(59.999))
    assert A in str(err)
    new = locks.acquire(brain, "src/a.py", B, now=at(60))
    assert new.token > old.token
    assert [lk.owner for lk in locks.list_locks(brain)] == [B]
    assert not old.path.exists()


def test_live_holder_is_never_taken_over_even_past_ttl(brain):
    locks.acquire(brain, "src/", A, ttl=1, now=T0)  # holder: this (live) process
    busy(locks.acquire, brain, "src/", B, now=at(10 ** 6))
    assert [lk.owner for lk in locks.list_locks(brain)] == [A]


def test_dead_local_holder_waits_for_ttl_then_is_taken_over(brain):
    locks.acquire(brain, "src/", A, ttl=60, pid=dead_pid(), now=T0)
    busy(locks.acquire, brain, "src/", B, now=at(30))
    assert locks.acquire(brain, "src/", B, now=at(60)).owner == B


def test_reused_pid_is_another_process(brain):
    # Our pid, but a different start time: the original holder is gone, its pid was reused.
    lk = locks.acquire(brain, "src/", A, ttl=60, now=T0)
    data = load_file(lk.path)
    data["holder"]["started"] += 12345
    lk.path.write_text(dumps(data))
    busy(locks.acquire, brain, "src/", B, now=at(59))
    assert locks.acquire(brain, "src/", B, now=at(61)).owner == B


def test_unreaped_zombie_holder_is_dead(brain):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    for _ in range(100000):  # wait (without a deadline) until it has exited; it stays unreaped
        st = locks._proc_stat(proc.pid)
        if st is None or st[0] == "Z":
            break
        time.sleep(0.005)
    try:
        assert locks._proc_stat(proc.pid)[0] == "Z"
        locks.acquire(brain, "src/", A, ttl=60, pid=proc.pid, now=T0)
        assert locks.holder_alive(locks.list_locks(brain)[0].holder) is False
        busy(locks.acquire, brain, "src/", B, now=at(59))
        assert locks.acquire(brain, "src/", B, now=at(60)).owner == B
    finally:
        proc.wait()


def write_foreign_lock(brain, scope: str, owner: str, *, expires: datetime, token: int = 41) -> Path:
    """A lock written by nika-brain on another host, whose pid happens to be alive here."""
    path = brain.locks_dir / "written-elsewhere.yml"
    brain.locks_dir.mkdir(exist_ok=True)
    path.write_text(dumps({
        "scope": scope, "mode": "exclusive", "owner": owner, "token": token,
        "acquired": clock.iso(expires - timedelta(seconds=60)), "expires": clock.iso(expires),
        "holder": {"host": "elsewhere.example", "pid": os.getpid(),
                   "started": locks._start_ticks(os.getpid())}}))
    return path


def test_lock_from_another_host_counts_only_ttl(brain):
    path = write_foreign_lock(brain, "src/", A, expires=at(60))
    (held,) = locks.list_locks(brain)
    assert locks.holder_alive(held.holder) is None  # a local pid says nothing about another host
    err = busy(locks.acquire, brain, "src/a.py", B, now=at(59))
    assert "elsewhere.example" in str(err)
    new = locks.acquire(brain, "src/a.py", B, now=at(60))
    assert new.token > 41  # above every token seen on disk, even a foreign one
    assert not path.exists()
    assert [lk.owner for lk in locks.list_locks(brain)] == [B]


def test_foreign_lock_is_taken_over_by_the_cli_after_ttl(brain, cli):
    write_foreign_lock(brain, "src/", A, expires=at(60))
    r = cli("lock", "acquire", "src/", "--owner", B, env={"NIKA_NOW": clock.iso(at(30))})
    assert r.returncode == 3 and "elsewhere.example" in r.stderr
    r = cli("lock", "acquire", "src/", "--owner", B, env={"NIKA_NOW": clock.iso(at(60.5))})
    assert r.returncode == 0, r.stderr
    assert [lk.owner for lk in locks.list_locks(brain)] == [B]


# ---- release and renew --------------------------------------------------------------------------

def test_release_by_non_owner_is_refused(brain):
    lk = locks.acquire(brain, "src/", A)
    with pytest.raises(BrainError) as info:
        locks.release(brain, "src/", B)
    assert info.value.exit_code == EXIT_REFUSED
    assert A in str(info.value)
    assert lk.path.exists()
    with pytest.raises(BrainError) as info:  # missing_ok does not turn a refusal into "nothing held"
        locks.release(brain, "src/", B, missing_ok=True)
    assert info.value.exit_code == EXIT_REFUSED
    assert locks.release(brain, "src/", A) is True
    assert locks.list_locks(brain) == []


def test_a_lock_under_another_file_name_is_still_its_owners(brain):
    # Written by hand (or by an older nika-brain that named files by scope only).
    path = write_foreign_lock(brain, "src/", A, expires=at(60))
    again = locks.acquire(brain, "src/", A, now=at(10))
    assert (again.path, again.token) == (path, 41)  # renewed in place, not a second file
    assert len(locks.list_locks(brain)) == 1
    with pytest.raises(BrainError) as info:
        locks.release(brain, "src/", B)
    assert info.value.exit_code == EXIT_REFUSED
    assert locks.release(brain, "src/", A) is True
    assert not path.exists()


def test_a_file_at_my_lock_path_naming_another_owner_is_not_mine(brain):
    # The release fast path trusts the file's words, not its name: a hand edit to owner B under
    # A's file name must be refused to A and released only by B.
    lk = locks.acquire(brain, "src/", A)
    lk.path.write_text(lk.path.read_text().replace(f"owner: {A}", f"owner: {B}"))
    with pytest.raises(BrainError) as info:
        locks.release(brain, "src/", A)
    assert info.value.exit_code == EXIT_REFUSED and B in str(info.value)
    assert lk.path.exists()
    assert locks.release(brain, "src/", B) is True
    assert not lk.path.exists()


def test_release_of_nothing(brain):
    with pytest.raises(BrainError, match="no lock held on src/") as info:
        locks.release(brain, "src/", A)
    assert info.value.exit_code == 1
    assert locks.release(brain, "src/", A, missing_ok=True) is False


def test_release_is_exact_not_by_overlap(brain):
    locks.acquire(brain, "src/", A)
    with pytest.raises(BrainError, match="no lock held on src/a.py"):
        locks.release(brain, "src/a.py", A)
    assert len(locks.list_locks(brain)) == 1


def test_renew(brain):
    lk = locks.acquire(brain, "src/", A, ttl=10, now=T0)
    new = locks.renew(brain, "src/", A, ttl=100, now=at(5))
    assert (new.token, new.acquired, new.expires) == (lk.token, T0, at(105))
    assert locks.list_locks(brain)[0].expires == at(105)
    with pytest.raises(BrainError) as info:
        locks.renew(brain, "src/", B, now=at(6))
    assert info.value.exit_code == EXIT_REFUSED
    with pytest.raises(BrainError, match="no lock held"):
        locks.renew(brain, "lib/", A)


def test_release_all(brain):
    for scope in ("src/", "docs/", "lib/x.py"):
        locks.acquire(brain, scope, A)
    locks.acquire(brain, "other/", B)
    assert sorted(locks.release_all(brain, A)) == ["docs/", "lib/x.py", "src/"]
    assert [lk.owner for lk in locks.list_locks(brain)] == [B]


# ---- shared and exclusive -----------------------------------------------------------------------

def test_shared_and_exclusive(brain):
    a = locks.acquire(brain, "src/", A, mode="shared")
    b = locks.acquire(brain, "src/", B, mode="shared")  # the same scope, another owner
    c = locks.acquire(brain, "src/a.py", C, mode="shared")
    assert len({a.path, b.path, c.path}) == 3
    assert sorted(lk.owner for lk in locks.list_locks(brain)) == sorted([A, B, C])
    busy(locks.acquire, brain, "src/b.py", "sess-w-step-1")
    locks.release(brain, "src/", A)
    assert sorted(lk.owner for lk in locks.list_locks(brain)) == sorted([B, C])
    busy(locks.acquire, brain, "src/", "sess-w-step-1")
    locks.release(brain, "src/", B)
    locks.release(brain, "src/a.py", C)
    w = locks.acquire(brain, "src/", "sess-w-step-1")
    err = busy(locks.acquire, brain, "src/a.py", A, mode="shared")
    assert "sess-w-step-1" in str(err)
    assert w.token > max(a.token, b.token, c.token)


def test_upgrading_shared_to_exclusive_waits_for_other_readers(brain):
    mine = locks.acquire(brain, "src/", A, mode="shared")
    locks.acquire(brain, "src/", B, mode="shared")
    busy(locks.acquire, brain, "src/", A)
    locks.release(brain, "src/", B)
    up = locks.acquire(brain, "src/", A)
    assert (up.mode, up.token) == ("exclusive", mine.token)


def test_conflicts(brain):
    locks.acquire(brain, "src/", A, mode="shared")
    assert locks.conflicts(brain, "src/a.py", B, mode="shared") == []
    assert [lk.owner for lk in locks.conflicts(brain, "src/a.py", B)] == [A]
    assert locks.conflicts(brain, "src/a.py", A) == []
    assert locks.conflicts(brain, "lib/", B) == []


def test_bad_mode_and_owner(brain):
    with pytest.raises(BrainError, match="mode"):
        locks.acquire(brain, "src/", A, mode="sharedish")
    with pytest.raises(BrainError, match="owner"):
        locks.acquire(brain, "src/", "  ")


# ---- waiting ------------------------------------------------------------------------------------

def test_wait_gives_up_with_busy_after_the_timeout(brain):
    locks.acquire(brain, "src/", A)
    t0 = time.monotonic()
    err = busy(locks.acquire, brain, "src/", B, wait=0.3, poll=0.02)
    assert time.monotonic() - t0 >= 0.3  # it did wait, never less than asked
    assert f"src/ held by {A}" in str(err)


def test_waiter_gets_the_lock_when_the_holder_releases(brain, monkeypatch):
    held = locks.acquire(brain, "src/", A)
    got: list = []
    tries: list = []
    real_try = locks._try_acquire
    monkeypatch.setattr(locks, "_try_acquire", lambda *a: tries.append(real_try(*a)) or tries[-1])
    waiter = threading.Thread(target=lambda: got.append(
        locks.acquire(brain, "src/a.py", B, wait=300, poll=0.01)))
    waiter.start()
    until(lambda: len(tries) >= 3, timeout=120, what="the waiter to try and fail 3 times")
    assert not got
    locks.release(brain, "src/", A)
    waiter.join(90)
    assert not waiter.is_alive()
    assert got and got[0].owner == B and got[0].token > held.token


# ---- what the lock folder may contain -----------------------------------------------------------

def test_temp_and_other_files_are_ignored(brain):
    lk = locks.acquire(brain, "src/", A)
    (brain.locks_dir / f".{lk.path.name}.k2j3h4.tmp").write_text("scope: [truncated")
    (brain.locks_dir / "README.md").write_text("not a lock")
    (brain.locks_dir / ".hidden.yml").write_text("{{{")
    assert locks.list_locks(brain) == [lk]
    assert locks.acquire(brain, "lib/", B).owner == B


def test_unreadable_lock_fails_closed(brain):
    bad = brain.locks_dir / "broken.yml"
    brain.locks_dir.mkdir()
    bad.write_text("scope: src/\nowner: [1, 2\n")
    with pytest.raises(BrainError) as info:
        locks.acquire(brain, "lib/", A)
    assert str(bad) in str(info.value)
    assert bad.exists() and not (set(brain.locks_dir.iterdir()) - {bad})


def test_lock_file_with_wrong_types_names_the_key(brain):
    lk = locks.acquire(brain, "src/", A)
    lk.path.write_text(lk.path.read_text().replace(f"token: {lk.token}", "token: many"))
    with pytest.raises(BrainError) as info:
        locks.list_locks(brain)
    assert str(info.value).startswith(f"{lk.path}:4: token: expected an integer")


def test_fast_dump_is_byte_identical_to_dumps():
    rng = random.Random(7)
    alphabet = "aZ09_./:-+ '\"#é\t\n{}[],&*!|>%@`"
    values = ["src/", "2031-05-06T07:08:09Z", "12:30:00", "1_000", "yes", "null", "0x1F", "1e5",
              "a:", "a:b", "_", "-", ".", "~", "", "x" * 5000, "é", "007", "1.5", "Off"]
    for chars in (alphabet, "aZ09_./:-"):  # anything, and what lock files really hold
        values += ["".join(rng.choice(chars) for _ in range(rng.randint(1, 10))) for _ in range(2000)]
    fast = 0
    for v in values:
        lk = locks.Lock(v, v, "shared", 7, T0, at(1), locks.Holder(v, 12, 34))
        data = {"scope": v, "mode": "shared", "owner": v, "token": 7,
                "acquired": clock.iso(T0), "expires": clock.iso(at(1)),
                "holder": {"host": v, "pid": 12, "started": 34}}
        assert locks._dump(lk) == dumps(data), repr(v)
        fast += dump_plain(data) is not None
    assert fast > 1000  # the fast path was exercised, not only the fallback


# ---- the CLI ------------------------------------------------------------------------------------

def one_line_error(r) -> str:
    assert "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("nika-brain: "), r.stderr
    return r.stderr


def test_cli_acquire_busy_release_refused(brain, cli):
    r = cli("lock", "acquire", "src/", "--owner", A, "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["scope"] == "src/" and info["owner"] == A and info["token"] >= 1
    assert info["holder"] == {"host": socket.gethostname(), "pid": os.getpid()}  # the caller

    r = cli("lock", "acquire", "src/*.py", "--owner", B)
    assert r.returncode == 3
    err = one_line_error(r)
    assert f"src/ held by {A}" in err and f"token {info['token']}" in err

    r = cli("lock", "release", "src/", "--owner", B)
    assert r.returncode == 6
    assert f"held by {A}" in one_line_error(r)

    r = cli("lock", "release", "src/", env={"NIKA_CLAIM": A})
    assert (r.returncode, r.stdout) == (0, "released src/\n")
    assert locks.list_locks(brain) == []


def test_cli_status_list_renew(brain, cli):
    r = cli("lock", "status", "src/a.py")
    assert (r.returncode, r.stdout) == (0, "src/a.py: free\n")
    assert cli("lock", "acquire", "src/", "--owner", A, "--ttl", "60", "--no-pid",
               env={"NIKA_NOW": clock.iso(T0)}).returncode == 0
    r = cli("lock", "status", "src/a.py", env={"NIKA_NOW": clock.iso(T0)})
    assert r.returncode == 3 and r.stdout.startswith(f"src/ held by {A} (") and "[expired]" not in r.stdout
    r = cli("lock", "status", "src/a.py", env={"NIKA_NOW": clock.iso(at(61))})
    assert r.returncode == 3 and "[expired]" in r.stdout
    r = cli("lock", "renew", "src/", "--owner", A, "--ttl", "600", env={"NIKA_NOW": clock.iso(at(30))})
    assert (r.returncode, r.stdout) == (0, f"renewed src/ until {clock.iso(at(630))}\n")
    r = cli("lock", "renew", "src/", "--owner", B)
    assert r.returncode == 6
    one_line_error(r)
    r = cli("lock", "list", "--json")
    (only,) = json.loads(r.stdout)
    assert (only["owner"], only["expires"], only["holder"]["pid"]) == (A, clock.iso(at(630)), None)
    r = cli("lock", "list")
    assert r.returncode == 0 and r.stdout.count("\n") == 1 and A in r.stdout


def test_cli_ttl_with_pinned_clock(brain, cli):
    assert cli("lock", "acquire", "src/", "--owner", A, "--ttl", "60", "--no-pid",
               env={"NIKA_NOW": clock.iso(T0)}).returncode == 0
    r = cli("lock", "acquire", "src/", "--owner", B, env={"NIKA_NOW": clock.iso(at(59))})
    assert r.returncode == 3
    one_line_error(r)
    r = cli("lock", "acquire", "src/", "--owner", B, env={"NIKA_NOW": clock.iso(at(60))})
    assert r.returncode == 0, r.stderr
    assert [lk.owner for lk in locks.list_locks(brain)] == [B]


def test_cli_live_holder_survives_ttl(brain, cli):
    # Without --no-pid the holder is the calling process: here, this test, alive.
    assert cli("lock", "acquire", "src/", "--owner", A, "--ttl", "1",
               env={"NIKA_NOW": clock.iso(T0)}).returncode == 0
    r = cli("lock", "acquire", "src/", "--owner", B, env={"NIKA_NOW": clock.iso(at(86400))})
    assert r.returncode == 3 and A in one_line_error(r)


def test_cli_bad_input_is_one_line(brain, cli):
    r = cli("lock", "acquire", "../x", "--owner", A)
    assert r.returncode == 1 and "inside the brain" in one_line_error(r)
    r = cli("lock", "release", "src/", "--owner", A)
    assert r.returncode == 1 and "no lock held" in one_line_error(r)


# ---- mutual exclusion between processes ---------------------------------------------------------

WORKER = r'''
import os, random, sys, time
from nika_brain.state import locks
from nika_brain.brain import Brain

root, wid, cycles, sentinel, log = sys.argv[1:6]
brain = Brain.at(root)
rng = random.Random(int(wid))
owner = f"sess-mutex-step-{wid}"
scopes = ["src/", "src/a.py", "src/*.py", "."]
rows, overlaps = [], 0
for _ in range(int(cycles)):
    scope = rng.choice(scopes)
    t_ask = time.monotonic_ns()
    lk = locks.acquire(brain, scope, owner, wait=300, poll=0.005, ttl=3600)
    t_in = time.monotonic_ns()
    try:  # an independent witness: only one process may be inside at a time
        fd = os.open(sentinel, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        overlaps += 1
    else:
        os.write(fd, wid.encode())
        os.close(fd)
        with open(sentinel, "rb") as fh:
            overlaps += fh.read() != wid.encode()
        os.unlink(sentinel)
    t_out = time.monotonic_ns()
    rows.append(f"{t_in} {t_out} {lk.token} {lk.scope} {t_ask}\n")
    locks.release(brain, scope, owner)
with open(log, "w") as fh:
    fh.write("".join(rows) + f"done {len(rows)} {overlaps}\n")
'''


def test_mutual_exclusion_between_processes(brain, tmp_path):
    """8 processes, every scope overlapping every other: each acquisition contends (counted: asked
    while another process was inside), never two inside at once, tokens in acquisition order."""
    n_procs, cycles = 8, 150
    sentinel = tmp_path / "inside"
    logs = [tmp_path / f"worker-{i}.log" for i in range(n_procs)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(brain.root), str(i), str(cycles),
                               str(sentinel), str(log)], stderr=subprocess.PIPE, text=True)
             for i, log in enumerate(logs)]
    errors = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * n_procs, errors

    records = []
    for log in logs:
        *rows, done = log.read_text().splitlines()
        assert done == f"done {cycles} 0"  # every cycle ran; the sentinel never saw two inside
        for row in rows:
            t_in, t_out, token, scope, t_ask = row.split()
            records.append((int(t_in), int(t_out), int(token), scope, int(t_ask)))
    assert len(records) == n_procs * cycles
    assert not sentinel.exists()

    records.sort()  # acquisition order (CLOCK_MONOTONIC is one clock for every process)
    for prev, nxt in zip(records, records[1:]):
        assert prev[1] < nxt[0], f"critical sections overlap: {prev} {nxt}"
    contended = sum(nxt[4] < prev[1] for prev, nxt in zip(records, records[1:]))  # asked while held
    # How many depends on the machine (295 of 1,200 on a quiet one, over 900 at load 8): enough that
    # exclusion was tested under contention, never a share the scheduler decides.
    assert contended >= 50, f"only {contended} of {len(records)} acquisitions contended"
    tokens = [r[2] for r in records]
    assert len(set(tokens)) == len(tokens)
    assert all(x < y for x, y in zip(tokens, tokens[1:])), "tokens not increasing in acquisition order"
    for scope in {r[3] for r in records}:
        mine = [r[2] for r in records if r[3] == scope]
        assert all(x < y for x, y in zip(mine, mine[1:]))
    assert {r[3] for r in records} == {"src/", "src/a.py", "src/*.py", "."}
    assert locks.list_locks(brain) == []
