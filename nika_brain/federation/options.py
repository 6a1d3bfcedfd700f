"""The federation core's settings, under the `federation:` key of nika-brain.yml (validated here).

    federation:
      agent_command: ["claude"]         # what a kernel runs (tmux) / is invoked with (headless)
      tmux_socket: /path/to/socket      # default: tmux -L nika-brain (its own tmux server)
      heartbeat_ttl: 60                 # seconds without heartbeat before a live kernel is stale/dead
      deliver_timeout: 20               # seconds invoke waits for the agent to take a prompt
      kill_grace: 5                     # seconds between the graceful and the forced stop
      supervisor: auto                  # auto: `kernel spawn` starts the supervisor; manual: you do
      redis_url: redis://host:6379/0    # set: path locks also take a Redis lease (several machines)
      lease_prefix: "nika:lease:"
      cgroup_root: /sys/fs/cgroup       # where cgroups are looked for (tests point it elsewhere)
      kubernetes: {context: ..., image: ..., namespace_prefix: nika-os-}

Other federation issues (triage, vault, stealing) read their own keys from the same mapping; unknown
keys are theirs, not errors here.
"""
from __future__ import annotations

from typing import Any

from nika_brain.brain import Brain
from nika_brain.errors import BrainError

DEFAULTS: dict[str, Any] = {
    "agent_command": ["claude"],
    "tmux_socket": None,
    "heartbeat_ttl": 60.0,
    "deliver_timeout": 20.0,
    "kill_grace": 5.0,
    "redis_url": None,
    "lease_prefix": "nika:lease:",
    "cgroup_root": "/sys/fs/cgroup",
    "kubernetes": {},
}


def get(brain: Brain, key: str) -> Any:
    value = brain.config.federation.get(key, DEFAULTS[key])
    default = DEFAULTS[key]
    bad = None
    if key == "agent_command":
        if isinstance(value, str):
            import shlex
            value = shlex.split(value)
        if not value or not all(isinstance(v, str) for v in value):
            bad = "a command (a list of strings)"
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 86400:
            bad = "a number of seconds (0 to 86400)"
        value = float(value) if bad is None else value
    elif isinstance(default, dict):
        bad = None if isinstance(value, dict) else "a mapping"
    elif value is not None and not isinstance(value, str):
        bad = "a string"
    if bad:
        raise BrainError(f"nika-brain.yml: federation.{key}: expected {bad}, got {value!r}")
    return value
