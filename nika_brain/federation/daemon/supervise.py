"""The supervisor as a daemon service: each tick, every live kernel is checked (death, bounded
restart, ttl, heartbeat) and its queued prompts are delivered once its session has started
(supervisor.check_once). Then the handovers the kernels' hooks asked for are done here, outside the
kernels' sandboxes (handover.perform_requested), and followed up: the prompts and the waiting
work-stealing tasks of a handed-over kernel go to its successor, and the predecessor's process is
stopped once the successor is ready (its SessionStart fired). The triage's generalist is started when
the daemon comes up and whenever prompts wait for it while it is down.
"""
from __future__ import annotations

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation.kernels import remote, runtimes, supervisor, verbs
from nika_brain.federation.lineage import handover
from nika_brain.state import kernels
from nika_brain.state import prompts as queue


def follow_handovers(brain: Brain) -> list[str]:
    """Move a handed-over kernel's queued prompts to its successor; stop its process once the
    successor is ready. Returns the kernels acted on."""
    done = []
    for k in kernels.list_kernels(brain):
        if k.status != "handed-over" or remote.elsewhere(brain, k):
            continue
        nxt = verbs.successor(brain, k)
        if nxt.id == k.id or not nxt.live:
            continue
        try:
            from nika_brain import bus
            from nika_brain.federation.stealing import protocol as stealing
            from nika_brain.federation.stealing.texts import Texts
            done += stealing.follow(bus.open_bus(brain), k.id, nxt.id, texts=Texts(brain))
        except BrainError:
            pass
        for item in queue.pending(brain, k.id):
            queue.enqueue(brain, nxt.id, item["prompt"], by=item.get("by") or "handover")
            queue.settle(brain, k.id, item["id"], "dropped", reason=f"followed successor {nxt.id}")
            done.append(k.id)
        state = runtimes.load_state(brain, k.id)
        if state.get("stopped_after_handover") or not verbs.ready(brain, nxt):
            continue
        try:
            if runtimes.get(k.runtime).alive(brain, k, state).alive:
                verbs._stop(brain, k)
                done.append(k.id)
        except BrainError:
            continue
        state["stopped_after_handover"] = True
        runtimes.save_state(brain, k.id, state)
    return done


NOT_RUNNING = ("dead", "failed")   # a kernel the operator killed stays killed; a handed-over one has a successor


def start_generalist(brain: Brain, *, waiting_only: bool = True) -> str | None:
    """The generalist the triage falls back to (`federation.triage.default`), started by the daemon:
    its record is on this machine and it is not running (dead or failed, whatever its restart policy),
    and -- on each tick -- prompts wait for it (an ask's fallback route queued while it was down).
    Returns its id when started."""
    from nika_brain.federation.triage.goals import settings
    try:
        k = kernels.load_kernel(brain, settings(brain).default)
    except BrainError:
        return None   # no generalist configured here: a fallback route says so when it is asked
    if remote.elsewhere(brain, k) or k.status not in NOT_RUNNING:
        return None
    if waiting_only and not queue.pending(brain, k.id):
        return None
    verbs.kernel_start(brain, k.id, by="the federation daemon (the triage's generalist)")
    return k.id


class SupervisorService:
    name = "supervisor"
    every = 5.0  # seconds; `federation supervise` alone checks every 2 s

    def __init__(self, brain: Brain):
        self.brain = brain

    def start(self) -> None:
        try:
            start_generalist(self.brain, waiting_only=False)   # up: the fallback kernel runs too
        except BrainError:
            pass   # said by the next tick's attempt (the service's last error), never fatal to `up`

    def tick(self) -> None:
        supervisor.check_once(self.brain)
        start_generalist(self.brain)
        handover.perform_requested(self.brain)
        follow_handovers(self.brain)

    def stop(self) -> None:
        pass


def service(brain: Brain) -> SupervisorService:
    return SupervisorService(brain)
