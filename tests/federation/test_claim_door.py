"""A satellite's door (federation/doors/claim.py) through its real process and socket: what it answers,
what it refuses, and that it lives exactly as long as the satellite it was made for."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys

from nika_brain.bus import door as client
from nika_brain.errors import BrainError
from nika_brain.state import locks
from tests.kit.brain import make_brain


def _door(brain, claim: str, satellite: int):
    sock = brain.root / ".nika" / "guarded" / "doors" / claim / "door.sock"
    proc = subprocess.Popen([sys.executable, "-m", "nika_brain.federation.doors.claim", str(brain.root), claim,
                             str(sock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.stdin.write(f"{satellite}\n")
    proc.stdin.flush()
    return proc, sock


@contextlib.contextmanager
def door_of_another_session(brain, claim: str):
    """The claim's real door, serving a session that is another process (not the caller's tree);
    yields its socket, and ends both at the exit."""
    session = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    proc, sock = _door(brain, claim, session.pid)
    try:
        yield sock
    finally:
        proc.stdin.write("end\n")
        proc.stdin.close()
        proc.wait(timeout=60)
        session.stdin.close()
        session.wait(timeout=60)


def _raw(sock, data: bytes) -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with s:
        client._connect(s, str(sock))   # through the folder when the path is past AF_UNIX's 108 bytes
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        return json.loads(s.makefile("rb").read())


def test_the_door_acts_as_its_claim_for_its_satellite_and_refuses_the_rest(tmp_path, git_env):
    import os
    brain = make_brain(tmp_path / "b", "version: 1\nlock_poll: 0.01\n")
    locks.acquire(brain, "src/other/", "c-other", ttl=600, pid=None)
    proc, sock = _door(brain, "c-mine", os.getpid())   # this test process plays the satellite
    try:
        assert client.call("ping", str(sock)) == "c-mine"
        got = client.call("lock_acquire", str(sock), scope="src/mine/", ttl=60)
        assert got["owner"] == "c-mine" and got["holder"]["pid"] == os.getppid()
        assert client.call("lock_renew", str(sock), scope="src/mine/", ttl=120, owner="c-mine")["owner"] == "c-mine"
        for op, args in (("lock_release", {"scope": "src/other/", "owner": "c-other"}),
                         ("lock_renew", {"scope": "src/other/", "owner": "c-other", "ttl": 1}),
                         ("lock_acquire", {"scope": "src/other/", "owner": "c-other", "ttl": 1}),
                         ("claim_close", {"claim": "c-other", "status": "failed", "summary": ""}),
                         ("query", {"text": "x"}), ("spawn", {})):
            try:
                client.call(op, str(sock), **args)
            except BrainError as exc:
                assert exc.exit_code == 6 and "refused by the satellite's door" in str(exc), (op, str(exc))
            else:
                raise AssertionError(f"{op} was not refused")
        # held by someone else: the line and exit code of the command outside the door
        try:
            client.call("lock_acquire", str(sock), scope="src/other/x.py")
        except BrainError as exc:
            assert exc.exit_code == 3 and "c-other" in str(exc) and "refused" not in str(exc), str(exc)
        else:
            raise AssertionError("a held lock was acquired")
        for bad in (b"not json\n", b"[1, 2]\n", json.dumps({"op": "lock_acquire", "scope": 7}).encode()):
            ans = _raw(sock, bad)
            assert ans["ok"] is False and ans["refused"], ans
        assert client.call("lock_release", str(sock), scope="src/mine/") == {"scope": "src/mine/"}
        (other,) = locks.overlapping(brain, "src/other/")
        assert other.owner == "c-other"
        journal = (brain.root / ".nika" / "doors" / "refusals.jsonl").read_text().splitlines()
        why = [json.loads(x)["why"] for x in journal]
        assert len(why) >= 6 and all(w for w in why)
    finally:
        proc.stdin.write("end\n")
        proc.stdin.close()
        proc.wait(timeout=60)   # its launcher said end: it ends (the satellite here lives on)
    assert not sock.exists()


def test_the_door_closes_when_its_satellite_exits_even_with_its_launcher_alive(tmp_path, git_env):
    brain = make_brain(tmp_path / "b", "version: 1\n")
    satellite = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    proc, sock = _door(brain, "c1", satellite.pid)
    try:
        try:   # this process is not of the satellite's tree: refused
            client.call("ping", str(sock))
        except BrainError as exc:
            assert "not of the satellite this door was made for" in str(exc), str(exc)
        else:
            raise AssertionError("a process outside the satellite was answered")
        proc.stdin.close()   # a launcher killed: the door stays for its satellite
        for _ in range(3):   # still answering (and still refusing this process)
            ans = _raw(sock, b'{"op": "ping"}')
            assert ans["ok"] is False and "not of the satellite" in ans["refused"], ans
        satellite.stdin.close()
        satellite.wait()
        assert proc.wait(timeout=60) == 0   # the satellite exited: the door closed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not sock.exists()


def test_one_door_process_serves_every_satellite_of_its_launcher_each_as_its_own_claim(tmp_path, git_env):
    """The launcher's form (`BRAIN` alone, `open CLAIM PID` / `close CLAIM` on stdin): one process for
    all of a launch's satellites, each socket answering its own satellite's tree only."""
    brain = make_brain(tmp_path / "b", "version: 1\n")
    sat, sat2 = (subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
                 for _ in range(2))
    proc = subprocess.Popen([sys.executable, "-m", "nika_brain.federation.doors.claim", str(brain.root)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    doors = brain.root / ".nika" / "guarded" / "doors"
    try:
        proc.stdin.write(f"open c-me {os.getpid()}\nopen c-sat {sat.pid}\n")   # two lines in one write
        proc.stdin.flush()
        assert [proc.stdout.readline().strip() for _ in range(2)] == ["open c-me", "open c-sat"]
        assert client.call("ping", str(doors / "c-me" / "door.sock")) == "c-me"
        ans = _raw(doors / "c-sat" / "door.sock", b'{"op": "ping"}')   # this process is not c-sat's
        assert ans["ok"] is False and "not of the satellite" in ans["refused"], ans
        proc.stdin.write("close c-me\n")
        proc.stdin.flush()
        proc.stdin.write(f"open c-again {sat2.pid}\n")   # ordered after the close
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "open c-again"
        assert not (doors / "c-me" / "door.sock").exists()
        proc.stdin.close()   # the launcher is gone: the door stays while a satellite of its runs
        ans = _raw(doors / "c-sat" / "door.sock", b'{"op": "ping"}')
        assert ans["ok"] is False and "not of the satellite" in ans["refused"], ans
        assert proc.poll() is None
        sat.stdin.close()
        sat.wait()
        assert proc.poll() is None   # c-again's satellite still runs
        sat2.stdin.close()
        sat2.wait()
        proc.stdin = None
        assert proc.wait(timeout=60) == 0   # its last satellite exited and its launcher is gone: it ends
    finally:
        for p in (proc, sat, sat2):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert not (doors / "c-sat" / "door.sock").exists()


def test_the_launchers_door_adds_ask_and_the_hooks_bookkeeping_each_checked(tmp_path, git_env):
    """The process engine/satellites.launch starts (federation/asking/door.py): ask and the hooks'
    claim bookkeeping, for its own claim, bad input refused in one line."""
    brain = make_brain(tmp_path / "b", "version: 1\nlock_poll: 0.01\n")
    sock = brain.root / ".nika" / "guarded" / "doors" / "c-mine" / "door.sock"
    proc = subprocess.Popen([sys.executable, "-m", "nika_brain.federation.asking.door", str(brain.root), "c-mine",
                             str(sock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.stdin.write(f"{os.getpid()}\n")
        proc.stdin.flush()
        for op, args, why in (("ask", {"prompt": 7}, "prompt is a string"),
                              ("ask", {"prompt": "x", "timeout": 0}, "timeout"),
                              ("ask", {"prompt": "x", "timeout": True}, "timeout"),
                              ("claim_session", {"session": "../../x"}, "session id"),
                              ("claim_touched", {"paths": "src/a.py"}, "list of relative paths"),
                              ("claim_touched", {"paths": ["a\nb"]}, "list of relative paths")):
            try:
                client.call(op, str(sock), **args)
            except BrainError as exc:
                assert exc.exit_code == 6 and why in str(exc) and "\n" not in str(exc), (op, str(exc))
            else:
                raise AssertionError(f"{op} {args} was not refused")
        # no such claim here: what the command says outside the door, not a refusal
        try:
            client.call("claim_session", str(sock), session="3f1c2a9e-0000-4000-8000-000000000000")
        except BrainError as exc:
            assert "c-mine" in str(exc) and "refused" not in str(exc), str(exc)
        else:
            raise AssertionError("a session was bound to a claim that does not exist")
    finally:
        proc.stdin.write("end\n")
        proc.stdin.close()
        proc.wait(timeout=60)
