"""The claim doors (federation/doors/claim.py) as the engine opens them, and the assisted session
nika-brain starts behind one.

A claim's door is a unix socket, `.nika/guarded/doors/<claim>/door.sock` (bus/door.claim_socket),
served by a process that acts as that claim only and answers only the process tree it was told to
serve. Two kinds of session get one:

- a swarm satellite (engine/satellites.launch): one door process for all the satellites of a launch,
  told on its stdin `open CLAIM PID` / `close CLAIM` (a process a satellite cost every swarm step
  ~100 ms CPU);
- an assisted step's session (`nika-brain claude start CLAIM`, `start_session`): the command opens
  the claim's door for its own process tree, runs the real `claude` in the claim's worktree with the
  terminal passed through (the operator types into it) and waits for it; then it closes the door,
  commits what the session's close left (git is read-only in its sandbox, as for a satellite) and
  routes the step (`settle`).

While a claim's door is open, its lock and claim changes made anywhere else (`NIKA_CLAIM=<claim>`
from another shell) are the operator's (bus/door.bound, checked by cli/fast.py), so an agent in another session
cannot act as that claim. Doors are started by module name: the engine does not import the
federation.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.bus import door as door_client
from nika_brain.errors import BrainError, Invalid, Refused
from nika_brain.gitrepo import git

_DOORS: dict[str, subprocess.Popen] = {}
_DOORS_LOCK = threading.Lock()


def process(brain: Brain) -> subprocess.Popen:
    """This process's door process for the brain, started on first use. It ends when this process
    has gone (its stdin closes, an exec too: the pipe is close-on-exec) and the last claim it serves
    has closed (its session's process exited, or `close CLAIM`)."""
    proc = _DOORS.get(str(brain.root))
    if proc is not None and proc.poll() is None:
        return proc
    err = brain.state_dir / "satellites" / "door.log"
    err.parent.mkdir(parents=True, exist_ok=True)
    with open(err, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "nika_brain.federation.doors.claim", str(brain.root)],
                                cwd=brain.root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                text=True, env={k: v for k, v in os.environ.items() if k != door_client.CLAIM_DOOR})
    _DOORS[str(brain.root)] = proc
    return proc


def tell(brain: Brain, line: str) -> str:
    """Send the door one line and return its answer: `open CLAIM PID` waits for `open CLAIM` (or
    `failed CLAIM why`; "" when no door could be reached), `close CLAIM` returns "-". A door that died
    is started again once. A door that cannot be reached leaves the session's lock and claim
    commands failing with the reason (closed, never open)."""
    with _DOORS_LOCK:
        said = ""
        for _attempt in range(2):
            proc = process(brain)
            assert proc.stdin is not None and proc.stdout is not None
            opening = line.startswith("open ")
            try:
                proc.stdin.write(line + "\n")
                proc.stdin.flush()
                said = proc.stdout.readline() if opening else "-"   # `open CLAIM`, or `failed CLAIM why`
            except OSError:
                said = "" if opening else "-"   # a door gone has nothing left to close
            if said:
                return said.strip()
            proc.kill()   # it died meanwhile: a new one
            proc.wait()
        return said


# ---- an assisted step's session ------------------------------------------------------------------

def _live(sock: Path) -> bool:
    """Whether a door process listens on `sock` (a refusal is an answer too)."""
    import socket
    where, fd = door_client.short_path(str(sock))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(where)
        return True
    except OSError:
        return False
    finally:
        s.close()
        if fd is not None:
            os.close(fd)


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
    door and settle what the session did (`settle`). Returns Claude Code's exit code."""
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
    said = tell(brain, f"open {cid} {os.getpid()}")
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
        tell(brain, f"close {cid}")
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
