"""The supervisor: one process per brain that watches every live kernel.

Each pass (`check_once`): a kernel whose process is gone (or, where no process can be seen, whose
last heartbeat is older than `federation.heartbeat_ttl`) is marked `dead` with the reason (an OOM
kill counted by its cgroup is named as such), published on nika:federation:health, and what it held is
released; it is restarted only when its record says `restart: on-failure` and it has restarts left.
A live kernel gets a heartbeat (source: supervisor) so an idle agent stays visibly alive, and its
queued prompts are delivered. A temporary kernel past its ttl is killed (decommissioned).

Its process (pid file, how it is started after a spawn) is watchdog.py's, so that the verbs can start
it without importing this loop (which drives the verbs).
"""
from __future__ import annotations

import os
import sys
import time

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation import options
from nika_brain.federation.kernels import health, limits, runtimes, watchdog
from nika_brain.state import kernels
from nika_brain.state import prompts as queue
from nika_brain.support import clock

INTERVAL = 2.0


def _death_reason(k: kernels.Kernel, state: dict, live: runtimes.Liveness) -> str:
    if limits.oom_killed(state):
        return "out of memory: killed by the kernel's OOM killer (cgroup limit " \
               f"{k.limits.memory or '?'})"
    if live.exit_status is not None and live.exit_status < 0:
        sig = -live.exit_status
        hint = ", likely its memory limit" if sig == 9 and k.limits.memory_bytes else ""
        return f"{live.detail or 'process'} (signal {sig}{hint})"
    if live.exit_status is not None:
        return f"{live.detail or 'process exited'} (status {live.exit_status})"
    return live.detail or "process gone"


def check_kernel(brain: Brain, k: kernels.Kernel, *, ttl: float, beat_every: float) -> str | None:
    """One kernel's check; returns what was done (dead, restarted, killed-ttl, heartbeat) or None."""
    from nika_brain.federation.kernels import verbs
    if not k.live:
        return None
    now = clock.now()
    if k.temporary and k.ttl and k.created and (now - k.created).total_seconds() > k.ttl:
        verbs.kernel_kill(brain, k.id, f"temporary kernel: ttl {k.ttl:g}s expired", by="supervisor")
        return "killed-ttl"
    rt = runtimes.get(k.runtime)
    state = runtimes.load_state(brain, k.id)
    try:
        live = rt.alive(brain, k, state)
    except BrainError as exc:
        live = runtimes.Liveness(True, None, None, f"cannot check: {exc}")
    last = health.last_heartbeat(brain, k.id)
    visible = k.runtime != "kubernetes" or state.get("applied")
    if live.alive and not visible:
        return None
    if live.alive and k.runtime == "kubernetes" and last and now.timestamp() - last.get("t", 0) > ttl:
        live = runtimes.Liveness(False, None, None, f"no heartbeat for more than {ttl:g}s")
    if not live.alive:
        return _found_dead(brain, k, state, live)
    if last is None or now.timestamp() - last.get("t", 0) >= beat_every:
        health.publish_heartbeat(brain, k.id, "alive", source="supervisor", pid=live.pid)
    if queue.pending(brain, k.id):
        try:
            verbs.drain_queue(brain, k.id)
        except BrainError:
            pass
    return "heartbeat"


def _found_dead(brain: Brain, k: kernels.Kernel, state: dict, live: runtimes.Liveness) -> str | None:
    """A kernel whose process is gone: marked dead, what it held released, restarted when its record
    says so. Under the kernel's lifecycle mutex, and only if its record and process are still the ones
    seen gone: an operator's kill or restart that held the mutex meanwhile has decided already."""
    from nika_brain.federation.kernels import verbs
    with verbs.lifecycle(brain, k.id):
        now = kernels.load_kernel(brain, k.id)
        if (now.status, now.status_reason) != (k.status, k.status_reason) or \
                runtimes.load_state(brain, k.id).get("started_at") != state.get("started_at"):
            return None
        reason = _death_reason(k, state, live)
        health.record_event(brain, k.id, "run-exit", reason=reason,
                            status=live.exit_status if live.exit_status is not None else "died")
        k = kernels.set_status(brain, k.id, "dead", reason=reason)
        verbs.release_held(brain, k.id, f"dead: {reason}")
        try:
            runtimes.get(k.runtime).stop(brain, k, state, 0.5)  # what is left (a pane kept for its status)
        except BrainError:
            pass
        limits.remove_groups(limits.group_name(brain.root, k.id), options.get(brain, "cgroup_root"))
        health.publish_event(brain, k.id, "dead", reason=reason)  # last: all above is done
        verbs.reindex(brain)
        if k.restart == "on-failure" and k.restarts < k.max_restarts:
            try:
                k = kernels.set_status(brain, k.id, "starting", reason=f"restarting after: {reason}",
                                       restarts=k.restarts + 1)
                verbs._start(brain, k)
                health.publish_event(brain, k.id, "restarted", restarts=k.restarts, after=reason)
                return "restarted"
            except BrainError as exc:
                kernels.set_status(brain, k.id, "failed", reason=f"restart failed: {exc}")
                health.publish_event(brain, k.id, "failed", reason=str(exc))
        return "dead"


def check_once(brain: Brain) -> dict[str, str]:
    ttl = options.get(brain, "heartbeat_ttl")
    done = {}
    from nika_brain.federation.kernels import remote
    for k in kernels.list_kernels(brain):
        if remote.elsewhere(brain, k):
            continue  # another machine's kernel: its own daemon supervises it
        try:
            what = check_kernel(brain, k, ttl=ttl, beat_every=min(ttl / 3, 20.0))
        except BrainError as exc:
            what = f"error: {exc}"
        if what:
            done[k.id] = what
    return done


def run(brain: Brain, *, interval: float = INTERVAL, once: bool = False) -> None:
    pidfile = watchdog.pidfile(brain)
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    other = watchdog.running_pid(brain)
    if other and other != os.getpid() and not once:
        raise BrainError(f"a supervisor runs already (pid {other})")
    if not once:
        pidfile.write_text(f"{os.getpid()}\n")
    try:
        while True:
            check_once(brain)
            if once:
                return
            if not any(k.live for k in kernels.list_kernels(brain)):
                return  # nothing left to watch; the next spawn starts a new supervisor
            time.sleep(interval)
    finally:
        if not once:
            try:
                if pidfile.read_text().split()[0] == str(os.getpid()):
                    pidfile.unlink()
            except (OSError, IndexError):
                pass


def main() -> int:
    try:
        run(Brain.find())
    except BrainError as exc:
        print(f"nika-brain: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
