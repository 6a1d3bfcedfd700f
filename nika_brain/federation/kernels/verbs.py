"""The seed's five verbs on kernels, as a Python API (the CLI and other federation modules call these):

    kernel_spawn(brain, goal, scope=..., resource_limits=..., ...) -> Kernel
    kernel_invoke(brain, kernel_id, prompt, wait=False) -> dict
    kernel_readjust(brain, kernel_id, new_directive, by=...) -> Directive
    kernel_observe(brain, kernel_id, since="1h", query=None) -> dict
    kernel_kill(brain, kernel_id, reason, by=...) -> dict

Keep their names and arguments stable: work stealing, handover and spawn proposals (issue 14) call
them. Every failure is one BrainError with an exit code: 1 bad input / unknown or duplicate id,
7 a runtime's program missing, 8 the kernel cannot take the prompt now (it stays queued).
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any, Mapping

from nika_brain.brain import Brain
from nika_brain.errors import BrainError, Refused
from nika_brain.federation import options
from nika_brain.federation.kernels import claude_config, credentials, health, limits, remote, runtimes
from nika_brain.state import kernels
from nika_brain.state import prompts as queue
from nika_brain.state.kernels import Kernel, Limits
from nika_brain.support import clock

EXIT_NOT_TAKEN = runtimes.NotTaken.exit_code  # dead or busy kernel: the prompt stays queued
PASS_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "SHELL",
            "TMPDIR", "PYTHONPATH", "NIKA_BUS", "NIKA_REDIS_URL", "NIKA_NOW")
CREDENTIALS = credentials.FILE


# ---- helpers ---------------------------------------------------------------------------------------

def _auto_id(brain: Brain, goal: str) -> str:
    import unicodedata  # "Opérer" -> "operer": French goals make readable ids
    plain = unicodedata.normalize("NFKD", goal).encode("ascii", "ignore").decode("ascii")
    words = re.findall(r"[a-z0-9]+", plain.lower())
    base = "k-" + "-".join(words[:5])[:40].strip("-") if words else "k"
    kid, n = base, 2
    while kernels.kernel_dir(brain, kid).exists():
        kid, n = f"{base}-{n}", n + 1
    return kid


def scrubbed_env(brain: Brain, kernel: Kernel) -> dict[str, str]:
    """The kernel's environment: a few harmless variables of ours, never the caller's secrets. Its
    own credentials are added by the launcher from its credentials file (not on any command line)."""
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    env.update(NIKA_BRAIN_DIR=str(brain.root), NIKA_KERNEL_ID=kernel.id, TERM="screen-256color")
    return env


def _launch(brain: Brain, kernel: Kernel, plan: limits.Plan) -> runtimes.Launch:
    folder = kernels.kernel_dir(brain, kernel.id)
    from nika_brain.federation.kernels import sandbox  # bwrap's and the bus's imports: not for invoke
    box = sandbox.wrap(brain, kernel, options.get(brain, "tmux_socket")) if kernel.sandbox == "bwrap" else []
    argv = limits.launch_prefix(plan, folder / CREDENTIALS) + box + list(options.get(brain, "agent_command"))
    return runtimes.Launch(tuple(argv), folder, scrubbed_env(brain, kernel))


def _publish_goals(brain: Brain, event: str, k: Kernel) -> None:
    from nika_brain import bus
    health.publish_or_warn(brain, bus.GOALS, {
        "event": event, "kernel": k.id, "goal": k.goal, "tags": list(k.tags),
        "examples": [kernels.text_ref(x) for x in k.examples], "region": k.region, "data_class": k.data_class,
        "status": k.status, "at": clock.iso(clock.now())})
    rebuild_goals_index(brain)


def reindex(brain: Brain) -> None:
    """Regenerate BRAIN-INDEX.md (kernels with their state); an index problem never fails a verb."""
    try:
        from nika_brain.engine import index
        index.regenerate(brain)
    except (BrainError, OSError) as exc:
        import sys
        print(f"nika-brain: BRAIN-INDEX.md not updated: {exc}", file=sys.stderr)


def rebuild_goals_index(brain: Brain) -> None:
    """Have the triage (issue 12) rebuild its goals index after a spawn or a kill. A triage failure is
    reported, never fatal to the verb: the kernel's record is already written."""
    from nika_brain.federation.triage import goals  # lazily: it loads the embedder
    try:
        goals.refresh(brain)
    except BrainError as exc:
        import sys
        print(f"nika-brain: triage goals index not rebuilt: {exc}", file=sys.stderr)


def _start(brain: Brain, k: Kernel) -> Kernel:
    """Start (or restart) the kernel's runtime; the record says active and which limits applied."""
    rt = runtimes.require(brain, k.runtime)
    group = limits.group_name(brain.root, k.id)
    plan = limits.plan(k, options.get(brain, "cgroup_root"), group) if k.runtime != "kubernetes" \
        else limits.Plan("kubernetes")
    queue.reset_sent(brain, k.id)  # a new process: what the old one had not taken goes again
    from nika_brain.federation.kernels import doctrine
    doctrine.snapshot(brain, k)     # what its hooks enforce until the next start (read-only inside)
    launch = _launch(brain, k, plan)
    recorded = prepare_agent(brain, k, launch)
    offset = health.events_size(brain, k.id)
    state = rt.start(brain, k, launch)
    state.update(events_offset=offset, ready_at=None, claude_config=recorded,
                 enforcement=plan.enforcement, oom_file=plan.oom_file, cpu_enforced=plan.cpu_enforced,
                 oom_base=limits.oom_count(plan.oom_file), cgroup=group, procs=list(plan.procs),
                 memory_bytes=plan.memory_bytes)
    runtimes.save_state(brain, k.id, state)
    if state.get("applied") is False:
        return kernels.set_status(brain, k.id, "starting", enforcement=plan.enforcement, reason=(
            f"manifests rendered to {brain.rel(state['manifests'])}; not applied: no kubectl context "
            "(federation.kubernetes.context)"))
    return kernels.set_status(brain, k.id, "active", enforcement=plan.enforcement)


def prepare_agent(brain: Brain, k: Kernel, launch: runtimes.Launch) -> str | None:
    """For Claude Code: record the kernel folder as trusted and the operator's API key as approved in
    its own config (the operator decided both by spawning it / giving it the key); returns the config
    file, or None for another agent. Nothing on the kernel's screen is ever answered by typing."""
    if k.runtime == "kubernetes" or not claude_config.is_claude(list(options.get(brain, "agent_command"))):
        return None
    folder = kernels.kernel_dir(brain, k.id)
    # the environment the agent gets: ours, the sandbox's own HOME/CLAUDE_CONFIG_DIR, its credentials
    from nika_brain.federation.kernels import sandbox  # bwrap's and the bus's imports: not for invoke
    box = sandbox.own_env(brain, k) if k.sandbox == "bwrap" else {}
    env = {**launch.env, **box, **credentials.load(folder)}
    path = claude_config.trust_folder(env, folder)
    if env.get("ANTHROPIC_API_KEY"):
        claude_config.approve_key(env, env["ANTHROPIC_API_KEY"])
    return str(path)


def ready(brain: Brain, k: Kernel, state: dict | None = None) -> bool:
    """Whether the kernel's agent has started its session since its last start (its SessionStart
    hook fired). A headless or kubernetes kernel has no resident session: ready when live."""
    if not k.live:
        return False
    state = runtimes.load_state(brain, k.id) if state is None else state
    if k.runtime != "tmux" or state.get("ready_at") or "events_offset" not in state:
        return True
    events, _ = health.read_events(brain, k.id, int(state.get("events_offset") or 0))
    ev = next((e for e in events if e.get("event") == "session"), None)
    if ev is None:
        return False
    state["ready_at"] = ev.get("at")
    runtimes.save_state(brain, k.id, state)
    return True


def waiting_on(brain: Brain, k: Kernel, state: dict) -> str | None:
    """A dialog the agent is stuck on, with the command to attach (tmux), or None."""
    rt = runtimes.get(k.runtime)
    probe = getattr(rt, "waiting_on", None)
    try:
        return probe(brain, k, state) if probe else None
    except BrainError:
        return None


def _undo_start(brain: Brain, k: Kernel) -> None:
    """Stop whatever a failed start left running (a tmux session whose setup failed...)."""
    try:
        runtimes.get(k.runtime).stop(brain, k, runtimes.load_state(brain, k.id), 0.5)
    except (BrainError, OSError):
        pass
    limits.remove_groups(limits.group_name(brain.root, k.id), options.get(brain, "cgroup_root"))


# ---- spawn -----------------------------------------------------------------------------------------

def _check_spawn(brain: Brain, kernel_id: str | None, card: str | None) -> None:
    """Refused before anything is written: an empty --id, an id that differs from an existing kernel's
    only by case (ALPHA while alpha exists: one folder on a case-insensitive disk, one name to a
    person), a card with no agents/<card>.md."""
    if kernel_id is not None:
        if not kernel_id.strip():
            raise BrainError("--id is empty; leave it out for an id made from the goal")
        kernels.check_id(kernel_id)
        folded = kernel_id.casefold()
        if brain.kernels_dir.is_dir():
            for other in brain.kernels_dir.iterdir():
                if other.name != kernel_id and other.name.casefold() == folded:
                    raise BrainError(f"kernel {other.name} exists already; {kernel_id} differs only by case")
    if card is not None:
        from nika_brain.state import agents
        agents.load_card(brain, card)


def check_live(brain: Brain, kernel_id: str, verb: str) -> Kernel:
    """The kernel a directive or a task is for, refused when it is dead, killed, failed or handed over
    (nothing would ever read it: "queued" would be a lie)."""
    k = kernels.load_kernel(brain, kernel_id)
    if not k.live:
        raise BrainError(f"kernel {k.id} is {k.status}: nothing would {verb} (spawn a kernel, or use a live one)")
    return k


def kernel_spawn(brain: Brain, goal: str, scope=(), resource_limits: Mapping[str, Any] | Limits | None = None,
                 *, kernel_id: str | None = None, tags=(), examples=(), region: str | None = None,
                 data_class: str | None = None, doctrine: str | None = None, card: str | None = None,
                 parent: str | None = None, runtime: str = "tmux", restart: str = "never",
                 max_restarts: int = kernels.DEFAULT_MAX_RESTARTS, temporary: bool = False, ttl=None,
                 install_settings: bool = True, env: Mapping[str, str] | None = None,
                 sandboxed: bool = True) -> Kernel:
    """Create kernels/<id>/ (record, memory/, Claude Code settings, credentials file with `env`),
    register its goal on nika:federation:goals, and start it in its own sandbox. A failure leaves the
    kernel `failed` with the reason (or, when nothing was written yet, nothing at all)."""
    if ttl is not None and not temporary:
        raise BrainError("--ttl applies to a temporary kernel only (add --temporary)")
    for key in env or {}:
        credentials.check_key(key)
    _check_spawn(brain, kernel_id, card)
    lim = resource_limits if isinstance(resource_limits, Limits) else \
        Limits.parse((resource_limits or {}).get("memory"), (resource_limits or {}).get("cpu"))
    kid = kernel_id or _auto_id(brain, goal or "")
    k = kernels.new_kernel(kid, goal, tags=tags, examples=examples, scope=scope, limits=lim,
                           region=region, data_class=data_class, doctrine=doctrine,
                           card=card or kernels.DEFAULT_CARD, parent=parent, status="starting",
                           runtime=runtime, restart=restart, max_restarts=max_restarts,
                           temporary=temporary, ttl=ttl)
    runtimes.require(brain, runtime)  # before anything is written: the runtime first, then its sandbox
    from nika_brain.federation.kernels import sandbox  # bwrap's and the bus's imports: not for invoke
    k = sandbox.choose(k, sandboxed)  # bwrap, or off when the operator said --no-sandbox
    from nika_brain.state import machine
    here = machine.load(brain)
    try:
        machine.check_placement(here, kid, region, runtime)
    except Refused as exc:
        from nika_brain.federation.kernels import remote
        up = remote.machines_of_region(brain, region or "")
        if up and not env:  # placed on a machine of its region, whose daemon spawns it (signed request)
            return remote.place_spawn(brain, up[0], kid, goal, {
                "scope": list(scope), "resource_limits": lim.to_dict(), "tags": list(tags),
                "examples": list(examples), "region": region, "data_class": data_class, "doctrine": doctrine,
                "card": card, "parent": parent, "runtime": runtime, "restart": restart,
                "max_restarts": max_restarts, "temporary": temporary, "ttl": ttl,
                "install_settings": install_settings, "sandboxed": sandboxed})
        hint = remote.placement_hint(brain, region or "")
        if up:
            hint += " (with its own --env-file: credentials never travel over the bus)"
        raise Refused(f"{exc.message}; {hint}") from None
    k = replace(k, machine=here.id if runtime != "kubernetes" else None)
    folder = kernels.kernel_dir(brain, kid)
    brain.kernels_dir.mkdir(parents=True, exist_ok=True)
    with brain.mutex("kernels"):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            raise BrainError(f"kernel {kid} exists already ({brain.rel(folder)})") from None
        runtimes.forget_state(brain, kid)   # a folder removed by hand: its old runtime is not this one
        try:
            k = kernels.save_kernel(brain, k)
            (folder / "memory").mkdir(mode=0o700)
            credentials.write(folder, dict(env or {}))
        except BaseException:
            import shutil
            shutil.rmtree(folder, ignore_errors=True)
            raise
    try:
        if install_settings:
            from nika_brain.claude import settings as claude_settings
            from nika_brain.federation.kernels import doctrine
            claude_settings.install(folder, kernel_id=kid, brain_dir=brain.root,
                                    tools=doctrine.resolve(brain, k).tools_denied,
                                    **sandbox.claude_sandbox(k))
        k = _start(brain, k)
    except (BrainError, OSError) as exc:
        if runtimes.state_path(brain, kid).exists():  # the runtime started: stop what it started
            _undo_start(brain, k)
        kernels.set_status(brain, kid, "failed", reason=f"spawn failed: {exc}")
        reindex(brain)
        if isinstance(exc, BrainError):
            raise
        raise BrainError(f"kernel {kid}: spawn failed: {exc}") from exc
    _publish_goals(brain, "spawned", k)
    reindex(brain)
    from nika_brain.federation.kernels import watchdog
    watchdog.ensure_running(brain)
    return k


# ---- invoke ----------------------------------------------------------------------------------------

def _wait_event(brain: Brain, kid: str, offset: int, match, timeout: float,
                rt: runtimes.Runtime | None = None, k: Kernel | None = None, state: dict | None = None):
    deadline = time.monotonic() + timeout
    while True:
        events, offset = health.read_events(brain, kid, offset)
        for e in events:
            if match(e):
                return e, offset
        if time.monotonic() >= deadline:
            return None, offset
        if rt is not None and k is not None and _gone(brain, rt, k, state or {}):
            # its last words may have come between the read above and its end
            events, offset = health.read_events(brain, kid, offset)
            return next((e for e in events if match(e)), None), offset
        time.sleep(0.02)


def _gone(brain: Brain, rt: runtimes.Runtime, k: Kernel, state: dict) -> str | None:
    """Why waiting on the agent is pointless now: its process is dead, or (headless) the one
    invocation that had the prompt has ended without taking it."""
    if not rt.alive(brain, k, state).alive:
        return "its process is gone"
    ended = getattr(rt, "ended", None)
    return ended(brain, k, state) if ended is not None else None


def _deliver(brain: Brain, k: Kernel, item: dict, timeout: float) -> tuple[dict | None, int]:
    """Hand one queued prompt to the agent and wait for its UserPromptSubmit acknowledgement."""
    rt = runtimes.get(k.runtime)
    state = runtimes.load_state(brain, k.id)
    offset = health.events_size(brain, k.id)
    # the same limits for every invocation of a headless kernel as for a resident one
    plan = limits.Plan(state.get("enforcement", "none"), tuple(state.get("procs") or ()),
                       state.get("memory_bytes"))
    changes = rt.deliver(brain, k, state, item["prompt"], _launch(brain, k, plan))
    queue.settle(brain, k.id, item["id"], "sent")
    if changes:
        state.update(changes)
        runtimes.save_state(brain, k.id, state)
    sha = health.prompt_sha(item["prompt"])
    taken = lambda e: e.get("event") == "taken" and e.get("sha") == sha  # noqa: E731
    deadline = time.monotonic() + timeout
    confirm = getattr(rt, "confirm", None)
    look, nudges, looks = CONFIRM_FIRST, [], 0
    while True:
        ev, offset = _wait_event(brain, k.id, offset, taken, max(0.0, min(look, deadline - time.monotonic())),
                                 rt, k, state)
        if ev is not None or confirm is None or time.monotonic() >= deadline or len(nudges) >= CONFIRM_TRIES \
                or not rt.alive(brain, k, state).alive:
            break
        # typed, and no UserPromptSubmit yet: the runtime looks at the screen (Enter again, or the
        # keys typed again once when they were lost), bounded
        looks += 1
        did = confirm(brain, k, state, item["prompt"], retype=looks > 1 and "retyped" not in nudges)
        if did:
            nudges.append(did)
        look = CONFIRM_AGAIN
    if nudges:
        health.record_event(brain, k.id, "delivery", prompt=item["id"], sha=sha, tries=nudges,
                            taken=ev is not None)
        item["nudges"] = nudges
    if ev is None:
        item["gone"] = _gone(brain, rt, k, state)
    if ev is not None:
        queue.settle(brain, k.id, item["id"])
    return ev, offset


CONFIRM_FIRST = 3.0   # seconds after typing before the first look at the screen
CONFIRM_AGAIN = 4.0   # between two looks
CONFIRM_TRIES = 4     # looks that acted (Enter again, typed again) before giving up: the prompt stays queued


def successor(brain: Brain, k: Kernel) -> Kernel:
    """The kernel that now does a handed-over kernel's work (following a chain of handovers)."""
    seen = {k.id}
    while k.status == "handed-over":
        nxt = next((x for x in kernels.list_kernels(brain) if x.parent == k.id and x.id not in seen), None)
        if nxt is None:
            break
        seen.add(nxt.id)
        k = nxt
    return k


def _not_running(k: Kernel) -> runtimes.NotTaken:
    return runtimes.NotTaken(f"kernel {k.id} is {k.status}"
                             f"{f' ({k.status_reason})' if k.status_reason else ''}; nothing was queued; "
                             f"start it again: nika-brain kernel start {k.id}")


def await_ready(brain: Brain, k: Kernel, timeout: float) -> None:
    """Wait until the kernel's session has started; never type into what is on its screen. Raises
    NotTaken when it died, or is stuck on a dialog (with the command to attach), or timed out."""
    rt = runtimes.get(k.runtime)
    deadline = time.monotonic() + timeout
    asked_dialog = time.monotonic() + min(3.0, timeout / 2)
    while True:
        state = runtimes.load_state(brain, k.id)
        if ready(brain, k, state):
            return
        live = rt.alive(brain, k, state)
        if not live.alive:
            raise runtimes.NotTaken(f"kernel {k.id}'s agent exited before its session started "
                                    f"({live.detail or 'gone'}); see `nika-brain kernel observe {k.id}`, "
                                    f"then `nika-brain kernel start {k.id}`")
        now = time.monotonic()
        if now >= asked_dialog:
            stuck = waiting_on(brain, k, state)
            if stuck:
                raise runtimes.NotTaken(stuck)
        if now >= deadline:
            raise runtimes.NotTaken(f"kernel {k.id}'s session has not started within {timeout:g}s")
        time.sleep(0.05)


def kernel_invoke(brain: Brain, kernel_id: str, prompt: str, *, wait: bool = False,
                  timeout: float | None = None, by: str = "", own_turn: bool | None = None) -> dict:
    """Queue the prompt, deliver it once the kernel is ready, and confirm the agent took it; with
    wait, return its answer. A handed-over kernel's prompt goes to its successor; a killed or failed
    kernel refuses it (exit 8, naming `kernel start`); a dead one keeps it queued for its next start.

    `own_turn` (the default with wait): the prompt is typed only once the kernel has no turn in
    progress, so that it starts a turn of its own and the Stop ending that turn is its answer. Typed
    into a running turn, Claude Code takes it at once (UserPromptSubmit) and answers it inside that
    turn: the answer at that Stop is the running turn's, not this prompt's."""
    queue.check(prompt)
    own_turn = wait if own_turn is None else own_turn
    k = successor(brain, kernels.load_kernel(brain, kernel_id))
    where = remote.elsewhere(brain, k)
    if where:  # its machine's daemon delivers it and answers (remote.py)
        return remote.call(brain, where, "kernel_invoke", k.id, prompt, wait=wait, timeout=timeout, by=by,
                           own_turn=own_turn)
    if k.status in ("killed", "failed", "handed-over"):
        raise _not_running(k)
    item = queue.enqueue(brain, k.id, prompt, by=by, hold=own_turn)
    try:
        return _invoke_queued(brain, k, item, wait=wait, timeout=timeout, own_turn=own_turn)
    finally:
        if own_turn:   # delivered, or left queued: from now on the redelivery's
            queue.settle(brain, k.id, item["id"], "unhold")


def _invoke_queued(brain: Brain, k: Kernel, item: dict, *, wait: bool, timeout: float | None,
                   own_turn: bool) -> dict:
    if not k.live:
        raise runtimes.NotTaken(f"kernel {k.id} is {k.status}; prompt {item['id']} stays queued and is "
                                f"delivered when it runs again (nika-brain kernel start {k.id})",
                                queued=item["id"])
    rt = runtimes.require(brain, k.runtime)
    if not rt.alive(brain, k, runtimes.load_state(brain, k.id)).alive:
        raise runtimes.NotTaken(f"kernel {k.id}'s process is gone; prompt {item['id']} stays queued "
                                f"(nika-brain kernel start {k.id})", queued=item["id"])
    limit = options.get(brain, "deliver_timeout")
    try:
        await_ready(brain, k, limit)
    except runtimes.NotTaken as exc:
        raise runtimes.NotTaken(f"{exc}; prompt {item['id']} stays queued and is delivered when the "
                                "kernel is ready", queued=item["id"]) from None
    started = time.monotonic()
    if own_turn:
        ev, offset = _deliver_in_own_turn(brain, k, item, limit, timeout or 600.0)
    else:
        with brain.mutex(f"deliver-{k.id}"):
            ev, offset = _deliver(brain, k, item, limit)
    if ev is None:
        tried = f"; tried: {', '.join(item['nudges'])}" if item.get("nudges") else ""
        why = f"{item['gone']}{tried}" if item.get("gone") else f"within {limit:g}s (busy or gone{tried})"
        raise runtimes.NotTaken(f"kernel {k.id} did not take prompt {item['id']}: {why}; it stays queued, "
                                f"confirmed when taken (see `nika-brain kernel observe {k.id}`)",
                                queued=item["id"])
    out = {"kernel": k.id, "id": item["id"], "taken": ev["at"], "session": ev.get("session"),
           "sha": ev.get("sha"), "offset": offset}
    if wait:
        left = max(1.0, (timeout or 600.0) - (time.monotonic() - started))
        out["answer"] = await_answer(brain, k.id, item["id"], ev, offset, left).get("text")
    return out


def _deliver_in_own_turn(brain: Brain, k: Kernel, item: dict, limit: float,
                         timeout: float) -> tuple[dict | None, int]:
    """Deliver the item once the kernel has no turn in progress (its last UserPromptSubmit has had its
    Stop), checked again under the delivery mutex so that no other delivery slips in between. While
    it waits the item is held (queued with hold): the supervisor's redelivery leaves it to us. Raises
    NotTaken (the prompt stays queued) when the kernel dies or the turn outlasts `timeout`."""
    rt = runtimes.get(k.runtime)
    deadline = time.monotonic() + timeout
    while True:
        if not health.turn_in_progress(brain, k.id):
            with brain.mutex(f"deliver-{k.id}"):
                if not health.turn_in_progress(brain, k.id):
                    return _deliver(brain, k, item, limit)
        live = rt.alive(brain, k, runtimes.load_state(brain, k.id))
        if not live.alive:
            raise runtimes.NotTaken(f"kernel {k.id} died in the turn before prompt {item['id']} "
                                    f"({live.detail or 'process gone'}); it stays queued "
                                    f"(nika-brain kernel start {k.id})", queued=item["id"])
        if time.monotonic() >= deadline:
            raise runtimes.NotTaken(f"kernel {k.id} stayed in its running turn for {timeout:g}s; prompt "
                                    f"{item['id']} stays queued and is delivered when the turn ends",
                                    queued=item["id"])
        time.sleep(0.1)


def await_answer(brain: Brain, kernel_id: str, item_id: str, taken: dict, offset: int,
                 timeout: float) -> dict:
    """The agent's answer to the prompt it took (its Stop hook's last assistant text, or a headless
    run's result) as its `answered` event ({"text", "at", "session", "offset"}, or {"text", "result"}
    for a headless result). Raises NotTaken (exit 8) at once when the kernel dies or is killed, or when a hook
    consumed the prompt (no turn follows); BrainError when `timeout` passes."""
    k = kernels.load_kernel(brain, kernel_id)
    where = remote.elsewhere(brain, k)
    if where:
        return remote.call(brain, where, "await_answer", kernel_id, item_id, taken, offset, timeout,
                           wait_for=timeout + options.get(brain, "deliver_timeout"))
    rt = runtimes.get(k.runtime)
    sid, sha = taken.get("session"), taken.get("sha")
    deadline = time.monotonic() + timeout
    while True:
        start = offset
        events, offset = health.read_events(brain, kernel_id, offset)
        for e in events:
            kind = e.get("event")
            if kind == "answered" and e.get("session") == sid:
                return {**e, "offset": start}
            if kind == "consumed" and e.get("sha") == sha:
                raise runtimes.NotTaken(f"prompt {item_id} was consumed by a hook ({e.get('reason') or 'no turn'}); "
                                        "there is no answer")
            if kind in ("killed", "run-exit"):
                raise runtimes.NotTaken(f"kernel {kernel_id} stopped before answering prompt {item_id}: "
                                        f"{e.get('reason') or kind}")
        k = kernels.load_kernel(brain, kernel_id)
        state = runtimes.load_state(brain, kernel_id)
        if k.runtime == "headless" and not runtimes.pid_alive(state.get("pid")):
            answer = _headless_result(state)
            if answer is not None:
                return {"text": answer, "result": answer, "session": sid}
        if not k.live:
            raise runtimes.NotTaken(f"kernel {kernel_id} is {k.status} ({k.status_reason or 'no reason'}); "
                                    f"prompt {item_id} has no answer")
        live = rt.alive(brain, k, state)
        if not live.alive:
            raise runtimes.NotTaken(f"kernel {kernel_id} died before answering prompt {item_id} "
                                    f"({live.detail or 'process gone'})")
        if time.monotonic() >= deadline:
            raise BrainError(f"kernel {kernel_id} took prompt {item_id} but did not answer within {timeout:g}s")
        time.sleep(0.05)


def _headless_result(state: dict) -> str | None:
    import json
    try:
        lines = open(state.get("last_output") or "", encoding="utf-8").read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "result":
            return str(obj.get("result") or "")
    return None


def confirm_sent(brain: Brain, kernel_id: str) -> int:
    """Settle the prompts handed over earlier that the agent has taken since; returns how many."""
    sent = [x for x in queue.pending(brain, kernel_id) if "sent" in x]
    if not sent:
        return 0
    taken = [e for e in health.tail_events(brain, kernel_id) if e.get("event") == "taken"]
    n = 0
    for item in sent:
        sha = health.prompt_sha(item["prompt"])
        if any(e.get("sha") == sha and str(e.get("at", "")) >= item["sent"] for e in taken):
            queue.settle(brain, kernel_id, item["id"])
            n += 1
    return n


def drain_queue(brain: Brain, kernel_id: str) -> int:
    """Deliver what waits in an alive kernel's queue, oldest first (never a prompt already handed to
    the agent); returns how many were taken."""
    k = kernels.load_kernel(brain, kernel_id)
    n = 0
    if not ready(brain, k):
        return 0  # its session has not started: never type into what is on its screen
    with brain.mutex(f"deliver-{k.id}"):
        confirm_sent(brain, k.id)
        if any("sent" in x for x in queue.pending(brain, k.id)):
            return 0  # the agent has not taken an earlier one yet: keep the order
        for item in queue.unsent(brain, k.id):
            ev, _ = _deliver(brain, k, item, options.get(brain, "deliver_timeout"))
            if ev is None:
                break
            n += 1
    return n


# ---- readjust --------------------------------------------------------------------------------------

def kernel_readjust(brain: Brain, kernel_id: str, new_directive: str, *, by: str = "") -> kernels.Directive:
    """Append a directive (the hooks inject it at the session's next prompt) and publish it on
    nika:federation:directives for listeners."""
    from nika_brain import bus
    where = remote.elsewhere(brain, kernels.load_kernel(brain, kernel_id))
    if where:
        return remote.call(brain, where, "kernel_readjust", kernel_id, new_directive, by=by)
    check_live(brain, kernel_id, "read this directive")
    d = kernels.readjust(brain, kernel_id, new_directive, by=by)
    health.publish_or_warn(brain, bus.DIRECTIVES, kernels.directive_signal(kernel_id, d))
    return d


# ---- observe ---------------------------------------------------------------------------------------

def kernel_observe(brain: Brain, kernel_id: str, since: str | float = "1h",
                   query: str | None = None) -> dict:
    from nika_brain import bus
    from nika_brain.state import claims, sessions
    k = kernels.load_kernel(brain, kernel_id)
    where = remote.elsewhere(brain, k)
    if where:
        return remote.call(brain, where, "kernel_observe", kernel_id, since, query)
    seconds = since if isinstance(since, (int, float)) else kernels.parse_duration(since, "since")
    cutoff = clock.now() - timedelta(seconds=seconds)
    cut = clock.iso(cutoff)
    b = bus.open_bus(brain)
    health_msgs: list[dict] = []
    after = None
    for _ in range(200):  # at most 20,000 messages scanned
        batch = b.read(bus.HEALTH, after=after, count=100)
        if not batch:
            break
        after = batch[-1][0]
        health_msgs += [m for _, m in batch if m.get("kernel") == k.id and str(m.get("at", "")) >= cut]
    events, _ = health.read_events(brain, k.id)
    sess = [s for s in sessions.list_sessions(brain) if s.kernel == k.id]
    claim_ids = {s.claim for s in sess if s.claim}
    cl = [c for c in claims.list_claims(brain) if c.id in claim_ids or c.session in {s.id for s in sess}]
    out = {
        "kernel": kernels.to_dict(k), "runtime": {key: v for key, v in
                                                  runtimes.load_state(brain, k.id).items()},
        "metrics": health.metrics(brain, k.id), "last_heartbeat": health.last_heartbeat(brain, k.id),
        "heartbeats": [m for m in health_msgs if m.get("kind") == "heartbeat"][-100:],
        "health_events": [m for m in health_msgs if m.get("kind") != "heartbeat"],
        "events": [e for e in events if str(e.get("at", "")) >= cut][-200:],
        "directives": [d.__dict__ for d in kernels.list_directives(brain, k.id) if d.at >= cut],
        "sessions": [{"id": s.id, "started_at": s.started_at, "heartbeat_at": s.heartbeat_at,
                      "context_pct": s.context_pct, "ended_at": s.ended_at} for s in sess],
        "claims": [{"id": c.id, "status": c.status, "scope": list(c.scope),
                    "result": c.result.status if c.result else None} for c in cl],
        "signals": _signals(brain, k.id, {c.id for c in cl}, cut),
        "queue": queue.pending(brain, k.id), "since": cut,
    }
    if query:
        out["vault"] = _vault_query(brain, k.id, query)
    from nika_brain.federation import overview  # work stealing, handovers, spawn proposals
    out["federation"] = overview.observe(brain, k.id)
    return out


def _signals(brain: Brain, kernel_id: str, claim_ids: set[str], cut: str) -> list[dict]:
    """BSI signals (journal/signals.jsonl) of the kernel's claims, or naming the kernel, since `cut`."""
    from nika_brain.engine import signals
    out = []
    for rec in signals.read(brain):
        payload = rec.get("payload")
        payload = payload if isinstance(payload, dict) else {}
        if str(rec.get("time", "")) >= cut and (rec.get("claim") in claim_ids or
                                                 payload.get("kernel") == kernel_id):
            out.append(rec)
    return out[-200:]


def _vault_query(brain: Brain, kernel_id: str, text: str, k: int = 5) -> Any:
    """The shared vault's records of this kernel nearest to `text` (issue 13), read as that kernel."""
    import dataclasses

    from nika_brain.federation.vault.query import search  # lazily: chromadb, the embedder
    return [dataclasses.asdict(rec) for rec in search(brain, text, kernel=kernel_id, k=k)]


# ---- kill ------------------------------------------------------------------------------------------

def release_held(brain: Brain, kernel_id: str, reason: str) -> dict:
    """Release what a kernel held: its sessions' open claims are closed failed (with the reason, so
    the orchestrator re-queues the step), their locks and the kernel's own are released (and the
    Redis leases with them)."""
    from nika_brain.federation.kernels import leases
    from nika_brain.state import claims, locks, sessions
    owners = {kernel_id}
    closed = []
    sess = [s for s in sessions.list_sessions(brain) if s.kernel == kernel_id]
    sids = {s.id for s in sess}
    for c in claims.list_claims(brain):
        if c.is_open and (c.id in {s.claim for s in sess} or c.session in sids):
            try:
                claims.close_claim(brain, c.id, "failed", f"kernel {kernel_id}: {reason}")
                closed.append(c.id)
            except BrainError:
                pass
            owners.add(c.id)
    released = []
    for owner in sorted(owners):
        scopes = locks.release_all(brain, owner)
        released += scopes
        leases.release_owner(brain, owner)
    for s in sess:
        if not s.ended_at:
            try:
                sessions.end(brain, s.id, reason=f"kernel {reason}")
            except BrainError:
                pass
    return {"claims_failed": closed, "locks_released": released}


def kernel_kill(brain: Brain, kernel_id: str, reason: str, *, by: str = "") -> dict:
    """Stop the kernel (asked to exit, then signals), keep its folder and history, mark it killed,
    remove its goal (published), release its locks and fail its open claims with the reason."""
    if not isinstance(reason, str) or not reason.strip():
        raise BrainError("kill needs a reason (--reason)")
    where = remote.elsewhere(brain, kernels.load_kernel(brain, kernel_id))
    if where:
        return remote.call(brain, where, "kernel_kill", kernel_id, reason, by=by)
    with lifecycle(brain, kernels.check_id(kernel_id)):
        return _kill(brain, kernel_id, reason, by)


def _kill(brain: Brain, kernel_id: str, reason: str, by: str) -> dict:
    k = kernels.load_kernel(brain, kernel_id)
    if k.status == "killed":
        raise BrainError(f"kernel {k.id} is already killed ({k.status_reason})")
    started = time.monotonic()
    how = _stop(brain, k)
    why = reason.strip() + (f" (by {by})" if by else "")
    k = kernels.set_status(brain, k.id, "killed", reason=why)
    health.record_event(brain, k.id, "killed", reason=why, how=how)
    held = release_held(brain, k.id, f"killed: {reason.strip()}")
    limits.remove_groups(limits.group_name(brain.root, k.id), options.get(brain, "cgroup_root"))
    health.publish_event(brain, k.id, "killed", reason=why)
    _publish_goals(brain, "removed", k)
    reindex(brain)
    return {"kernel": k.id, "status": k.status, "how": how,
            "seconds": round(time.monotonic() - started, 3), **held}


def _stop(brain: Brain, k: Kernel) -> str | None:
    """Stop what runs of the kernel; returns the step that ended it (asked, sigterm, sigkill, gone)."""
    state = runtimes.load_state(brain, k.id)
    try:
        how = runtimes.get(k.runtime).stop(brain, k, state, options.get(brain, "kill_grace"))
    except BrainError:
        if k.live:
            raise
        how = None
    if how:
        health.record_event(brain, k.id, "stopped", how=how)
    return how


# ---- start, restart, env -----------------------------------------------------------------------

def kernel_start(brain: Brain, kernel_id: str, *, by: str = "") -> Kernel:
    """Start a dead, killed or failed kernel again: same id, folder, memory, queue and history. Its
    goal is registered again; prompts queued meanwhile are delivered once its session has started."""
    with lifecycle(brain, kernels.check_id(kernel_id)):
        k = kernels.load_kernel(brain, kernel_id)
        if k.status == "handed-over":
            raise BrainError(f"kernel {k.id} was handed over ({k.status_reason}); its successor does its work")
        if k.live and runtimes.get(k.runtime).alive(brain, k, runtimes.load_state(brain, k.id)).alive:
            raise BrainError(f"kernel {k.id} is running already (nika-brain kernel restart {k.id})")
        return _start_again(brain, k, f"started by {by}" if by else "started")


def kernel_restart(brain: Brain, kernel_id: str, *, by: str = "") -> Kernel:
    """Stop the kernel's agent (asked, then signals) and start it again (same id, history kept)."""
    with lifecycle(brain, kernels.check_id(kernel_id)):
        k = kernels.load_kernel(brain, kernel_id)
        if k.status == "handed-over":
            raise BrainError(f"kernel {k.id} was handed over ({k.status_reason}); its successor does its work")
        if k.live:
            _stop(brain, k)
        return _start_again(brain, k, f"restarted by {by}" if by else "restarted")


def lifecycle(brain: Brain, kernel_id: str):
    """The mutex one kernel's stop and start hold (kill, start, restart, the supervisor's dead-or-
    restart): a process the operator is stopping is not found dead and restarted by the supervisor
    meanwhile. Not reentrant (flock): nothing that holds it calls another holder."""
    return brain.mutex(f"lifecycle-{kernel_id}")


def _start_again(brain: Brain, k: Kernel, why: str) -> Kernel:
    runtimes.require(brain, k.runtime)
    if runtimes.state_path(brain, k.id).exists():
        _undo_start(brain, k)  # a pane kept for its exit status, a cgroup left behind
    k = kernels.set_status(brain, k.id, "starting", reason=why)
    try:
        k = _start(brain, k)
    except (BrainError, OSError) as exc:
        _undo_start(brain, k)
        kernels.set_status(brain, k.id, "failed", reason=f"start failed: {exc}")
        reindex(brain)
        raise BrainError(f"kernel {k.id}: start failed: {exc}") from exc
    health.record_event(brain, k.id, "started", reason=why)
    _publish_goals(brain, "spawned", k)
    reindex(brain)
    from nika_brain.federation.kernels import watchdog
    watchdog.ensure_running(brain)
    return k


def kernel_env(brain: Brain, kernel_id: str, key: str, value: str | None) -> dict:
    """Set (value) or unset (None) one variable of the kernel's credentials file; applies at its
    next start. Returns {"key", "set": bool, "restart": whether the kernel runs (needs a restart)}."""
    k = kernels.load_kernel(brain, kernel_id)
    credentials.check_key(key)
    if value is not None and ("\n" in value or "\0" in value):
        raise BrainError("a value is one line")
    folder = kernels.kernel_dir(brain, k.id)
    with brain.mutex(f"credentials-{k.id}"):
        values = credentials.load(folder)
        if value is None:
            if key not in values:
                raise BrainError(f"kernel {k.id} has no {key} in its credentials")
            values.pop(key)
        else:
            values[key] = value
        credentials.write(folder, values)
    return {"key": key, "set": value is not None, "restart": k.live}
