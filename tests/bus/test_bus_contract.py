"""One contract for every bus backend: the embedded SQLite store and a real redis-server.

Each contract test runs once per backend in `bus.BACKENDS`. Concurrency is tested with real
processes (`python -c CHILD ...`) that open the same bus through `open_bus`, the way kernels do.
Nothing here asserts on elapsed time: TTLs and idle times use the embedded backend's injected clock,
and for Redis short real TTLs are polled until they run out.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from nika_brain import bus
from nika_brain.brain import Brain
from nika_brain.engine import signals
from nika_brain.errors import BrainError
from tests.kit.brain import make_brain
from tests.kit.redis import nothing_listening

CHILD = r'''
import json, os, sys, time
from nika_brain import bus
from nika_brain.brain import Brain

role, root, *args = sys.argv[1:]
b = bus.open_bus(Brain.at(root))

def say(obj):
    print(json.dumps(obj), flush=True)

def wait_go():
    say("ready")
    if sys.stdin.readline().strip() != "go":
        sys.exit("no go")

if role == "publish-after-go":
    (channel,) = args
    wait_go()
    time.sleep(0.3)  # so that the parent is already blocked in read()
    say(b.publish(channel, {"from": os.getpid()}))
elif role == "consume":
    channel, group, consumer = args
    wait_go()
    got = []
    while True:
        batch = b.group_read(channel, group, consumer, count=3, block=0.2)
        for mid, msg in batch:
            got.append([mid, msg["n"]])
            if not b.ack(channel, group, mid):
                sys.exit(f"ack of {mid} failed")
        # every message was published before "done" was set: an empty read after it means drained
        if not batch and b.get("done") is not None:
            break
    say(got)
elif role == "take-and-hang":
    channel, group, consumer = args
    batch = b.group_read(channel, group, consumer, count=1, block=60)
    say(batch[0][0] if batch else None)
    time.sleep(3600)  # killed with SIGKILL before it acks
elif role == "race":
    keys = args
    wait_go()
    say([b.set_if_absent(k, {"pid": os.getpid()}, ttl=300) for k in keys])
else:
    sys.exit(f"unknown role {role}")
'''

NIKA_BRAIN = [sys.executable, "-m", "nika_brain"]  # the real command line


class FakeClock:
    """The embedded backend's injected clock: starts at the real time, moves only when told."""

    def __init__(self) -> None:
        self.t = datetime.now(timezone.utc)

    def now(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@dataclass
class Harness:
    name: str
    brain: Brain
    bus: bus.Bus
    clock: FakeClock | None  # None: the backend keeps its own time (Redis)
    url: str | None = None

    def let_time_pass(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            time.sleep(seconds)

    def inject_raw(self, channel: str, body: str) -> None:
        """Store a message body as a foreign writer would, bypassing the bus's own encoding."""
        if self.name == "embedded":
            with sqlite3.connect(self.brain.state_dir / bus.DB_NAME) as db:
                db.execute("INSERT INTO messages(channel, body) VALUES (?, ?)", (channel, body))
        else:
            import redis
            redis.Redis.from_url(self.url).xadd(channel, {"m": body})


@pytest.fixture(params=sorted(bus.BACKENDS))
def h(request, brain, monkeypatch):
    monkeypatch.setenv("NIKA_BUS", request.param)
    if request.param == "redis":
        import redis
        url = request.getfixturevalue("redis_server")
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()
        monkeypatch.setenv("NIKA_REDIS_URL", url)
        harness = Harness("redis", brain, bus.RedisBus(url), None, url)
    else:
        monkeypatch.delenv("NIKA_REDIS_URL", raising=False)
        clk = FakeClock()
        harness = Harness("embedded", brain,
                          bus.EmbeddedBus(brain.state_dir / bus.DB_NAME, now=clk.now), clk)
    yield harness
    harness.bus.close()


class Child:
    """A real process running CHILD; its stdout lines are JSON, read with a generous timeout."""

    def __init__(self, h: Harness, role: str, *args: str):
        self.role = role
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, role, str(h.brain.root), *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def expect(self, timeout: float = 120):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            line = None
        if line is None:
            self.kill()
            pytest.fail(f"child {self.role} said nothing; stderr: {self.proc.stderr.read()}")
        return json.loads(line)

    def send(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def finish(self) -> None:
        rc = self.proc.wait(timeout=120)
        assert rc == 0, f"child {self.role} exited {rc}: {self.proc.stderr.read()}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def children():
    spawned: list[Child] = []
    yield spawned
    for child in spawned:
        child.kill()


def start(children: list, h: Harness, role: str, *args: str) -> Child:
    child = Child(h, role, *args)
    children.append(child)
    return child


def wait_until(h: Harness, probe, step: float = 0.2, tries: int = 600):
    for _ in range(tries):
        got = probe()
        if got:
            return got
        h.let_time_pass(step)
    pytest.fail("the condition was never met")


def one_line_error(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text
    return text


# --- channels ----------------------------------------------------------------------------------------

def test_backend_satisfies_the_protocol(h):
    assert isinstance(h.bus, bus.Bus)
    assert h.bus.backend == h.name
    h.bus.ping()


def test_publish_then_read_in_order_and_after_an_id(h):
    ids = []
    for i in range(5):
        ids.append(h.bus.publish("jobs", {"n": i}))
        h.bus.publish("other", {"noise": i})
    assert len(set(ids)) == 5
    got = h.bus.read("jobs")
    assert got == [(mid, {"n": i}) for i, mid in enumerate(ids)]
    assert h.bus.read("jobs", count=2) == got[:2]
    assert h.bus.read("jobs", after=ids[2]) == got[3:]
    assert h.bus.read("jobs", after=ids[-1]) == []
    assert h.bus.read("never-used") == []
    assert [m["noise"] for _, m in h.bus.read("other")] == [0, 1, 2, 3, 4]


def test_messages_round_trip_as_json_and_bad_values_are_refused(h):
    message = {"text": "énergie ✓", "nested": {"list": [1, 2.5, None, True]}, "empty": {}}
    mid = h.bus.publish(bus.DIRECTIVES, message)
    assert h.bus.read(bus.DIRECTIVES) == [(mid, message)]
    for bad in ([1, 2], {"t": datetime.now()}, {"x": float("nan")}):
        with pytest.raises(BrainError) as exc:
            h.bus.publish(bus.DIRECTIVES, bad)
        assert one_line_error(exc).startswith("bus: message ")
    for name in ("", "bad\nname"):
        with pytest.raises(BrainError):
            h.bus.publish(name, {})
    with pytest.raises(BrainError) as exc:
        h.bus.read(bus.DIRECTIVES, after="not-an-id")
    assert "not a message id" in one_line_error(exc)
    assert len(h.bus.read(bus.DIRECTIVES)) == 1


def test_bad_json_in_a_stored_message_is_one_brain_error(h):
    h.bus.publish("mixed", {"ok": 1})
    h.inject_raw("mixed", "{not json")
    with pytest.raises(BrainError) as exc:
        h.bus.read("mixed")
    text = one_line_error(exc)
    assert text.startswith("bus: message ") and "on mixed is not valid JSON" in text


def test_blocking_read_returns_a_message_published_by_another_process(h, children):
    first = h.bus.publish("wake", {"before": True})
    child = start(children, h, "publish-after-go", "wake")
    assert child.expect() == "ready"
    assert h.bus.read("wake", after=first) == []  # nothing yet: the read below must wait for it
    child.send("go")
    got = h.bus.read("wake", after=first, block=60)
    published = child.expect()
    assert got == [(published, {"from": child.proc.pid})]
    child.finish()
    assert h.bus.read("wake", after=published, block=0.2) == []


# --- work queues ---------------------------------------------------------------------------------------

def test_groups_start_at_the_beginning_and_are_independent(h):
    ids = [h.bus.publish("queue", {"n": i}) for i in range(3)]
    a = h.bus.group_read("queue", "workers", "w1", count=10)
    assert [mid for mid, _ in a] == ids
    assert [mid for mid, _ in h.bus.group_read("queue", "auditors", "x", count=10)] == ids
    assert h.bus.group_read("queue", "workers", "w2", count=10) == []
    new = h.bus.publish("queue", {"n": 3})
    assert h.bus.group_read("queue", "workers", "w2", count=10) == [(new, {"n": 3})]
    assert h.bus.group_read("queue", "workers", "w1", block=0.2) == []


def test_each_message_goes_to_exactly_one_of_three_consumer_processes(h, children):
    n = 90
    consumers = [start(children, h, "consume", bus.WORK_STEALING, "kernels", f"k{i}")
                 for i in range(3)]
    for c in consumers:
        assert c.expect() == "ready"
    for c in consumers:
        c.send("go")
    ids = {h.bus.publish(bus.WORK_STEALING, {"type": "task_available", "n": i}): i for i in range(n)}
    h.bus.set("done", {"published": n})
    got = []
    for c in consumers:
        got.extend(c.expect())
        c.finish()
    numbers = sorted(num for _, num in got)
    assert numbers == list(range(n))  # no loss, no duplicate
    assert {mid: num for mid, num in got} == ids
    assert h.bus.reclaim(bus.WORK_STEALING, "kernels", "auditor", min_idle=0) == []  # all acked


def test_a_consumer_killed_before_ack_loses_nothing(h, children):
    mid = h.bus.publish("tasks", {"task": "t-1"})
    child = start(children, h, "take-and-hang", "tasks", "workers", "doomed")
    assert child.expect() == mid
    os.kill(child.proc.pid, signal.SIGKILL)
    assert child.proc.wait(timeout=60) == -signal.SIGKILL
    # Delivered to the dead consumer: not handed out again as new, not yet idle for an hour.
    assert h.bus.group_read("tasks", "workers", "rescuer") == []
    assert h.bus.reclaim("tasks", "workers", "rescuer", min_idle=3600) == []
    got = wait_until(h, lambda: h.bus.reclaim("tasks", "workers", "rescuer", min_idle=0.5))
    assert got == [(mid, {"task": "t-1"})]
    assert h.bus.ack("tasks", "workers", mid) is True
    assert h.bus.ack("tasks", "workers", mid) is False
    assert h.bus.reclaim("tasks", "workers", "rescuer", min_idle=0) == []


# --- keyed state -----------------------------------------------------------------------------------------

def test_set_if_absent_has_exactly_one_winner_among_8_processes(h, children):
    keys = [f"claim:task-{i}" for i in range(10)]
    racers = [start(children, h, "race", *keys) for _ in range(8)]
    for r in racers:
        assert r.expect() == "ready"
    for r in racers:
        r.send("go")
    results = {r.proc.pid: r.expect() for r in racers}
    for r in racers:
        r.finish()
    for i, key in enumerate(keys):
        winners = [pid for pid, won in results.items() if won[i]]
        assert len(winners) == 1, f"{key}: winners {winners}"
        assert h.bus.get(key) == {"pid": winners[0]}


def test_set_get_delete_and_keys_by_prefix(h):
    assert h.bus.get("kernel:alpha:health") is None
    h.bus.set("kernel:alpha:health", {"ok": True})
    h.bus.set("kernel:alpha:health", {"ok": False, "error_rate": 0.5})
    h.bus.set("kernel:beta:health", {"ok": True}, ttl=3600)
    h.bus.set("weird*[x]?", {})
    h.bus.set("weirdo", {})
    assert h.bus.get("kernel:alpha:health") == {"ok": False, "error_rate": 0.5}
    assert h.bus.keys("kernel:") == ["kernel:alpha:health", "kernel:beta:health"]
    assert h.bus.keys("kernel:beta") == ["kernel:beta:health"]
    assert h.bus.keys("weird*") == ["weird*[x]?"]  # glob characters in a prefix are literal
    assert h.bus.keys("nobody") == []
    assert h.bus.set_if_absent("kernel:beta:health", {"stolen": True}, ttl=3600) is False
    assert h.bus.get("kernel:beta:health") == {"ok": True}
    assert h.bus.delete("kernel:alpha:health") is True
    assert h.bus.delete("kernel:alpha:health") is False
    assert h.bus.get("kernel:alpha:health") is None
    assert h.bus.keys("") == ["kernel:beta:health", "weird*[x]?", "weirdo"]
    for ttl in (0, -1, float("inf")):
        with pytest.raises(BrainError):
            h.bus.set("k", {}, ttl=ttl)


def test_keys_expire_after_their_ttl(h):
    h.bus.set("heartbeat:alpha", {"beat": 1}, ttl=0.2)
    assert h.bus.set_if_absent("claim:x", {"by": "alpha"}, ttl=0.2) is True
    h.bus.set("heartbeat:beta", {"beat": 1}, ttl=3600)
    h.bus.set("heartbeat:gamma", {"beat": 1})
    wait_until(h, lambda: h.bus.get("heartbeat:alpha") is None and h.bus.get("claim:x") is None)
    assert h.bus.keys("heartbeat:") == ["heartbeat:beta", "heartbeat:gamma"]
    assert h.bus.keys("claim:") == []
    assert h.bus.set_if_absent("claim:x", {"by": "beta"}, ttl=3600) is True  # expired = absent
    assert h.bus.get("claim:x") == {"by": "beta"}
    assert h.bus.delete("heartbeat:alpha") is False


@pytest.mark.parametrize("h", ["embedded"], indirect=True)
def test_ttls_and_idle_times_follow_the_injected_clock(h):
    h.bus.set("hb", {"n": 1}, ttl=10)
    h.clock.advance(9.9)
    assert h.bus.get("hb") == {"n": 1}
    assert h.bus.set_if_absent("hb", {"n": 2}, ttl=10) is False
    h.clock.advance(0.2)
    assert h.bus.get("hb") is None
    assert h.bus.keys("") == []
    assert h.bus.set_if_absent("hb", {"n": 2}, ttl=10) is True
    mid = h.bus.publish("q", {"task": 1})
    assert [m for m, _ in h.bus.group_read("q", "g", "first")] == [mid]
    h.clock.advance(59)
    assert h.bus.reclaim("q", "g", "second", min_idle=60) == []
    h.clock.advance(2)
    assert h.bus.reclaim("q", "g", "second", min_idle=60) == [(mid, {"task": 1})]
    assert h.bus.reclaim("q", "g", "third", min_idle=60) == []  # reclaiming resets the idle time


# --- failures ---------------------------------------------------------------------------------------------

def test_dead_redis_is_one_brain_error_line(brain, monkeypatch):
    with nothing_listening() as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        b = bus.RedisBus(url)
        for call in (b.ping, lambda: b.publish("c", {}), lambda: b.get("k")):
            with pytest.raises(BrainError) as exc:
                call()
            assert one_line_error(exc).startswith(f"bus: redis at 127.0.0.1:{port} is unreachable: ")
        monkeypatch.setenv("NIKA_BUS", "redis")
        monkeypatch.setenv("NIKA_REDIS_URL", url)
        monkeypatch.setenv("NIKA_BRAIN_DIR", str(brain.root))
        assert bus.open_bus(brain).where == f"127.0.0.1:{port}"
        r = subprocess.run([*NIKA_BRAIN, "bus", "ping"], capture_output=True,
                           text=True, env=dict(os.environ), timeout=120)
    assert r.returncode == 1
    assert r.stderr.startswith(f"nika-brain: bus: redis at 127.0.0.1:{port} is unreachable")
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_corrupt_sqlite_file_is_one_brain_error_line(brain, monkeypatch):
    path = brain.state_dir / bus.DB_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not a database, just bytes\n" * 200)
    with pytest.raises(BrainError) as exc:
        bus.EmbeddedBus(path)
    assert one_line_error(exc) == (f"bus: sqlite store {path} is unreadable (corrupt?): "
                                   "file is not a database")
    monkeypatch.setenv("NIKA_BUS", "embedded")
    monkeypatch.setenv("NIKA_BRAIN_DIR", str(brain.root))
    r = subprocess.run([*NIKA_BRAIN, "bus", "publish", "c", "{}"],
                       capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert r.returncode == 1
    assert r.stderr == f"nika-brain: bus: sqlite store {path} is unreadable (corrupt?): " \
                       "file is not a database\n"


def test_locked_sqlite_file_is_one_brain_error_line(brain):
    path = brain.state_dir / bus.DB_NAME
    b = bus.EmbeddedBus(path, busy_timeout=0.1)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holding the write lock
    other.execute("INSERT INTO messages(channel, body) VALUES ('c', '{}')")
    try:
        with pytest.raises(BrainError) as exc:
            b.publish("c", {"n": 1})
        assert one_line_error(exc).startswith(f"bus: sqlite store {path} is locked by another process")
    finally:
        other.execute("ROLLBACK")
        other.close()
    mid = b.publish("c", {"n": 1})
    assert b.read("c") == [(mid, {"n": 1})]
    b.close()
    with pytest.raises(BrainError):
        b.read("c")


# --- configuration, signals, CLI ----------------------------------------------------------------------

def test_open_bus_follows_config_and_environment(tmp_path, git_env, monkeypatch):
    monkeypatch.delenv("NIKA_BUS", raising=False)
    monkeypatch.delenv("NIKA_REDIS_URL", raising=False)
    brain = make_brain(tmp_path / "b", "version: 1\nbus: redis\nredis_url: redis://127.0.0.1:1/0\n")
    first = bus.open_bus(brain)
    assert isinstance(first, bus.RedisBus) and first.where == "127.0.0.1:1"
    assert bus.open_bus(brain) is first
    monkeypatch.setenv("NIKA_REDIS_URL", "redis://127.0.0.1:2/0")
    assert bus.open_bus(brain).where == "127.0.0.1:2"
    monkeypatch.setenv("NIKA_BUS", "embedded")
    embedded = bus.open_bus(brain)
    assert isinstance(embedded, bus.EmbeddedBus)
    assert Path(embedded.where) == brain.state_dir / "bus.sqlite3"
    embedded.close()
    assert bus.open_bus(brain) is not embedded  # a closed bus is reopened
    monkeypatch.setenv("NIKA_BUS", "kafka")
    with pytest.raises(BrainError) as exc:
        bus.open_bus(brain)
    assert "unknown backend 'kafka' (from NIKA_BUS)" in one_line_error(exc)


def test_signals_emit_publishes_to_the_configured_bus(h):
    record = signals.emit(h.brain, "STEP_DONE", workflow="wf", step="build", claim="c-1",
                          reason="tests green")
    got = h.bus.read(signals.CHANNEL)
    assert [m for _, m in got] == [record]
    assert signals.read(h.brain)[-1] == record  # and the journal still holds it


def cli(*args: str, env_brain: Brain) -> subprocess.CompletedProcess:
    env = dict(os.environ, NIKA_BRAIN_DIR=str(env_brain.root))
    return subprocess.run([*NIKA_BRAIN, *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_cli_publish_tail_and_ping(h):
    r = cli("bus", "publish", bus.HEALTH, '{"kernel": "alpha", "ttfl": 1.5}', env_brain=h.brain)
    assert r.returncode == 0, r.stderr
    first = r.stdout.strip()
    second = h.bus.publish(bus.HEALTH, {"kernel": "beta"})
    r = cli("bus", "tail", bus.HEALTH, env_brain=h.brain)
    assert r.stdout.splitlines() == [f'{first} {{"kernel": "alpha", "ttfl": 1.5}}',
                                     f'{second} {{"kernel": "beta"}}']
    r = cli("bus", "tail", bus.HEALTH, "--after", first, env_brain=h.brain)
    assert r.stdout.splitlines() == [f'{second} {{"kernel": "beta"}}']
    r = cli("bus", "ping", env_brain=h.brain)
    assert r.returncode == 0 and r.stdout.startswith(f"ok: {h.name} bus at ")
    r = cli("bus", "publish", bus.HEALTH, "[1, 2]", env_brain=h.brain)
    assert r.returncode == 1 and r.stderr == "nika-brain: bus: the message must be a JSON object ({...})\n"
    r = cli("bus", "publish", bus.HEALTH, "{oops", env_brain=h.brain)
    assert r.returncode == 1 and r.stderr.startswith("nika-brain: bus: the message is not valid JSON")
    assert len(h.bus.read(bus.HEALTH)) == 2


def test_cli_tail_follow_prints_new_messages(h):
    env = dict(os.environ, NIKA_BRAIN_DIR=str(h.brain.root))
    # Ctrl-C as in a terminal: a suite started in the background (`bash .ci/run &` from a script) hands
    # its children SIGINT ignored, and a Python started so never raises KeyboardInterrupt.
    proc = subprocess.Popen([*NIKA_BRAIN, "bus", "tail", bus.GOALS, "--follow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        mid = h.bus.publish(bus.GOALS, {"goal": "veille AO"})
        assert lines.get(timeout=120) == f'{mid} {{"goal": "veille AO"}}\n'
        later = h.bus.publish(bus.GOALS, {"goal": "iot edge"})
        assert lines.get(timeout=120) == f'{later} {{"goal": "iot edge"}}\n'
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert proc.returncode == 130


def test_every_redis_key_nika_brain_writes_expires(brain, redis_server):
    """Issue 20, item 5: nothing nika-brain writes to Redis lives forever — keyed state written with
    or without a ttl, channels' streams (also those a consumer group creates), the work-stealing
    queue's keys, the path leases and their fencing counter."""
    import redis

    from nika_brain.federation.kernels.leases import Leases
    from nika_brain.federation.stealing import protocol
    admin = redis.Redis.from_url(redis_server)
    admin.flushdb()
    b = bus.RedisBus(redis_server)
    b.set("kernel:alpha:state", {"v": 1})
    b.set("kernel:alpha:beat", {"v": 1}, ttl=60)
    assert b.set_if_absent("kernel:alpha:once", {"v": 1})
    b.publish(bus.HEALTH, {"kernel": "alpha"})
    b.group_read("nika:federation:queue:alpha", "kernel", "c1")
    from nika_brain.federation.stealing.texts import Texts
    protocol.enqueue(b, "alpha", "reboot the VPN", prompt="reboot the VPN at 2 am", texts=Texts(brain))
    leases = Leases(redis_server, "nika:lease:")
    assert leases.try_acquire("src/", "alpha", "exclusive", 60)[0] is not None
    keys = sorted(k.decode() for k in admin.scan_iter("*"))
    assert len(keys) >= 8, keys
    forever = [k for k in keys if admin.pttl(k) < 0]
    assert not forever, f"keys without a TTL: {forever}"
    b.close()
    leases.close()
