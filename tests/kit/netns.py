"""Machines in separate network namespaces (issue 22's Tests): each gets its own namespace with only
loopback and one veth link to the host, where the shared redis-server listens on the host end of every
link. A process started through `ns.exec(...)` reaches Redis only over its machine's link, so `cut()`
(the host end down) is a real partition for that machine alone: its packets are dropped, connections
time out, the other machines' links carry on. Needs root (`ip netns add`), which this suite's machines
and CI have; without it these tests fail with the reason, they are not skipped.
"""
from __future__ import annotations

import os
import subprocess

from tests.kit.redis import RedisServer


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()} (separate network namespaces need "
                           "root and iproute2)")


class NetNs:
    def __init__(self, index: int):
        tag = f"{os.getpid() % 100000}{index}"
        self.name = f"nika-{tag}"
        self.host_if, ns_if = f"nbh{tag}"[:15], f"nbn{tag}"[:15]
        pid = os.getpid()  # a /30 per machine, from this process's pid: parallel test workers never meet
        net = f"10.{(pid >> 8) & 255}.{pid & 255}"
        self.host_ip, self.ns_ip = f"{net}.{4 * index + 1}", f"{net}.{4 * index + 2}"
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", ns_if)
            _ip("link", "set", ns_if, "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            for cmd in (("addr", "add", f"{self.ns_ip}/30", "dev", ns_if), ("link", "set", ns_if, "up"),
                        ("link", "set", "lo", "up")):
                _ip("netns", "exec", self.name, "ip", *cmd)
        except RuntimeError:
            self.delete()
            raise

    def exec(self, argv: list[str]) -> list[str]:
        """argv run inside this namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        _ip("link", "set", self.host_if, "down")

    def restore(self) -> None:
        _ip("link", "set", self.host_if, "up")

    def delete(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)


class SharedRedis(RedisServer):
    """One redis-server listening on loopback and on the host end of every machine's link."""

    def __init__(self, folder, spaces: list[NetNs]):
        super().__init__(folder)
        self.binds = ["127.0.0.1", *(ns.host_ip for ns in spaces)]

    def command(self, exe: str) -> list[str]:
        cmd = super().command(exe)
        i = cmd.index("--bind")
        return [*cmd[:i + 1], *self.binds, *cmd[i + 2:], "--protected-mode", "no"]

    def url_for(self, ns: NetNs) -> str:
        return f"redis://{ns.host_ip}:{self.port}/0"
