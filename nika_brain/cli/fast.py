"""The lock and claim commands without the CLI framework: agents and scripts call them in loops, and
importing typer costs a process several times the work itself.

`__main__` hands `lock acquire|release|renew|status` and `claim close` here before typer is imported.
The parser below accepts exactly the plain forms of the typer commands' options; anything else
(--help, an unknown or repeated option, a value that does not convert, a missing argument) returns
None and the typer command runs instead, so errors and usage text stay the framework's. The command
bodies are shared with cli/state.py: both paths print the same lines and exit with the same codes.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

# command -> (positional names, {option: (dest, converter or None for a flag)})
_OWNER = {"--owner": ("owner", str)}
SPECS: dict[tuple[str, str], tuple[list[str], dict[str, tuple[str, Callable[[str], Any] | None]]]] = {
    ("lock", "acquire"): (["scope"], {**_OWNER, "--ttl": ("ttl", float), "--wait": ("wait", float),
                                      "--shared": ("shared", None), "--pid": ("pid", int),
                                      "--no-pid": ("no_pid", None), "--json": ("as_json", None)}),
    ("lock", "release"): (["scope"], dict(_OWNER)),
    ("lock", "renew"): (["scope"], {**_OWNER, "--ttl": ("ttl", float)}),
    ("lock", "status"): (["scope"], {"--json": ("as_json", None)}),
    ("claim", "close"): (["claim_id"], {"--status": ("status", str), "--summary": ("summary", str),
                                        "--tests-passed": ("tests_passed", int),
                                        "--tests-failed": ("tests_failed", int),
                                        "--empty": ("empty", None), "--json": ("as_json", None)}),
}
_REQUIRED: dict[tuple[str, str], tuple[str, ...]] = {("claim", "close"): ("status",)}


def parse(argv: list[str]) -> tuple[tuple[str, str], dict] | None:
    """(command, arguments) for a plain call of a fast command; None: let typer handle it."""
    if len(argv) < 2 or (argv[0], argv[1]) not in SPECS:
        return None
    key = (argv[0], argv[1])
    positional, options = SPECS[key]
    args: dict = {}
    rest = list(argv[2:])
    pos: list[str] = []
    while rest:
        a = rest.pop(0)
        if a.startswith("-") and a != "-":
            if a not in options or options[a][0] in args:
                return None
            dest, conv = options[a]
            if conv is None:
                args[dest] = True
                continue
            if not rest:
                return None
            value = rest.pop(0)
            try:
                args[dest] = conv(value)
            except (ValueError, OverflowError):
                return None
        else:
            pos.append(a)
    if len(pos) != len(positional):
        return None
    args.update(zip(positional, pos))
    if any(r not in args for r in _REQUIRED.get(key, ())):
        return None
    return key, args


def _owner(owner: str | None) -> str | None:
    return owner or os.environ.get("NIKA_CLAIM") or None


def _lock_dict(lk) -> dict:
    from nika_brain.support import clock
    return {"scope": lk.scope, "owner": lk.owner, "mode": lk.mode, "token": lk.token,
            "acquired": clock.iso(lk.acquired), "expires": clock.iso(lk.expires),
            "holder": {"host": lk.holder.host, "pid": lk.holder.pid}}


# ---- command bodies (also called by the typer commands) -------------------------------------------------

def lock_acquire(scope: str, owner: str, ttl: float | None = None, wait: float = 0.0, shared: bool = False,
                 pid: int | None = None, no_pid: bool = False, as_json: bool = False) -> int:
    from nika_brain.brain import Brain
    from nika_brain.federation.kernels import leases  # a Redis lease too when federation.redis_url is set
    from nika_brain.support import clock
    brain = Brain.find()
    holder = None if no_pid else (pid if pid is not None else os.getppid())
    lk = leases.lock_acquire(brain, scope, owner, mode="shared" if shared else "exclusive", ttl=ttl,
                             wait=wait, pid=holder)
    print(json.dumps(_lock_dict(lk)) if as_json else f"acquired {lk.scope} (token {lk.token}, "
          f"expires {clock.iso(lk.expires)})")
    return 0


def lock_release(scope: str, owner: str) -> int:
    from nika_brain.brain import Brain
    from nika_brain.federation.kernels import leases  # the Redis lease goes with the YAML lock
    from nika_brain.state import scopes
    from nika_brain.support import clock
    brain = Brain.find()
    if owner != os.environ.get("NIKA_CLAIM"):
        # Not the calling session's own claim: releasing someone else's lock is the operator's
        # decision, recorded with the operator's signature in the journal.
        from nika_brain.engine import signals
        from nika_brain.state import authority
        fields = {"scope": scopes.normalize_scope(scope), "owner": owner, "at": clock.iso(clock.now())}
        sig = authority.sign(brain, "lock-release", fields, what=f"releasing {owner}'s lock on {scope}")
        leases.lock_release(brain, scope, owner)
        signals.emit(brain, "INFO", reason=f"lock on {fields['scope']} of {owner} released by the operator",
                     payload={**fields, "signature": sig}, publish=False)
    else:
        leases.lock_release(brain, scope, owner)
    print(f"released {scopes.normalize_scope(scope)}")
    return 0


def lock_renew(scope: str, owner: str, ttl: float | None = None) -> int:
    from nika_brain.brain import Brain
    from nika_brain.federation.kernels import leases
    from nika_brain.support import clock
    lk = leases.lock_renew(Brain.find(), scope, owner, ttl=ttl)
    print(f"renewed {lk.scope} until {clock.iso(lk.expires)}")
    return 0


def lock_status(scope: str, as_json: bool = False) -> int:
    from nika_brain.brain import Brain
    from nika_brain.federation.kernels import leases
    from nika_brain.state import locks, scopes
    from nika_brain.support import clock
    brain = Brain.find()
    held = locks.overlapping(brain, scope)
    now = clock.now()
    if as_json:
        print(json.dumps([dict(_lock_dict(lk), expired=lk.expired(now)) for lk in held]))
    elif not held:
        print(f"{scopes.normalize_scope(scope)}: free")
    for lk in held if not as_json else ():
        print(locks.describe(lk) + (" [expired]" if lk.expired(now) else ""))
    # With federation.redis_url: other machines' leases too.
    remote = leases.held_elsewhere(brain, scope, {lk.owner for lk in held})
    for v in remote if not as_json else ():
        print(f"{v['scope']} held by {v['owner']} on {v.get('host', '?')} (redis lease, token {v['token']})")
    return 3 if held or remote else 0


def claim_close(claim_id: str, status: str, summary: str = "", tests_passed: int | None = None,
                tests_failed: int | None = None, empty: bool = False, as_json: bool = False) -> int:
    """Close a claim; the orchestrator routes its exit action at once, and one line says what follows."""
    from nika_brain.brain import Brain
    from nika_brain.engine import nextstep, service
    from nika_brain.state.claims import id_from_argument
    brain = Brain.find()
    # What the git hooks name as the command to run again (or to override) when they refuse a commit.
    os.environ.setdefault("NIKA_COMMAND", f"nika-brain claim close {claim_id} --status {status}")
    done = service.report(brain, id_from_argument(claim_id), status, summary, tests_passed=tests_passed,
                          tests_failed=tests_failed, empty=empty)
    nxt = nextstep.line(brain, done.outcome) if done.outcome else \
        f"next: nothing to route — claim {done.claim.id} is not the step of a workflow run"
    from nika_brain.state.gates import in_agent_session
    if in_agent_session() and done.claim.workflow:
        # A satellite closing its own claim: what follows is the orchestrator's, never the agent's to run.
        nxt = "next: your step is reported — stop here; the orchestrator that launched you routes the result"
    result = done.claim.result.status if done.claim.result else status
    if as_json:
        print(json.dumps({"claim": done.claim.id, "result": result, "warnings": list(done.warnings),
                          "outcome": done.outcome.to_dict() if done.outcome else None, "next": nxt}))
    else:
        print(f"closed {done.claim.id}: {result}")
        for w in done.warnings:
            print(f"warning: {w}")
        if done.outcome is not None and done.outcome.report is not None:
            from nika_brain.engine.orchestrator import report_line
            print(f"[{done.outcome.workflow}] report: {report_line(done.outcome.report)}")
        print(nxt)  # the close was accepted: exit 0, whatever the run does next (the line says it)
    return 0


def run(argv: list[str]) -> int | None:
    """Run a plain lock/claim call without typer; None when typer must handle it."""
    parsed = parse(argv)
    if parsed is None:
        return None
    key, args = parsed
    if key[0] == "lock" and key[1] != "status":
        args["owner"] = _owner(args.get("owner"))
        if args["owner"] is None:
            return None  # typer words the missing owner
    bodies: dict[tuple[str, str], Callable[..., int]] = {
        ("lock", "acquire"): lock_acquire, ("lock", "release"): lock_release,
        ("lock", "renew"): lock_renew, ("lock", "status"): lock_status, ("claim", "close"): claim_close}
    body = bodies[key]
    from nika_brain.errors import BrainError, os_error_line
    try:
        return body(**args)
    except BrainError as exc:
        print(f"nika-brain: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(os_error_line(exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("nika-brain: interrupted", file=sys.stderr)
        return 130
