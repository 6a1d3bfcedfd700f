"""`nika-brain hook <Event>`: the Claude Code hook entry point.

Claude Code spawns this process on every matching event with one JSON object on stdin
(docs/ARCHITECTURE.md). We answer in the documented shape: nothing on stdout but one JSON
object, event-specific keys inside `hookSpecificOutput`, exit 0; exit 1 with one line on stderr
when the hook could not do its job (a non-blocking error: Claude's turn goes on). We never use exit
2: a deny is a JSON `permissionDecision: "deny"` with a reason Claude can act on.

Fail closed or open:
- PreToolUse on a write (Edit/Write/MultiEdit/NotebookEdit) or a Bash command FAILS CLOSED when a
  fact needed to judge it cannot be read: an unparseable lock file, claim, session record, zones
  file, kernel.yml or agent card, a NIKA_BRAIN_DIR that is not a brain, or an unexpected error in
  the check itself. The deny names what is broken, so the operator can fix it and the agent can
  report BLOCKED_ON instead of writing unchecked.
- PreToolUse on a read, and every other event (context injection, touched files, heartbeats,
  session end), FAILS OPEN: a bookkeeping failure must not stop an agent's work. They report on
  stderr and exit 1.
- Input we cannot use (empty, truncated or non-JSON stdin, an unknown event name) fails open with
  exit 1: there is no identifiable tool call to protect, and denying blind would stall every session.
- No brain found and none announced (no NIKA_BRAIN_DIR): the session is outside any brain and
  nothing applies; exit 0, silently.

Handlers sit in a dispatch table, `HANDLERS[event] -> [handler, ...]`; `register()` adds one (the
federation layer adds handover and spawn behaviour this way). Every handler gets the same `Hook`
and may return a `Reply`, or a dict of Reply's fields (handlers in lower layers, which may not import
this module); replies merge (a deny wins, contexts add up).

The module imports only the standard library at load time; each handler imports the core modules it
needs, so a Read pays for less than an Edit.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any, Callable, NamedTuple

EVENTS = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart", "Stop", "PreCompact",
          "SessionEnd")
# Real Claude Code events we have nothing to say about (yet): accepted and answered with silence.
PASSIVE_EVENTS = ("Notification", "SubagentStart", "SubagentStop", "PermissionRequest",
                  "PostToolUseFailure")
_CANONICAL = {e.lower(): e for e in EVENTS + PASSIVE_EVENTS}
MAX_STDIN = 64 << 20          # a Write of a large file carries its whole content
CONTEXT_CAP = 10_000          # Claude Code truncates additionalContext beyond this
_CONTEXT_EVENTS = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart")
_BLOCK_EVENTS = ("PostToolUse", "UserPromptSubmit", "Stop", "SubagentStop", "PreCompact")


def canonical(name: str) -> str | None:
    """'pre-tool-use', 'pre_tool_use', 'PreToolUse' -> 'PreToolUse'; None when unknown."""
    return _CANONICAL.get(name.replace("-", "").replace("_", "").lower()) if name else None


class Reply(NamedTuple):  # a NamedTuple: a frozen dataclass costs ~0.7 ms to create at import
    deny: str | None = None       # PreToolUse: deny with this reason
    context: str | None = None    # additionalContext for Claude
    block: str | None = None      # decision "block" with this reason (Stop, PreCompact, ...)
    message: str | None = None    # systemMessage shown to the user
    stop: str | None = None       # `continue: false` with this stopReason: the session stops
    ask: str | None = None        # PreToolUse: Claude Code asks the human, with this reason


class Hook:
    """One event being handled: its input, and the brain and binding, looked up once, lazily."""

    def __init__(self, event: str, data: dict[str, Any]):
        self.event = event
        self.data = data
        sid = data.get("session_id") or os.environ.get("CLAUDE_CODE_SESSION_ID")
        self.session_id: str | None = sid if isinstance(sid, str) and sid else None
        cwd = data.get("cwd")
        self.cwd: str = cwd if isinstance(cwd, str) and cwd else os.getcwd()
        self._brain: Any = None
        self._brain_error: str | None = None
        self._looked = False
        self._record: Any = None
        self._record_error: str | None = None
        self._record_loaded = False

    # -- brain ---------------------------------------------------------------------------------
    def _find(self) -> None:
        from nika_brain.brain import Brain
        from nika_brain.errors import BrainError, NoBrain
        self._looked = True
        env = os.environ.get("NIKA_BRAIN_DIR")
        try:
            if env:
                self._brain = Brain.find()
                return
            for start in (self.cwd, os.environ.get("CLAUDE_PROJECT_DIR")):
                if start:
                    try:
                        self._brain = Brain.find(start)
                        return
                    except NoBrain:
                        continue  # nothing here; a brain that is there but broken raises on
        except (BrainError, OSError) as exc:
            self._brain_error = f"NIKA_BRAIN_DIR={env}: {exc}" if env else str(exc)

    @property
    def brain(self) -> Any:
        if not self._looked:
            self._find()
        return self._brain

    @property
    def brain_error(self) -> str | None:
        """Why the brain announced for this session (or found but broken) cannot be used."""
        if not self._looked:
            self._find()
        return self._brain_error

    # -- who this session is -------------------------------------------------------------------
    @property
    def record(self) -> Any:
        """The session's record (sessions.Session) or None; a broken one sets record_error."""
        if not self._record_loaded:
            self._record_loaded = True
            from nika_brain.errors import BrainError
            from nika_brain.state import sessions
            if self.brain is not None and sessions.valid_id(self.session_id):
                try:
                    self._record = sessions.load(self.brain, self.session_id)
                except BrainError as exc:
                    self._record_error = str(exc)
        return self._record

    @property
    def record_error(self) -> str | None:
        return self._record_error if self.record is None else None

    def kernel_from_cwd(self) -> str | None:
        if self.brain is None:
            return None
        rel = self.brain.rel(os.path.realpath(self.cwd)) or ""
        seg = rel.split("/")
        return seg[1] if len(seg) >= 2 and seg[0] == "kernels" and seg[1] else None

    def kernel(self) -> str | None:
        rec = self.record
        return ((rec.kernel if rec else None) or os.environ.get("NIKA_KERNEL_ID")
                or self.kernel_from_cwd())

    def claim(self) -> str | None:
        rec = self.record
        return (rec.claim if rec else None) or os.environ.get("NIKA_CLAIM") or None


Handler = Callable[[Hook], "Reply | None"]


def _say(text: str) -> None:
    sys.stderr.write(f"nika-brain hook: {text}\n")


# ---- PreToolUse -------------------------------------------------------------------------------

def _locator(brain: Any) -> Callable[[str], Any]:
    """Map an absolute path to (real path, brain-logical path). A path in a linked worktree of the
    brain (a theme branch checkout) is judged as the same path in the brain."""
    from nika_brain.claude.policy import Target
    if brain is None:
        return lambda path: Target(os.path.realpath(path), None)
    root = str(brain.root)
    gitdir = os.path.join(root, ".git") + os.sep

    def is_worktree(folder: str) -> bool:
        try:
            with open(os.path.join(folder, ".git"), encoding="utf-8") as fh:
                line = fh.read(4096).strip()
        except OSError:
            return False
        if not line.startswith("gitdir:"):
            return False
        target = os.path.normpath(os.path.join(folder, line[7:].strip()))
        return os.path.realpath(target).startswith(gitdir)

    def locate(path: str) -> Target:
        real = os.path.realpath(path)
        folder = real
        try:  # one stat: a regular file's link count (a hard link to a state file is refused)
            st = os.stat(real)
            links = st.st_nlink if stat.S_ISREG(st.st_mode) else 1
        except OSError:
            links = 1
        while True:
            if folder == root:
                return Target(real, os.path.relpath(real, root).replace(os.sep, "/"), links)
            if os.path.isfile(os.path.join(folder, "nika-brain.yml")) and is_worktree(folder):
                return Target(real, os.path.relpath(real, folder).replace(os.sep, "/"), links)
            parent = os.path.dirname(folder)
            if parent == folder:
                return Target(real, None)
            folder = parent

    return locate


def _facts(hook: Hook, kind: str) -> Any:
    """Everything policy.decide needs; a write also gets locks, scope and zones, each read once."""
    from nika_brain.claude.policy import Facts
    from nika_brain.errors import BrainError
    from nika_brain.support import clock
    brain = hook.brain
    locate = _locator(brain)
    opdir = _operator_dir()
    if brain is None:
        return Facts(locate=locate, operator_dir=opdir)
    kernel, claim_id = hook.kernel(), hook.claim()
    rec = hook.record
    lineage = rec.lineage if rec else ()
    if kind != "write":
        # A shell command that writes inside the brain gets the write facts when it needs them.
        return Facts(locate=locate, kernel=kernel, lineage=lineage, operator_dir=opdir,
                     claim=claim_id, expand=lambda: _facts(hook, "write"))

    from nika_brain.state import claims, locks
    problems: list[str] = []
    if hook.record_error:
        problems.append(f"session record: {hook.record_error}")
    # $NIKA_CLAIM narrows (the claim's scope), never widens: the claim's own locks are this session's
    # only when its door says so (the session nika-brain started for the claim); a session started by
    # hand meets them as anyone's.
    owners = {x for x in (kernel, hook.session_id) if x}
    if claim_id:
        from nika_brain.bus import door
        if door.session_claim() == claim_id:   # None at once without a door ($NIKA_DOOR unset)
            owners.add(claim_id)
    scope, claim = None, None
    if claim_id:
        try:
            claim = claims.load_claim(brain, claim_id)
            scope = claim.scope if claim.is_open else None
        except BrainError as exc:
            problems.append(f"claim {claim_id}: {exc}")
    try:
        lock_list = locks.LockView(brain)  # per-path lookups by lock file name
    except BrainError as exc:
        problems.append(f"lock file {exc}")
        lock_list = ()
    from nika_brain.state import leasemirror  # other machines' locks (Redis leases), mirrored locally
    lock_list = leasemirror.view(brain, lock_list, problems)
    zone_list: tuple = ()
    card, access = None, ()
    if brain.kernel_md.is_file():
        from nika_brain.state.zones import load_zones
        try:
            zone_list = tuple(load_zones(brain))
        except BrainError as exc:
            problems.append(f"zones: {exc}")
    if zone_list and (kernel or claim_id):
        # The kernel's card governs a kernel session; a bare satellite follows its claim's agent.
        from nika_brain.state.agents import load_card
        try:
            if kernel:
                from nika_brain.state.kernels import load_kernel
                card = load_kernel(brain, kernel).card
            else:
                card = (claim.agent if claim else None) or brain.config.default_agent
            access = load_card(brain, card).zone_access
        except BrainError as exc:
            problems.append(f"agent card{' ' + card if card else ''}: {exc}")
    return Facts(locate=locate, kernel=kernel, claim=claim_id if scope is not None else None,
                 scope=scope, owners=frozenset(owners), locks=lock_list, zones=zone_list,
                 card=card, zone_access=tuple(access), lineage=lineage, problems=tuple(problems),
                 now=clock.now(), operator_dir=opdir)


def _operator_dir() -> str:
    """The operator's config folder (its signing key), resolved: no agent call may touch it."""
    from nika_brain.state.operator_home import operator_dir
    return os.path.realpath(str(operator_dir()))


def _doctrine(hook: Hook, tool: str, tool_input: dict) -> Reply | None:
    """What the kernel's doctrine says of this call (kernels/doctrine.py): deny, ask, or nothing."""
    kernel_id = os.environ.get("NIKA_KERNEL_ID") or hook.kernel_from_cwd()
    if not kernel_id or hook.brain is None:
        return None
    from nika_brain.errors import BrainError
    from nika_brain.federation.kernels import doctrine
    from nika_brain.state import kernels
    try:
        doc = doctrine.for_hook(hook.brain, kernel_id)
        if doc is None or not doc.enforced:
            return None
        kernel = kernels.load_kernel(hook.brain, kernel_id)
    except (BrainError, OSError) as exc:
        return Reply(deny=f"kernel {kernel_id}'s doctrine cannot be read ({exc}); refused until it can")
    got = doctrine.check(doc, tool, tool_input, hook.cwd, hook.brain, kernel)
    if got is None:
        return None
    return Reply(deny=got[1]) if got[0] == "deny" else Reply(ask=got[1])


def on_pre_tool_use(hook: Hook) -> Reply | None:
    from nika_brain.claude.policy import decide, kind_of
    tool, tool_input = hook.data.get("tool_name"), hook.data.get("tool_input")
    if not isinstance(tool, str) or not isinstance(tool_input, dict):
        return None
    kind = kind_of(tool)
    if kind == "other":
        return _doctrine(hook, tool, tool_input)
    try:
        if hook.brain is None and hook.brain_error and kind in ("write", "bash"):
            return Reply(deny=f"nika-brain cannot check this call: {hook.brain_error}. Refused until "
                              "the brain is readable; report BLOCKED_ON.")
        reason = decide(tool, tool_input, hook.cwd, _facts(hook, kind))
    except Exception as exc:  # a bug or an unreadable file we did not foresee
        if kind == "read":
            raise
        return Reply(deny=f"nika-brain could not check this {tool} call ({type(exc).__name__}: {exc}); "
                          "refused to stay safe. Report BLOCKED_ON to the orchestrator.")
    if reason:
        return Reply(deny=reason)
    return _doctrine(hook, tool, tool_input)   # after the policy: a doctrine only adds refusals


# ---- SessionStart / UserPromptSubmit: what the session must know ---------------------------

def _directives_text(hook: Hook, kernel: str, *, everything: bool = False) -> str | None:
    """Directives the session has not seen; all of them when its context was just wiped."""
    from nika_brain.state.kernels import list_directives, mark_seen, unseen_directives
    if not hook.session_id:
        return None
    new = (list_directives(hook.brain, kernel) if everything
           else unseen_directives(hook.brain, kernel, hook.session_id))
    if not new:
        return None
    mark_seen(hook.brain, hook.session_id, new)
    lines = [f"Directives for kernel {kernel} (readjust; they amend your instructions, newest last):"]
    lines += [f"- [{d.at} by {d.by or '?'}] {d.text}" for d in new]
    return "\n".join(lines)


def _through_door(op: str, **args: Any) -> bool:
    """A satellite's claim bookkeeping goes through its door (claims/ is read-only in its wall:
    claude/bwrap.satellite_wall); False when this session has none (the write is then made here)."""
    from nika_brain.bus import door
    via = door.claim_door()
    if not via:
        return False
    door.call(op, via, **args)
    return True


def door_session() -> bool:
    """Whether nika-brain started this session with a claim's door (`claude start`, a satellite): the
    door itself proves who asks, this only chooses what the session is told."""
    from nika_brain.bus import door
    return door.claim_door() is not None


def hand_started(claim_id: str) -> str:
    """What a session started without the claim's door (`NIKA_CLAIM=<claim> claude`) is told: it reads,
    its hooks keep their bookkeeping, and it acts as no claim."""
    return (f"This session was not started by nika-brain for claim {claim_id}: it acts as no claim (its lock "
            "changes, its claim close and writes under the claim's locks are refused; reading is not). "
            f"To work as the claim, the operator runs `nika-brain claude start {claim_id}`.")


def _export_env(brain: Any, kernel: str | None, claim: str | None) -> None:
    """Let the session's Bash commands (nika-brain itself) know who they run for."""
    import shlex
    path = os.environ.get("CLAUDE_ENV_FILE")
    if not path:
        return
    pairs = [("NIKA_BRAIN_DIR", str(brain.root)), ("NIKA_KERNEL_ID", kernel), ("NIKA_CLAIM", claim)]
    text = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in pairs if v)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


BRIEF_CAP = 6000  # leaves room for goal, lineage and directives under Claude Code's 10,000 cap


def _brief(brain: Any, claim: Any) -> str:
    """The brief the orchestrator wrote for the claim (.nika/briefs/<id>.md), else its story angle."""
    try:
        text = (brain.state_dir / "briefs" / f"{claim.id}.md").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeError):
        text = ""
    if not text:
        return f"Brief: {claim.story_angle or '(none given)'}"
    if len(text) > BRIEF_CAP:
        text = text[:BRIEF_CAP] + f"\n[... cut; the whole brief is .nika/briefs/{claim.id}.md]"
    return "Brief:\n" + text


def _doctrine_brief(brain: Any, kernel: Any) -> list[str]:
    """The kernel's doctrine as its session is told it at start: its text and what the hooks enforce."""
    from nika_brain.federation.kernels import doctrine
    doc = doctrine.for_hook(brain, kernel.id)
    if doc is None or not (doc.text or doc.enforced):
        return []
    head = f"Your doctrine ({', '.join(doc.sources)}):"
    lines = [head, doc.text] if doc.text else [head]
    lines.append(f"Enforced by nika-brain's hooks: {doc.policy_line()}.")
    return ["\n".join(lines)]


def on_session_start(hook: Hook) -> Reply | None:
    from nika_brain.errors import BrainError
    from nika_brain.state import kernels, sessions
    brain = hook.brain
    if brain is None:
        return None
    kernel_id = os.environ.get("NIKA_KERNEL_ID") or hook.kernel_from_cwd()
    claim_id = os.environ.get("NIKA_CLAIM") or None
    parts: list[str] = []
    kernel = None
    if not kernel_id and hook.record:
        kernel_id = hook.record.kernel
    if kernel_id:
        try:
            kernel = kernels.load_kernel(brain, kernel_id)
        except BrainError as exc:
            parts.append(f"Kernel {kernel_id}: its kernel.yml cannot be read ({exc}).")
    chain = kernels.lineage(brain, kernel) if kernel else []
    if sessions.valid_id(hook.session_id):
        source = hook.data.get("source")
        tpath = hook.data.get("transcript_path")
        rec = sessions.bind(brain, hook.session_id, kernel=kernel_id, claim=claim_id,
                            source=source if isinstance(source, str) else None, cwd=hook.cwd,
                            transcript_path=tpath if isinstance(tpath, str) else None,
                            lineage=[k.id for k in chain] if kernel else None)
        kernel_id, claim_id = rec.kernel, rec.claim
    if kernel:
        tags = f" (tags: {', '.join(kernel.tags)})" if kernel.tags else ""
        parts.append(f"You are kernel {kernel.id}. Goal: {kernel.goal}{tags}. Work only toward this "
                     f"goal; your folder is kernels/{kernel.id}/, other kernels' folders are off limits.")
    if kernel:
        parts += _doctrine_brief(brain, kernel)
    if chain:
        names = " <- ".join(k.id for k in chain)
        parts.append(f"You are the successor of {names} after a handover (nearest first); you may "
                     f"read {'their' if len(chain) > 1 else 'its'} memory under kernels/<id>/memory/ "
                     "to pick up the work, not write there.")
    if kernel_id and kernel:
        # Before the brief, so the 10,000-character cap never cuts a directive. After /clear or a
        # compaction the earlier directives may be gone from the context: all of them again.
        text = _directives_text(hook, kernel_id,
                                everything=hook.data.get("source") in ("clear", "compact"))
        if text:
            parts.append(text)
    if claim_id:
        try:
            from nika_brain.state.claims import load_claim, update_open
            c = load_claim(brain, claim_id)
            if c.is_open:
                if c.session != hook.session_id and hook.session_id:
                    if not _through_door("claim_session", session=hook.session_id):
                        update_open(brain, c.id, session=hook.session_id)
                zone = f", zone {c.zone}" if c.zone else ""
                parts.append(f"Your claim: {c.id} (workflow {c.workflow}, step {c.step}, "
                             f"{c.satellite_type}{zone}). Scope: {', '.join(c.scope)}; edits outside it "
                             f"are refused. Close it with `nika-brain claim close {c.id} --status "
                             "ok|partial|failed --summary ...`.")
                parts.append(_brief(brain, c))
            else:
                parts.append(f"Claim {c.id} is closed ({c.result.status if c.result else '?'}); do not "
                             "continue its step.")
        except BrainError as exc:
            parts.append(f"Claim {claim_id} cannot be read ({exc}); report BLOCKED_ON.")
    if claim_id and not door_session():
        parts.append(hand_started(claim_id))
    _export_env(brain, kernel_id, claim_id)
    if not parts:
        return None
    return Reply(context="nika-brain:\n" + "\n\n".join(parts))


def on_user_prompt_submit(hook: Hook) -> Reply | None:
    """Directives sent with readjust while the session runs reach it at its next prompt."""
    if hook.brain is None:
        return None
    kernel = hook.kernel()
    if not kernel:
        return None
    if not os.path.exists(os.path.join(hook.brain.kernels_dir, kernel, "directives.jsonl")):
        return None   # never readjusted: no need to load the kernels' state module (each prompt pays it)
    text = _directives_text(hook, kernel)
    return Reply(context=text) if text else None


# ---- bookkeeping: touched files, context use, end --------------------------------------------

def on_post_tool_use(hook: Hook) -> Reply | None:
    from nika_brain.claude.policy import WRITE_TOOLS, canonical_tool
    from nika_brain.errors import BrainError
    from nika_brain.state import sessions
    tool, tool_input = canonical_tool(hook.data.get("tool_name") or ""), hook.data.get("tool_input")
    if hook.brain is None or tool not in WRITE_TOOLS or not isinstance(tool_input, dict):
        return None
    raw = tool_input.get(WRITE_TOOLS[tool])
    if not isinstance(raw, str) or not raw or not sessions.valid_id(hook.session_id):
        return None
    rel = _locator(hook.brain)(os.path.join(hook.cwd, raw)).rel
    if rel is None:
        return None
    new = sessions.add_touched(hook.brain, hook.session_id, [rel])
    claim = hook.claim()
    if new and claim:
        from nika_brain.state.claims import load_claim, record_touched
        try:
            if load_claim(hook.brain, claim).is_open and not _through_door("claim_touched", paths=list(new)):
                record_touched(hook.brain, claim, new)   # a closed claim is final
        except BrainError as exc:
            _say(f"touched files not recorded on claim {claim}: {exc}")
    return None


STOP_TRANSCRIPT_WAIT = 3.0   # seconds a Stop hook waits for the turn's response in the transcript


def on_context_checkpoint(hook: Hook) -> Reply | None:
    """Stop and PreCompact: measure the context use from the transcript, record a heartbeat."""
    from nika_brain.claude import transcript
    from nika_brain.state import sessions
    if hook.brain is None or not sessions.valid_id(hook.session_id):
        return None
    tpath = hook.data.get("transcript_path")
    tpath = tpath if isinstance(tpath, str) else None
    if hook.event == "Stop" and tpath and os.path.isfile(tpath):   # no file: nothing to wait for
        # the turn's last response may reach the transcript just after Stop fires: its usage is the
        # context now (read before, the previous turn's is, and a handover threshold is missed)
        import time
        deadline = time.monotonic() + STOP_TRANSCRIPT_WAIT
        while not transcript.answered(tpath) and time.monotonic() < deadline:
            time.sleep(0.05)
    window, source = sessions.choose_window(hook.brain, hook.record, hook.kernel())
    usage = transcript.last_usage(tpath, window)
    sessions.heartbeat(hook.brain, hook.session_id, used=usage.used if usage else None,
                       window=usage.window if usage else None, pct=usage.pct if usage else None,
                       event=hook.event, window_source=source)
    return None


def on_session_end(hook: Hook) -> Reply | None:
    from nika_brain.state import sessions
    if hook.brain is None or not sessions.valid_id(hook.session_id):
        return None
    reason = hook.data.get("reason")
    sessions.end(hook.brain, hook.session_id, reason=reason if isinstance(reason, str) else None)
    return None


# A handler is a function, or "module:function" imported only when its event fires: the federation
# layer adds e.g. "nika_brain.federation.lineage.handover:on_stop" to "Stop" without PreToolUse paying for
# importing it.
HANDLERS: dict[str, list[Handler | str]] = {
    "PreToolUse": [on_pre_tool_use],
    "PostToolUse": [on_post_tool_use],
    # federation.health:on_hook records the agent's own acknowledgements (session, prompt taken, turn
    # answered) and publishes the kernel's heartbeat; it does nothing outside a kernel's session.
    # federation.hint flags a prompt typed into the wrong kernel (triage).
    # federation.handover: auto-handover past the kernel's context threshold (Stop, PreCompact), a
    # handed-over session refusing prompts, and the successor's lineage and summary at SessionStart;
    # federation.triggers: `/kernel new <goal>` typed in a session writes a spawn proposal.
    # federation.hint's prefetch comes first: the daemon computes the hint while the others run.
    "UserPromptSubmit": ["nika_brain.federation.triage.hint:prefetch", on_user_prompt_submit,
                         "nika_brain.federation.kernels.health:on_hook",
                         "nika_brain.federation.triage.hint:on_user_prompt_submit",
                         "nika_brain.federation.lineage.handover:on_prompt",
                         "nika_brain.federation.spawning.triggers:on_prompt"],
    "SessionStart": [on_session_start, "nika_brain.federation.kernels.health:on_hook",
                     "nika_brain.federation.lineage.handover:on_session_start"],
    "Stop": [on_context_checkpoint, "nika_brain.federation.kernels.health:on_hook",
             "nika_brain.federation.lineage.handover:on_checkpoint"],
    "PreCompact": [on_context_checkpoint, "nika_brain.federation.lineage.handover:on_checkpoint"],
    "SessionEnd": [on_session_end],
}


def register(event: str, handler: Handler | str) -> None:
    """Add a handler (a function or "module:function") for an event, after the built-in ones."""
    name = canonical(event)
    if name is None:
        raise ValueError(f"unknown Claude Code hook event {event!r}")
    HANDLERS.setdefault(name, []).append(handler)


# ---- protocol ---------------------------------------------------------------------------------

def output(event: str, replies: list[Reply]) -> dict[str, Any] | None:
    """The JSON answer for `event` from the handlers' replies; None means say nothing."""
    out: dict[str, Any] = {}
    specific: dict[str, Any] = {}
    deny = next((r.deny for r in replies if r.deny), None)
    ask = next((r.ask for r in replies if r.ask), None)
    if deny and event == "PreToolUse":
        specific["permissionDecision"] = "deny"
        specific["permissionDecisionReason"] = deny
    elif ask and event == "PreToolUse":
        specific["permissionDecision"] = "ask"
        specific["permissionDecisionReason"] = ask
    context = "\n\n".join(r.context for r in replies if r.context)
    if context and event in _CONTEXT_EVENTS:
        if len(context) > CONTEXT_CAP:
            context = context[:CONTEXT_CAP - 20] + "\n[...truncated]"
        specific["additionalContext"] = context
    block = next((r.block for r in replies if r.block), None)
    if block and event in _BLOCK_EVENTS:
        out["decision"], out["reason"] = "block", block
    stop = next((r.stop for r in replies if r.stop), None)
    if stop:
        out["continue"], out["stopReason"] = False, stop
    messages = [r.message for r in replies if r.message]
    if messages:
        out["systemMessage"] = "\n".join(messages)
    if specific:
        out["hookSpecificOutput"] = {"hookEventName": event, **specific}
    return out or None


def _read_stdin() -> Any:
    stream = sys.stdin
    if stream is None or stream.isatty():
        raise ValueError("no event on stdin (Claude Code pipes one JSON object)")
    data = stream.buffer.read(MAX_STDIN + 1)
    if len(data) > MAX_STDIN:
        raise ValueError(f"stdin larger than {MAX_STDIN} bytes")
    if not data.strip():
        raise ValueError("empty stdin: expected the event JSON")
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"stdin is not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ValueError("stdin JSON is not an object")
    return obj


def run(argv: list[str], data: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
    """Handle one event already read; return (exit code, JSON answer or None)."""
    named = canonical(argv[0]) if argv else None
    if argv and named is None:
        _say(f"unknown event {argv[0]!r}; known: {', '.join(EVENTS)}")
        return 1, None
    stated = data.get("hook_event_name")
    # The input names the real event; the command line only says which hook entry this was.
    event = canonical(stated) if isinstance(stated, str) and canonical(stated) else named
    if event is None:
        _say("no event name on the command line or in the input")
        return 1, None
    hook = Hook(event, data)
    replies: list[Reply] = []
    code = 0
    for entry in HANDLERS.get(event, []):
        handler = entry
        try:
            if isinstance(entry, str):
                import importlib
                module, _, name = entry.partition(":")
                handler = getattr(importlib.import_module(module), name)
            reply = handler(hook)
            # Handlers below the hooks layer cannot import Reply: they answer with its fields, as a
            # dict or a NamedTuple shaped like it.
            if isinstance(reply, dict):
                reply = Reply(**reply)
            elif reply is not None and not isinstance(reply, Reply) and hasattr(reply, "_asdict"):
                reply = Reply(**reply._asdict())
        except Exception as exc:  # fail open: bookkeeping must never stop the agent
            _say(f"{event}: {getattr(handler, '__name__', handler)} failed: {type(exc).__name__}: {exc}")
            code = 1
            continue
        if reply is not None:
            replies.append(reply)
    if hook.brain_error and not replies:
        _say(hook.brain_error)
        code = 1
    answer = output(event, replies)
    if answer is not None:
        code = 0  # Claude Code reads the JSON only from a successful exit
    return code, answer


def main(argv: list[str]) -> int:
    """Entry of `nika-brain hook <Event>`: read stdin, answer, never raise."""
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # a stray print anywhere must not land before our JSON
    code, answer = 1, None
    try:
        if argv and canonical(argv[0]) is None:
            _say(f"unknown event {argv[0]!r}; known: {', '.join(EVENTS)}")
            return 1
        try:
            data = _read_stdin()
        except (ValueError, OSError) as exc:
            _say(str(exc))
            return 1
        code, answer = run(list(argv), data)
    except Exception as exc:  # last resort: never a traceback in Claude's turn
        _say(f"internal error: {type(exc).__name__}: {exc}")
        code, answer = 1, None
    finally:
        sys.stdout = real_stdout
    if answer is not None:
        real_stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
        real_stdout.flush()
    return code
