"""Hard limits for a kernel's process: cgroups (v2, else v1) when writable, else prlimit.

`plan(brain, kernel)` decides what applies on this machine and prepares the cgroup; the kernel's
command is then prefixed with `launch_prefix(...)`: a tiny launcher (`python -m
nika_brain.federation.kernels.limits`) that puts itself in the cgroup (or sets its rlimits), loads the
kernel's credentials file into a scrubbed environment and execs the agent, so nothing of ours stays
resident. The kernel record says which mechanism applied (`enforcement`).

cgroups stop a kernel over its memory for real (the kernel's OOM killer, SIGKILL); with prlimit the
address-space limit makes allocations fail, which kills most agents too, but less predictably, and
prlimit cannot cap CPU share (only CPU seconds), so `cpu` is then recorded as not enforced.
"""
from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

from nika_brain.state.kernels import Kernel

GROUP = "nika-brain"   # our subtree under each hierarchy


@dataclass(frozen=True)
class Plan:
    enforcement: str                 # cgroup-v2 | cgroup-v1 | prlimit | none
    procs: tuple[str, ...] = ()      # cgroup.procs files the launcher writes its pid into
    memory_bytes: int | None = None  # for prlimit (RLIMIT_AS)
    cpu_enforced: bool = False
    oom_file: str | None = None      # where an OOM kill is counted (memory.events / memory.oom_control)


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def _v2_root(root: Path) -> Path | None:
    for cand in (root, root / "unified"):
        ctl = cand / "cgroup.controllers"
        try:
            if "memory" in ctl.read_text().split() and _writable_dir(cand):
                return cand
        except OSError:
            continue
    return None


def group_name(brain_root: Path | str, kernel_id: str) -> str:
    """One cgroup per kernel of one brain: two brains on a machine may both have a kernel `alpha`."""
    import hashlib
    return f"{hashlib.sha1(str(brain_root).encode()).hexdigest()[:8]}-{kernel_id}"


def _mkgroup(base: Path, name: str) -> Path:
    g = base / GROUP / name
    if g.is_dir():
        try:
            g.rmdir()  # an empty leftover: start with fresh counters (oom_kill)
        except OSError:
            pass
    g.mkdir(parents=True, exist_ok=True)
    return g


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def _can_join(procs: list[str]) -> bool:
    """Whether a process of ours may move into these cgroups (delegation, permissions): a shell
    tries, then exits. Without this, a cgroup that accepts limits but not our pid would kill the
    kernel at start instead of falling back to rlimits."""
    import subprocess
    script = "".join(f'echo $$ > "{f}" && ' for f in procs) + "true"
    try:
        return subprocess.run(["sh", "-c", script], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def plan(kernel: Kernel, cgroup_root: str | Path = "/sys/fs/cgroup", name: str | None = None) -> Plan:
    """Prepare the kernel's cgroup(s) (named `name`, see group_name) and say what will enforce its
    limits."""
    name = name or kernel.id
    lim = kernel.limits
    if lim.memory_bytes is None and lim.cpu_percent is None:
        return Plan("none")
    root = Path(cgroup_root)
    v2 = _v2_root(root)
    if v2 is not None:
        try:
            top = v2 / GROUP
            top.mkdir(exist_ok=True)
            _write(top / "cgroup.subtree_control", "+memory +cpu")
            g = _mkgroup(v2, name)
            ok = lim.memory_bytes is None or _write(g / "memory.max", str(lim.memory_bytes))
            if lim.memory_bytes is not None:
                _write(g / "memory.swap.max", "0")
            cpu = lim.cpu_percent is not None and _write(
                g / "cpu.max", f"{int(lim.cpu_percent * 1000)} 100000")
            if ok and _can_join([str(g / "cgroup.procs")]):
                return Plan("cgroup-v2", (str(g / "cgroup.procs"),), cpu_enforced=cpu,
                            oom_file=str(g / "memory.events"))
        except OSError:
            pass
    mem_h, cpu_h = root / "memory", root / "cpu"
    if lim.memory_bytes is None or _writable_dir(mem_h):
        procs: list[str] = []
        oom = None
        try:
            if lim.memory_bytes is not None:
                g = _mkgroup(mem_h, name)
                _write(g / "memory.memsw.limit_in_bytes", "-1")  # lower the plain limit first
                if not _write(g / "memory.limit_in_bytes", str(lim.memory_bytes)):
                    raise OSError("memory.limit_in_bytes")
                _write(g / "memory.memsw.limit_in_bytes", str(lim.memory_bytes))  # no swap escape
                procs.append(str(g / "cgroup.procs"))
                oom = str(g / "memory.oom_control")
            cpu = False
            if lim.cpu_percent is not None and _writable_dir(cpu_h):
                g = _mkgroup(cpu_h, name)
                cpu = _write(g / "cpu.cfs_period_us", "100000") and \
                    _write(g / "cpu.cfs_quota_us", str(int(lim.cpu_percent * 1000)))
                if cpu:
                    procs.append(str(g / "cgroup.procs"))
            if procs and _can_join(procs):
                return Plan("cgroup-v1", tuple(procs), cpu_enforced=cpu, oom_file=oom)
        except OSError:
            pass
    return Plan("prlimit", memory_bytes=lim.memory_bytes)


def oom_count(oom_file: str | None) -> int:
    """OOM kills counted by a cgroup (memory.events in v2, memory.oom_control in v1)."""
    if not oom_file:
        return 0
    try:
        text = Path(oom_file).read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def oom_killed(state: dict | None) -> bool:
    """True when the kernel's cgroup counted an OOM kill since the kernel started (runtime state
    holds the file and the count at start)."""
    state = state or {}
    return oom_count(state.get("oom_file")) > int(state.get("oom_base") or 0)


def remove_groups(name: str, cgroup_root: str | Path = "/sys/fs/cgroup") -> None:
    """Remove the kernel's (empty) cgroups; a still-populated one stays."""
    root = Path(cgroup_root)
    for base in (root, root / "unified", root / "memory", root / "cpu"):
        g = base / GROUP / name
        if g.is_dir():
            try:
                g.rmdir()
            except OSError:
                pass


def launch_prefix(p: Plan, env_file: Path | None) -> list[str]:
    """argv prefix that applies `p` and the env file, then execs what follows `--`."""
    argv = [sys.executable, "-m", "nika_brain.federation.kernels.limits"]
    for f in p.procs:
        argv += ["--procs", f]
    if p.enforcement == "prlimit" and p.memory_bytes:
        argv += ["--as", str(p.memory_bytes)]
    if env_file is not None:
        argv += ["--env-file", str(env_file)]
    return argv + ["--"]


def read_env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip().removeprefix("export ").strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if key.isidentifier():
            out[key] = value
    return out


def main(argv: list[str]) -> int:
    """The launcher: join cgroups / set rlimits, add the credentials, exec the agent."""
    procs: list[str] = []
    as_limit = None
    env_file = None
    while argv and argv[0] != "--":
        flag, value, argv = argv[0], argv[1], argv[2:]
        if flag == "--procs":
            procs.append(value)
        elif flag == "--as":
            as_limit = int(value)
        elif flag == "--env-file":
            env_file = Path(value)
    cmd = argv[1:]
    if not cmd:
        print("nika-brain: limits launcher: no command", file=sys.stderr)
        return 2
    for f in procs:
        try:
            Path(f).write_text(str(os.getpid()))
        except OSError as exc:
            print(f"nika-brain: cannot join cgroup {f}: {exc.strerror}", file=sys.stderr)
            return 126
    if as_limit:
        resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))
    env = dict(os.environ)
    if env_file is not None:
        env.update(read_env_file(env_file))
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as exc:
        print(f"nika-brain: cannot run {cmd[0]}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
