"""Commands over the brain's state files: lock, claim, gate."""
from __future__ import annotations

import os
from typing import Optional

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app, fast
from nika_brain.engine import gatebackends, signals
from nika_brain.state import gates

lock_app = typer.Typer(no_args_is_help=True, help="Path locks on scopes (paths, folders, globs).")
claim_app = typer.Typer(no_args_is_help=True, help="Claims: one per step execution.")
gate_app = typer.Typer(no_args_is_help=True, help="Human gates.")
app.add_typer(lock_app, name="lock")
app.add_typer(claim_app, name="claim")
app.add_typer(gate_app, name="gate")


STRICT = typer.Option(False, "--strict", help="exit 1 when an invalid record was found")


def _owner(owner: Optional[str]) -> Optional[str]:
    owner = owner or os.environ.get("NIKA_CLAIM")
    if not owner and os.environ.get("NIKA_DOOR"):
        return None   # a satellite's door knows its claim
    if not owner:
        raise typer.BadParameter("give --owner (a claim id) or set NIKA_CLAIM")
    return owner


@lock_app.command("acquire")
def lock_acquire(scope: str, owner: Optional[str] = typer.Option(None, help="claim id (default $NIKA_CLAIM)"),
                 ttl: Optional[float] = typer.Option(None, help="seconds (default from nika-brain.yml)"),
                 wait: float = typer.Option(0.0, help="seconds to wait for a busy scope"),
                 shared: bool = typer.Option(False, "--shared",
                                             help="shared lock (conflicts only with exclusive)"),
                 pid: Optional[int] = typer.Option(None, help="holder pid (default: the calling process)"),
                 no_pid: bool = typer.Option(False, "--no-pid",
                                             help="record no holder process: only the TTL protects"),
                 as_json: bool = typer.Option(False, "--json")):
    """Acquire a lock on SCOPE; exit 3 with the holder named when it is busy."""
    fast.lock_acquire(scope, _owner(owner), ttl, wait, shared, pid, no_pid, as_json)


@lock_app.command("release")
def lock_release(scope: str, owner: Optional[str] = typer.Option(None)):
    """Release SCOPE; refused unless you are its owner (or the operator releasing another's)."""
    fast.lock_release(scope, _owner(owner))


@lock_app.command("renew")
def lock_renew(scope: str, owner: Optional[str] = typer.Option(None), ttl: Optional[float] = None):
    """Push back the expiry of a lock you own."""
    fast.lock_renew(scope, _owner(owner), ttl)


@lock_app.command("status")
def lock_status(scope: str, as_json: bool = typer.Option(False, "--json")):
    """Who holds SCOPE or anything overlapping it (exit 3 when something does)."""
    raise typer.Exit(fast.lock_status(scope, as_json))


@lock_app.command("list")
def lock_list(as_json: bool = typer.Option(False, "--json"), strict: bool = STRICT):
    """All held locks (an invalid lock file is named on stderr: treat its scope as held)."""
    raise typer.Exit(fast.lock_list(as_json, strict))


@claim_app.command("open")
def claim_open(workflow: str = typer.Option(...), step: str = typer.Option(...),
               type: str = typer.Option("code", "--type", help="satellite type"),
               scope: list[str] = typer.Option(..., help="repeatable"),
               zone: Optional[str] = None, level: str = typer.Option("domain"),
               story_angle: str = "", parent: Optional[str] = None, theme: Optional[str] = None,
               as_json: bool = typer.Option(False, "--json")):
    """Open a claim by hand (the orchestrator opens its own)."""
    raise typer.Exit(fast.claim_open(workflow, step, scope, type, zone, level, story_angle, parent, theme,
                                     as_json))


@claim_app.command("close")
def claim_close(claim_id: str, status: str = typer.Option(..., help="ok | partial | failed"),
                summary: str = typer.Option(""), tests_passed: Optional[int] = None,
                tests_failed: Optional[int] = None,
                empty: bool = typer.Option(False, "--empty", help="a code step that needed no change"),
                as_json: bool = typer.Option(False, "--json", help="one JSON object for scripts")):
    """Close a claim with its result; the orchestrator routes the exit action at once and says what
    comes next."""
    raise typer.Exit(fast.claim_close(claim_id, status, summary, tests_passed, tests_failed, empty, as_json))


@claim_app.command("show")
def claim_show(claim_id: str, as_json: bool = typer.Option(False, "--json")):
    """One claim: its step, scope, status and result."""
    raise typer.Exit(fast.claim_show(claim_id, as_json))


@claim_app.command("list")
def claim_list(status: Optional[str] = typer.Option(None, help="open | closed"),
               as_json: bool = typer.Option(False, "--json"), strict: bool = STRICT):
    """All claims, or those with one status (an invalid claim file is named on stderr)."""
    raise typer.Exit(fast.claim_list(status, as_json, strict))


@gate_app.command("open")
def gate_open(gate_id: str, message: str, workflow: Optional[str] = None,
              claim: Optional[str] = None):
    """Open a pending human gate (human-gate-ack.sh gate <id> "<msg>")."""
    brain = Brain.find()
    existed = gates.gate_path(brain, gate_id).exists()
    g = gates.open_gate(brain, gate_id, message, workflow=workflow, claim=claim)
    if existed:
        if g.message != message:
            print(f"gate {g.id} already exists ({g.status}): its message stays \"{g.message}\"; the new "
                  "message was ignored (a gate is opened once; decide it, or open another id)")
        else:
            print(f"gate {g.id}: already {g.status} — {g.message}")
        return
    signals.emit(brain, "GATE_PENDING", workflow=workflow, claim=claim, reason=message, payload={"gate": g.id})
    print(f"gate {g.id}: {g.status} — {g.message}")


def _decide(gate_id: str, decision: str, note: str) -> None:
    from nika_brain.engine import nextstep, service
    brain = Brain.find()
    g, out, decided = service.decide_gate(brain, gate_id, decision, note=note)
    if not decided:
        print(f"{gates.already_decided(g)}; nothing changed")
        return
    print(f"gate {g.id}: {g.status} by {g.decided_by}")
    if out is not None:
        print(nextstep.line(brain, out))
    elif g.workflow:
        print(f"next: `nika-brain workflow resume {g.workflow}`")
    else:
        print("next: nothing waits on this gate")


@gate_app.command("approve")
def gate_approve(gate_id: str, note: str = ""):
    """Approve a pending gate (a human only); the run waiting on it goes on at once."""
    _decide(gate_id, "approve", note)


@gate_app.command("reject")
def gate_reject(gate_id: str, note: str = ""):
    """Reject a pending gate (a human only); the run waiting on it is aborted."""
    _decide(gate_id, "reject", note)


@gate_app.command("list")
def gate_list(status: Optional[str] = typer.Option(None), as_json: bool = typer.Option(False, "--json"),
              strict: bool = STRICT):
    """All gates, or those with one status (pending, approved, rejected)."""
    raise typer.Exit(fast.list_records(lambda b: b.gates_dir, gates.load_path, gates.to_dict,
                                       lambda g: f"{g.id}\t{g.status}\t{g.message}", status, as_json, strict))


@gate_app.command("sync")
def gate_sync(backend: Optional[str] = typer.Option(None, help="cli | github (default from config)"),
              pr: Optional[int] = typer.Option(None, help="only the gates of this pull request")):
    """Apply pull-request review decisions (or another backend's) to pending gates."""
    for g in gatebackends.sync(Brain.find(), backend, pr=pr):
        print(f"gate {g.id}: {g.status} by {g.decided_by} via {g.via}")
