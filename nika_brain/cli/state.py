"""Commands over the brain's state files: lock, claim, gate."""
from __future__ import annotations

import json
import os
from typing import Optional

import typer

from nika_brain.engine import gatebackends
from nika_brain.state import claims, gates, locks
from nika_brain.state import scopes
from nika_brain.support import clock
from nika_brain.brain import Brain
from nika_brain.cli import app

lock_app = typer.Typer(no_args_is_help=True, help="Path locks on scopes (paths, folders, globs).")
claim_app = typer.Typer(no_args_is_help=True, help="Claims: one per step execution.")
gate_app = typer.Typer(no_args_is_help=True, help="Human gates.")
app.add_typer(lock_app, name="lock")
app.add_typer(claim_app, name="claim")
app.add_typer(gate_app, name="gate")


def _owner(owner: Optional[str]) -> str:
    owner = owner or os.environ.get("NIKA_CLAIM")
    if not owner:
        raise typer.BadParameter("give --owner (a claim id) or set NIKA_CLAIM")
    return owner


def _lock_dict(lk: locks.Lock) -> dict:
    return {"scope": lk.scope, "owner": lk.owner, "mode": lk.mode, "token": lk.token,
            "acquired": clock.iso(lk.acquired), "expires": clock.iso(lk.expires),
            "holder": {"host": lk.holder.host, "pid": lk.holder.pid}}


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
    brain = Brain.find()
    holder = None if no_pid else (pid if pid is not None else os.getppid())
    from nika_brain.federation import leases  # a Redis lease too when federation.redis_url is set
    lk = leases.lock_acquire(brain, scope, _owner(owner), mode="shared" if shared else "exclusive",
                             ttl=ttl, wait=wait, pid=holder)
    print(json.dumps(_lock_dict(lk)) if as_json else f"acquired {lk.scope} (token {lk.token}, "
          f"expires {clock.iso(lk.expires)})")


@lock_app.command("release")
def lock_release(scope: str, owner: Optional[str] = typer.Option(None)):
    """Release SCOPE; refused unless you are its owner (or the operator releasing another's)."""
    from nika_brain.federation import leases  # the Redis lease goes with the YAML lock
    brain = Brain.find()
    who = _owner(owner)
    if who != os.environ.get("NIKA_CLAIM"):
        # Not the calling session's own claim: releasing someone else's lock is the operator's
        # decision, recorded with the operator's signature in the journal.
        from nika_brain.engine import signals
        from nika_brain.state import authority
        fields = {"scope": scopes.normalize_scope(scope), "owner": who, "at": clock.iso(clock.now())}
        sig = authority.sign(brain, "lock-release", fields, what=f"releasing {who}'s lock on {scope}")
        leases.lock_release(brain, scope, who)
        signals.emit(brain, "INFO", reason=f"lock on {fields['scope']} of {who} released by the operator",
                     payload={**fields, "signature": sig}, publish=False)
    else:
        leases.lock_release(brain, scope, who)
    print(f"released {scopes.normalize_scope(scope)}")


@lock_app.command("renew")
def lock_renew(scope: str, owner: Optional[str] = typer.Option(None), ttl: Optional[float] = None):
    """Push back the expiry of a lock you own."""
    from nika_brain.federation import leases
    lk = leases.lock_renew(Brain.find(), scope, _owner(owner), ttl=ttl)
    print(f"renewed {lk.scope} until {clock.iso(lk.expires)}")


@lock_app.command("status")
def lock_status(scope: str, as_json: bool = typer.Option(False, "--json")):
    """Who holds SCOPE or anything overlapping it (exit 3 when something does)."""
    brain = Brain.find()
    held = [lk for lk in locks.list_locks(brain) if scopes.scopes_overlap(lk.scope, scope)]
    now = clock.now()
    if as_json:
        print(json.dumps([dict(_lock_dict(lk), expired=lk.expired(now)) for lk in held]))
    elif not held:
        print(f"{scopes.normalize_scope(scope)}: free")
    for lk in held if not as_json else ():
        print(locks.describe(lk) + (" [expired]" if lk.expired(now) else ""))
    from nika_brain.federation import leases  # with federation.redis_url: other machines' leases too
    remote = leases.held_elsewhere(brain, scope, {lk.owner for lk in held})
    for v in remote if not as_json else ():
        print(f"{v['scope']} held by {v['owner']} on {v.get('host', '?')} (redis lease, token {v['token']})")
    raise typer.Exit(3 if held or remote else 0)


@lock_app.command("list")
def lock_list(as_json: bool = typer.Option(False, "--json")):
    """All held locks."""
    held = locks.list_locks(Brain.find())
    if as_json:
        print(json.dumps([_lock_dict(lk) for lk in held]))
        return
    for lk in held:
        print(locks.describe(lk))


def _claim_dict(c: claims.Claim) -> dict:
    return claims.to_dict(c)


@claim_app.command("open")
def claim_open(workflow: str = typer.Option(...), step: str = typer.Option(...),
               type: str = typer.Option("code", "--type", help="satellite type"),
               scope: list[str] = typer.Option(..., help="repeatable"),
               zone: Optional[str] = None, level: str = typer.Option("domain"),
               story_angle: str = "", parent: Optional[str] = None, theme: Optional[str] = None,
               as_json: bool = typer.Option(False, "--json")):
    """Open a claim by hand (the orchestrator opens its own)."""
    from nika_brain.engine import service
    c = service.open_claim(Brain.find(), workflow=workflow, step=int(step) if step.isdigit() else step,
                           satellite_type=type, scope=scope, zone=zone, satellite_level=level,
                           story_angle=story_angle, parent=parent, theme=theme)
    print(json.dumps(_claim_dict(c)) if as_json else c.id)


@claim_app.command("close")
def claim_close(claim_id: str, status: str = typer.Option(..., help="ok | partial | failed"),
                summary: str = typer.Option(""), tests_passed: Optional[int] = None,
                tests_failed: Optional[int] = None,
                empty: bool = typer.Option(False, "--empty", help="a code step that needed no change"),
                as_json: bool = typer.Option(False, "--json", help="one JSON object for scripts")):
    """Close a claim with its result; the orchestrator routes the exit action at once and says what
    comes next."""
    from nika_brain.engine import nextstep, service
    brain = Brain.find()
    done = service.report(brain, claim_id, status, summary, tests_passed=tests_passed,
                          tests_failed=tests_failed, empty=empty)
    nxt = nextstep.line(brain, done.outcome) if done.outcome else \
        f"next: nothing to route — claim {done.claim.id} is not the step of a workflow run"
    if as_json:
        print(json.dumps({"claim": done.claim.id, "result": done.claim.result.status if done.claim.result
                          else status, "warnings": list(done.warnings),
                          "outcome": done.outcome.to_dict() if done.outcome else None, "next": nxt}))
    else:
        print(f"closed {done.claim.id}: {done.claim.result.status if done.claim.result else status}")
        for w in done.warnings:
            print(f"warning: {w}")
        print(nxt)  # the close was accepted: exit 0, whatever the run does next (the line says it)


@claim_app.command("show")
def claim_show(claim_id: str, as_json: bool = typer.Option(False, "--json")):
    c = claims.load_claim(Brain.find(), claim_id)
    if as_json:
        print(json.dumps(_claim_dict(c)))
    else:
        print(claims.claim_path(Brain.find(), claim_id).read_text(), end="")


@claim_app.command("list")
def claim_list(status: Optional[str] = typer.Option(None, help="open | closed"),
               as_json: bool = typer.Option(False, "--json")):
    cs = claims.list_claims(Brain.find(), status)
    if as_json:
        print(json.dumps([_claim_dict(c) for c in cs]))
        return
    for c in cs:
        res = f" {c.result.status}" if c.result else ""
        print(f"{c.id}\t{c.status}{res}\t{' '.join(c.scope)}")


@gate_app.command("open")
def gate_open(gate_id: str, message: str, workflow: Optional[str] = None,
              claim: Optional[str] = None):
    """Open a pending human gate (human-gate-ack.sh gate <id> "<msg>")."""
    g = gates.open_gate(Brain.find(), gate_id, message, workflow=workflow, claim=claim)
    print(f"gate {g.id}: {g.status} — {g.message}")


def _decide(gate_id: str, decision: str, note: str) -> None:
    from nika_brain.engine import nextstep, service
    brain = Brain.find()
    g, out = service.decide_gate(brain, gate_id, decision, note=note)
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
def gate_list(status: Optional[str] = typer.Option(None), as_json: bool = typer.Option(False, "--json")):
    gs = gates.list_gates(Brain.find(), status)
    if as_json:
        print(json.dumps([gates.to_dict(g) for g in gs]))
        return
    for g in gs:
        print(f"{g.id}\t{g.status}\t{g.message}")


@gate_app.command("sync")
def gate_sync(backend: Optional[str] = typer.Option(None, help="cli | github (default from config)"),
              pr: Optional[int] = typer.Option(None, help="only the gates of this pull request")):
    """Apply pull-request review decisions (or another backend's) to pending gates."""
    for g in gatebackends.sync(Brain.find(), backend, pr=pr):
        print(f"gate {g.id}: {g.status} by {g.decided_by} via {g.via}")
