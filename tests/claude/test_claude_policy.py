"""policy.py decisions in isolation: how a shell command is read, and the write/read rules given
facts (the hook tests drive the same rules through the real process)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from nika_brain.claude import policy
from nika_brain.state.locks import Holder, Lock
from nika_brain.state.zones import Zone

ROOT = "/brain"


def locate(path: str) -> policy.Target:
    rel = path[len(ROOT) + 1:] if path.startswith(ROOT + "/") else None
    return policy.Target(path, rel)


def facts(**kw) -> policy.Facts:
    return policy.Facts(locate=locate, home="/home/op", **kw)


@pytest.mark.parametrize("command,verbs,writes", [
    ("ls -la 2>/dev/null", ["ls"], ["/dev/null"]),
    ("echo hi >> gates/g.yml", ["echo"], ["gates/g.yml"]),
    ("make 2>&1 | tee build.log", ["make", "tee"], ["build.log"]),
    ("cp a b c/", ["cp"], ["c/"]),
    ("sudo -u op rm -rf locks/", ["rm"], ["locks/"]),
    ("FOO=1 env -i nice -n 5 touch x", ["touch"], ["x"]),
    ("dd if=/dev/zero of=claims/x bs=1", ["dd"], ["claims/x"]),
    ("sed -i.bak 's/a/b/' f1 f2", ["sed"], ["f1", "f2"]),
    ("sed 's/a/b/' f1 > out", ["sed"], ["out"]),
    ("git rm -q claims/x.yml", ["git"], ["claims/x.yml"]),
    ("git add claims/x.yml", ["git"], []),
    ("bash -c 'mv a gates/b'", ["mv", "bash"], ["a", "gates/b"]),
    ("cat <<EOF > gates/a.yml\nstatus: ok\nEOF", ["cat", "status:", "EOF"], ["gates/a.yml"]),
    ("git commit -m 'rm locks/ by hand'", ["git"], []),
    ('echo "unbalanced > x', ["echo"], ["x"]),
])
def test_command_segments(command, verbs, writes):
    segs = policy.segments(command)
    assert [s.verb for s in segs] == verbs
    assert [w for s in segs for w in s.writes] == writes


def test_cd_moves_the_base_of_later_words():
    reason = policy.decide("Bash", {"command": "cd /brain/src && cd ../gates && rm x.yml"}, "/tmp", facts())
    assert reason and "gates/x.yml" in reason


@pytest.mark.parametrize("path,secret", [
    ("/brain/.env", True), ("/brain/.env.production", True), ("/brain/.env.example", False),
    ("/home/op/.ssh/config", True), ("/brain/deploy/tls.key", True), ("/brain/src/keys.py", False),
    ("/brain/kernels/a/secrets/token", True), ("/home/op/.aws/credentials", True),
    ("/brain/id_ed25519.pub", True), ("/brain/README.md", False),
])
def test_secret_paths(path, secret):
    assert policy.is_secret(path) is secret


NOW = datetime(2026, 3, 18, 12, 0, tzinfo=timezone.utc)


def lock(scope: str, owner: str, mode: str = "exclusive", ttl_h: float = 1) -> Lock:
    return Lock(scope, owner, mode, 1, NOW - timedelta(hours=2), NOW + timedelta(hours=ttl_h),
                Holder("host"))


def test_write_rules_in_order():
    zones = (Zone("state", "tool-only", ("claims/",)), Zone("kernel", "protected", ("brain/", "kernels/")),
             Zone("project", "open", (".",)))
    f = facts(kernel="alpha", claim="c1", scope=("src/",), owners=frozenset({"c1"}),
              locks=(lock("src/locked.py", "c2"), lock("src/mine.py", "c1"), lock("src/old.py", "c3", ttl_h=-1),
                     lock("src/shared.py", "c4", mode="shared")),
              zones=zones, card="satellite-boot", zone_access=("project",), now=NOW)

    def deny(rel: str) -> str | None:
        return policy.decide("Write", {"file_path": f"{ROOT}/{rel}"}, ROOT, f)

    assert "under claims/" in deny("claims/x.yml")
    assert "belongs to kernel beta" in deny("kernels/beta/memory/x.md")
    assert "locked" in deny("src/locked.py")
    assert deny("src/mine.py") is None and deny("src/old.py") is None and deny("src/shared.py") is None
    assert "zone 'kernel'" in deny("brain/KERNEL.md")
    assert deny("kernels/alpha/memory/today.md") is None
    assert "zone 'kernel'" in deny("kernels/alpha/kernel.yml")
    assert "outside the scope of claim c1" in deny("docs/x.md")
    assert deny("src/new.py") is None
    assert policy.decide("Write", {"file_path": "/tmp/scratch.txt"}, ROOT, f) is None
    broken = f._replace(problems=("locks: bad.yml: invalid YAML",))
    assert "could not check" in policy.decide("Write", {"file_path": f"{ROOT}/src/new.py"}, ROOT, broken)


def test_relative_tool_paths_resolve_against_the_cwd():
    f = facts(scope=("src/",), claim="c1")
    assert policy.decide("Edit", {"file_path": "x.py"}, f"{ROOT}/src", f) is None
    assert "outside the scope" in policy.decide("Edit", {"file_path": "../docs/x.md"}, f"{ROOT}/src", f)


@pytest.mark.parametrize("command", ["echo x >> runs/w.yml", "rm journal/signals.jsonl",
                                     "mv b.yml breakers/b.yml", "touch locks/x.yml"])
def test_bash_may_not_write_any_state_folder_by_hand(command):
    reason = policy.decide("Bash", {"command": command}, ROOT, facts())
    assert reason and "nika-brain" in reason


def test_bash_reading_state_is_allowed():
    assert policy.decide("Bash", {"command": "cat runs/w.yml journal/signals.jsonl"}, ROOT, facts()) is None
