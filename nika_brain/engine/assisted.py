"""An assisted step's session, started the way nika-brain starts a satellite: `nika-brain claude start
[CLAIM]` (cli/claude.py).

`start_session` opens the claim's door (engine/claimdoors: the satellites' door process, told `open
CLAIM PID` with this command's own pid, so the door serves its process tree), runs the real `claude`
in the claim's theme worktree with `$NIKA_DOOR` and the satellite's settings (`locks/`, `claims/`,
`.git` read-only under Claude Code's sandbox), the terminal passed through (the operator types into
it), and waits. When Claude Code exits the door is closed; `settle` then commits what the session's
close left (git is read-only in its sandbox) and names the run to route, as the launcher of a
satellite does once it exits. Only the operator starts a session as a claim (the pinned key).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.bus import door as door_client
from nika_brain.engine import claimdoors
from nika_brain.errors import BrainError, Invalid, Refused
from nika_brain.gitrepo import git


def _live(sock: Path) -> bool:
    """Whether a door process listens on `sock` (a refusal is an answer too)."""
    import socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            door_client._connect(s, str(sock))
            return True
        except OSError:
            return False


def waiting_claim(brain: Brain) -> str:
    """The claim `claude start` means without one: the open claim of the only assisted run waiting."""
    from nika_brain.state import runs
    open_ = sorted(r.claim for r in runs.list_runs(brain) if r.mode == "assisted" and r.active and r.claim)
    if len(open_) == 1:
        return open_[0]
    if not open_:
        raise Invalid("no assisted run waits on a step: give the claim (`nika-brain claude start CLAIM`), or "
                      "start one with `nika-brain workflow-launch <workflow>`")
    raise Invalid(f"several assisted runs wait on a step: say which claim ({', '.join(open_)})")


def session_plan(brain: Brain, claim_id: str) -> tuple[Path, Path]:
    """(the folder Claude Code starts in, the settings it runs under) for an open claim: the run's theme
    worktree and the satellite-style settings (`locks/`, `claims/`, `.git` read-only under Claude
    Code's sandbox: its door is its only way to change them), written for this claim."""
    from nika_brain.claude import settings as claude_settings
    from nika_brain.engine import orchestrator, satellites
    from nika_brain.state import claims, runs
    from nika_brain.state.workflows import find_workflow
    c = claims.load_claim(brain, claims.id_from_argument(claim_id))
    if not c.is_open:
        raise Refused(f"claim {c.id} is closed ({c.result.status if c.result else '?'}): its step has no "
                      "session to start")
    run = runs.load_run(brain, c.workflow) if c.workflow else None
    cwd, kernel = brain.root, None
    if run is not None and run.claim == c.id:
        wf = orchestrator.effective(find_workflow(brain, run.workflow), run)
        worktree = orchestrator.worktree_of(brain, wf)
        cwd, kernel = (worktree if worktree.is_dir() else brain.root), run.context.get("kernel")
    own = brain.guarded_dir / "assisted" / c.id / "settings.json"
    own.parent.mkdir(parents=True, exist_ok=True)
    return cwd, claude_settings.satellite_settings(brain.root, satellites.session_settings(brain, kernel), own)


def start_session(brain: Brain, claim_id: str, args: list[str], *, say=print) -> int:
    """Open the claim's door for this process's tree, run the real `claude` in the claim's folder with
    `$NIKA_DOOR` and its own settings, the terminal passed through, and wait for it; then close the
    door. Returns Claude Code's exit code (the caller then calls `settle`)."""
    from nika_brain.state import authority, claims
    cid = claims.id_from_argument(claim_id)
    authority.operator_only(brain, f"starting a session as claim {cid}")
    binary = shutil.which("claude")
    if binary is None:
        raise BrainError("`claude` is not on PATH: install Claude Code (npm install -g "
                         "@anthropic-ai/claude-code) to start the step's session")
    cwd, settings = session_plan(brain, cid)
    sock = door_client.claim_socket(brain, cid)
    if os.path.lexists(sock):
        if _live(sock):
            raise Refused(f"claim {cid} already has a session nika-brain started (its door {sock} answers): "
                          "end it first, or work in it")
        sock.unlink()   # a door killed with its session: replaced by this one
    # The door serves this process's tree: the claude it starts and what that runs (this process
    # itself asks nothing of it). Opened first, so the session's first command finds it.
    said = claimdoors.tell(brain, f"open {cid} {os.getpid()} assisted")
    if said != f"open {cid}":
        raise BrainError(f"claim {cid}'s door could not be opened ({said or 'no door process'}); see "
                         f"{brain.state_dir / 'satellites' / 'door.log'}")
    env = {**{k: v for k, v in os.environ.items() if k != git.RERUN}, "NIKA_BRAIN_DIR": str(brain.root),
           "NIKA_CLAIM": cid, "NIKA_WORKTREE": str(cwd), "NIKA_AGENT": "1", door_client.CLAIM_DOOR: str(sock)}
    say(f"claim {cid}: Claude Code in {cwd}, acting as the claim through its door {sock} "
        "(closed when the session ends)")
    try:
        try:
            proc = subprocess.Popen([binary, *args, "--settings", str(settings)], cwd=cwd, env=env)
        except OSError as exc:
            raise BrainError(f"`{binary}` could not start: {exc.strerror or exc}") from None
        # The terminal's Ctrl-C, Ctrl-\ and hangup are Claude Code's to handle: this process waits on.
        ignored = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)}
        try:
            returncode = proc.wait()
        finally:
            for sig, handler in ignored.items():
                signal.signal(sig, handler)
    finally:
        claimdoors.tell(brain, f"close {cid}")
        sock.unlink(missing_ok=True)
    return returncode


def settle(brain: Brain, claim_id: str) -> str | None:
    """After the session: a claim it closed through its door (git is read-only in its sandbox) has its
    work committed here, as the launcher of a satellite does once it exits; the run to route next
    (it waits on that claim), or None (the claim is still open, or already routed)."""
    from nika_brain.engine import orchestrator, service
    from nika_brain.state import claims, runs
    from nika_brain.state.workflows import find_workflow
    c = claims.load_claim(brain, claims.id_from_argument(claim_id))
    run = runs.load_run(brain, c.workflow) if c.workflow and not c.is_open else None
    if run is None or not run.active or run.claim != c.id:
        return None
    worktree = orchestrator.worktree_of(brain, orchestrator.effective(find_workflow(brain, run.workflow), run))
    if worktree.is_dir():
        service.settle_work(worktree, c, c.result.status if c.result else "failed",
                            c.result.summary if c.result else "")
    return run.workflow
