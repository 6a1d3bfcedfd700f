"""Per-kernel Redis ACL users against a real redis-server: a kernel publishes on the federation
channels and reads and writes only its own keys; everything else is NOPERM."""
from __future__ import annotations

import json

import pytest
import redis

from nika_brain import bus
from nika_brain.federation.kernels import limits
from nika_brain.state import kernels
from tests.kit.redis import RedisServer


@pytest.fixture
def server(tmp_path):
    s = RedisServer(tmp_path / "redis")
    yield s.start()
    s.stop()


def _kernel(brain, kid):
    kernels.save_kernel(brain, kernels.new_kernel(kid, f"goal of {kid}", status="active"))
    (kernels.kernel_dir(brain, kid) / "credentials.env").write_text("OTHER=1\n")


def test_acl_matrix(brain, cli, server, tmp_path, monkeypatch):
    (brain.root / "nika-brain.yml").write_text(f"version: 1\nredis_url: {server}\nfederation: " +
                                               json.dumps({"redis_url": server}) + "\n")
    for kid in ("alpha", "beta"):
        _kernel(brain, kid)
    out = cli("federation", "acl")
    assert out.returncode == 0, out.stderr
    assert "set nika-kernel-alpha" in out.stdout and "set nika-kernel-beta" in out.stdout
    assert "default user: off" in out.stdout, out.stdout
    with pytest.raises(redis.exceptions.AuthenticationError):   # Redis' open door is shut
        redis.Redis.from_url(server).ping()
    from nika_brain.state import authority
    assert (authority.private_dir() / "redis").is_dir()   # the operator's own folder (passwd home)
    cred = limits.read_env_file(kernels.kernel_dir(brain, "alpha") / "credentials.env")
    assert cred["OTHER"] == "1" and cred["NIKA_REDIS_USER"] == "nika-kernel-alpha"
    admin = redis.Redis.from_url(bus.operator_url(server))   # the operator's own user
    admin.set("nika:kernel:beta:secret", "b")
    admin.xadd(bus.HEALTH, {"data": "{}"})
    alpha = redis.Redis.from_url(server, username=cred["NIKA_REDIS_USER"],
                                 password=cred["NIKA_REDIS_PASSWORD"])
    # allowed: publish on every federation channel (stream and pub/sub), its own keys
    for ch in bus.FEDERATION_CHANNELS:
        assert alpha.xadd(ch, {"data": json.dumps({"kernel": "alpha"})})
        alpha.publish(ch, "{}")
    alpha.set("nika:kernel:alpha:state", "1")
    assert alpha.get("nika:kernel:alpha:state") == b"1"
    alpha.set("nika:kv:kernel:alpha:x", "2")
    denied = [
        lambda: alpha.get("nika:kernel:beta:secret"),          # another kernel's key
        lambda: alpha.set("nika:kernel:beta:secret", "x"),
        lambda: alpha.xrange(bus.HEALTH),                      # reading the channels
        lambda: alpha.get("nika:lease:held"),                  # the brain's leases
        lambda: alpha.publish("nika:other", "x"),              # a channel not of the federation
        lambda: alpha.flushall(),
        lambda: alpha.execute_command("ACL", "SETUSER", "nika-kernel-alpha", "+@all"),
        lambda: alpha.keys("*"),
    ]
    for i, call in enumerate(denied):
        with pytest.raises(redis.exceptions.NoPermissionError):
            call()
            pytest.fail(f"denied call {i} went through")
    beta_cred = limits.read_env_file(kernels.kernel_dir(brain, "beta") / "credentials.env")
    beta = redis.Redis.from_url(server, username="nika-kernel-beta",
                                password=beta_cred["NIKA_REDIS_PASSWORD"])
    assert beta.get("nika:kernel:beta:secret") == b"b"
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(server, username="nika-kernel-beta",
                             password=cred["NIKA_REDIS_PASSWORD"]).ping()
    # the kernel's own hooks publish its heartbeat as its ACL user (NIKA_REDIS_URL from its credentials)
    event = json.dumps({"hook_event_name": "Stop", "session_id": "11111111-2222-3333-4444-555555555555",
                        "cwd": str(kernels.kernel_dir(brain, "alpha")), "transcript_path": ""})
    hook = cli("hook", "Stop", input=event, cwd=kernels.kernel_dir(brain, "alpha"),
               env={"NIKA_BUS": "redis", "NIKA_REDIS_URL": cred["NIKA_REDIS_URL"], "NIKA_KERNEL_ID": "alpha"})
    assert hook.returncode == 0 and "not published" not in hook.stderr, hook.stderr
    beats = [json.loads(f[b"m"]) for _, f in admin.xrange(bus.HEALTH) if b"m" in f]
    assert any(b.get("kernel") == "alpha" and b.get("source") == "hook:Stop" for b in beats)
    assert admin.exists(f"{bus.KV_PREFIX}kernel:alpha:heartbeat")
    # every key nika-brain wrote expires (the heartbeat key, the channel's stream)
    assert 0 < admin.ttl(f"{bus.KV_PREFIX}kernel:alpha:heartbeat")
    assert 0 < admin.ttl(bus.HEALTH)
    assert cli("bus", "publish", bus.GOALS, '{"event": "x"}', env={"NIKA_BUS": "redis",
               "NIKA_REDIS_URL": None}).returncode == 0   # the operator's CLI still reaches the bus
    assert cli("federation", "acl", "--revoke", "--kernel", "alpha").returncode == 0
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(server, username="nika-kernel-alpha",
                             password=cred["NIKA_REDIS_PASSWORD"]).ping()


def test_acl_with_redis_down_is_one_line(brain, cli):
    from tests.kit.redis import nothing_listening
    with nothing_listening() as url:
        (brain.root / "nika-brain.yml").write_text("version: 1\nfederation: " +
                                                   json.dumps({"redis_url": url}) + "\n")
        _kernel(brain, "alpha")
        out = cli("federation", "acl")
    assert out.returncode == 1 and out.stderr.startswith("nika-brain: redis acl:") and \
        out.stderr.count("\n") == 1
