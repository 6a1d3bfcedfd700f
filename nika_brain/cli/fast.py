"""The lock and claim commands without the CLI framework: agents and scripts call them in loops, and
importing typer costs a process several times the work itself.

`__main__` hands `lock acquire|release|renew|status|list`, `claim open|close|show|list` and `index`
here before typer is imported. The parser below accepts exactly the plain forms of the typer commands'
options; anything else (--help, an unknown or repeated option, a value that does not convert, a missing
argument) returns None and the typer command runs instead, so errors and usage text stay the
framework's. The command bodies are shared with cli/state.py and cli/index.py: both paths print the
same lines and exit with the same codes (tests/cli/test_fast_cli.py compares them).
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

# command -> (positional names, {option: (dest, converter, or None for a flag, or list for a repeatable)})
_OWNER = {"--owner": ("owner", str)}
_JSON = {"--json": ("as_json", None)}
_STRICT = {"--strict": ("strict", None)}
SPECS: dict[tuple[str, ...], tuple[list[str], dict[str, tuple[str, Any]]]] = {
    ("lock", "acquire"): (["scope"], {**_OWNER, "--ttl": ("ttl", float), "--wait": ("wait", float),
                                      "--shared": ("shared", None), "--pid": ("pid", int),
                                      "--no-pid": ("no_pid", None), "--json": ("as_json", None)}),
    ("lock", "release"): (["scope"], dict(_OWNER)),
    ("lock", "renew"): (["scope"], {**_OWNER, "--ttl": ("ttl", float)}),
    ("lock", "status"): (["scope"], {"--json": ("as_json", None)}),
    ("claim", "close"): (["claim_id"], {"--status": ("status", str), "--summary": ("summary", str),
                                        "--tests-passed": ("tests_passed", int),
                                        "--tests-failed": ("tests_failed", int),
                                        "--empty": ("empty", None), **_JSON}),
    ("lock", "list"): ([], {**_JSON, **_STRICT}),
    ("claim", "open"): ([], {"--workflow": ("workflow", str), "--step": ("step", str),
                             "--type": ("type", str), "--scope": ("scope", list), "--zone": ("zone", str),
                             "--level": ("level", str), "--story-angle": ("story_angle", str),
                             "--parent": ("parent", str), "--theme": ("theme", str), **_JSON}),
    ("claim", "show"): (["claim_id"], dict(_JSON)),
    ("claim", "list"): ([], {"--status": ("status", str), **_JSON, **_STRICT}),
    ("index",): ([], {"--check": ("check", None), "--stdout": ("stdout", None)}),
}
_REQUIRED: dict[tuple[str, ...], tuple[str, ...]] = {("claim", "close"): ("status",),
                                                     ("claim", "open"): ("workflow", "step", "scope")}


def parse(argv: list[str], specs: dict | None = None,
          required: dict | None = None) -> tuple[tuple[str, ...], dict] | None:
    """(command, arguments) for a plain call of a fast command (of `specs`, `required`: this module's
    tables by default); None: let typer handle it."""
    specs = SPECS if specs is None else specs
    required = _REQUIRED if required is None else required
    key: tuple[str, ...] = tuple(argv[:2])
    if key not in specs:
        key = tuple(argv[:1])
        if key not in specs:
            return None
    positional, options = specs[key]
    args: dict = {}
    rest = list(argv[len(key):])
    pos: list[str] = []
    while rest:
        a = rest.pop(0)
        if a.startswith("-") and a != "-":
            if a not in options:
                return None
            dest, conv = options[a]
            if dest in args and conv is not list:
                return None
            if conv is None:
                args[dest] = True
                continue
            if not rest:
                return None
            value = rest.pop(0)
            if conv is list:
                args.setdefault(dest, []).append(value)
                continue
            try:
                args[dest] = conv(value)
            except (ValueError, OverflowError):
                return None
        else:
            pos.append(a)
    if len(pos) != len(positional):
        return None
    args.update(zip(positional, pos))
    if any(r not in args for r in required.get(key, ())):
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

def _outsider(brain, owner: str) -> str | None:
    """Why acting for `owner` here is for another than the calling session's own claim, or None: another
    owner than the session's `$NIKA_CLAIM`, or a claim whose session nika-brain started (its door is
    open, `claude start` or a satellite): that session acts as the claim through its door, and
    `$NIKA_CLAIM` set to it anywhere else (another agent's shell) is no proof."""
    if owner != os.environ.get("NIKA_CLAIM"):
        return "not this session's claim"
    from nika_brain.bus import door
    if door.bound(brain, owner):
        return f"outside the session nika-brain started for {owner}, which acts through its door"
    return None


def _operator(brain, what: str, owner: str, why: str | None) -> None:
    """A lock or claim change made here, outside any door, is the operator's: refused unless this
    process holds the pinned key (`$NIKA_CLAIM` names a claim, it proves none). An agent session acts
    as a claim only through the door nika-brain opened for it; the refusal says how to get one."""
    from nika_brain.errors import Refused
    from nika_brain.state import authority
    try:
        authority.require(brain, f"{what} ({why or 'without the claim door: $NIKA_CLAIM is no proof'})")
    except Refused as exc:
        raise Refused(f"{exc.message}. An agent session acts as a claim only through the door nika-brain "
                      f"opens for it: `nika-brain claude start {owner}`") from None


def _for_another(brain, verb: str, scope: str, owner: str) -> None:
    """Acting on a lock outside a door, for the session's own claim or another owner (`--ttl 1` expires
    its lock): the operator's decision, as a release is."""
    _operator(brain, f"{verb} a lock on {scope} for {owner}", owner, _outsider(brain, owner))


def _door(op: str, **args: Any) -> dict | None:
    """Inside a satellite that has a door: the lock change made there, as the satellite's claim (the
    door refuses another owner); None elsewhere (the operator's shell, a session nika-brain did not
    start), where the files are written here."""
    from nika_brain.bus import door
    path = door.claim_door()
    if path is None:
        return None
    return door.call(op, path, **args)


def lock_acquire(scope: str, owner: str | None, ttl: float | None = None, wait: float = 0.0,
                 shared: bool = False, pid: int | None = None, no_pid: bool = False, as_json: bool = False) -> int:
    d = _door("lock_acquire", scope=scope, owner=owner, ttl=ttl, wait=wait, shared=shared, no_pid=no_pid)
    if d is not None:   # the lock's holder is the command's parent, as here (an explicit --pid: not through it)
        print(json.dumps(d) if as_json else f"acquired {d['scope']} (token {d['token']}, expires {d['expires']})")
        return 0
    assert owner is not None
    from nika_brain.brain import Brain
    from nika_brain.federation.kernels import leases  # a Redis lease too when federation.redis_url is set
    from nika_brain.support import clock
    brain = Brain.find()
    _for_another(brain, "acquiring", scope, owner)
    holder = None if no_pid else (pid if pid is not None else os.getppid())
    lk = leases.lock_acquire(brain, scope, owner, mode="shared" if shared else "exclusive", ttl=ttl,
                             wait=wait, pid=holder)
    print(json.dumps(_lock_dict(lk)) if as_json else f"acquired {lk.scope} (token {lk.token}, "
          f"expires {clock.iso(lk.expires)})")
    return 0


def lock_release(scope: str, owner: str | None) -> int:
    d = _door("lock_release", scope=scope, owner=owner)
    if d is not None:
        print(f"released {d['scope']}")
        return 0
    assert owner is not None
    from nika_brain.brain import Brain
    from nika_brain.federation.kernels import leases  # the Redis lease goes with the YAML lock
    from nika_brain.state import scopes
    from nika_brain.support import clock
    brain = Brain.find()
    why = _outsider(brain, owner)
    _operator(brain, f"releasing {owner}'s lock on {scope}", owner, why)   # outside a door: the operator's
    if why is not None:
        # Not the calling session's own claim: recorded with the operator's signature in the journal.
        from nika_brain.engine import signals
        from nika_brain.state import authority
        fields = {"scope": scopes.normalize_scope(scope), "owner": owner, "at": clock.iso(clock.now())}
        sig = authority.sign(brain, "lock-release", fields, what=f"releasing {owner}'s lock on {scope} ({why})")
        leases.lock_release(brain, scope, owner)
        signals.emit(brain, "INFO", reason=f"lock on {fields['scope']} of {owner} released by the operator",
                     payload={**fields, "signature": sig}, publish=False)
    else:
        leases.lock_release(brain, scope, owner)
    print(f"released {scopes.normalize_scope(scope)}")
    return 0


def lock_renew(scope: str, owner: str | None, ttl: float | None = None) -> int:
    d = _door("lock_renew", scope=scope, owner=owner, ttl=ttl)
    if d is not None:
        print(f"renewed {d['scope']} until {d['expires']}")
        return 0
    assert owner is not None
    from nika_brain.brain import Brain
    from nika_brain.federation.kernels import leases
    from nika_brain.support import clock
    brain = Brain.find()
    _for_another(brain, "renewing", scope, owner)
    lk = leases.lock_renew(brain, scope, owner, ttl=ttl)
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


def lock_list(as_json: bool = False, strict: bool = False) -> int:
    """All held locks (an invalid lock file is named on stderr: treat its scope as held)."""
    from nika_brain.brain import Brain
    from nika_brain.state import listing, locks
    brain = Brain.find()
    held, bad = listing.load_each(brain, brain.locks_dir, locks.load_lock)
    if as_json:
        print(json.dumps([_lock_dict(lk) for lk in held]))
    else:
        for lk in held:
            print(locks.describe(lk))
    return report_invalid(bad, strict)


def report_invalid(bad: list, strict: bool) -> int:
    """Name each invalid record on stderr, one line each; exit 1 for them only with --strict."""
    for exc in bad:
        print(f"nika-brain: invalid: {exc}", file=sys.stderr)
    return 1 if bad and strict else 0


def claim_open(workflow: str, step: str, scope: list[str], type: str = "code", zone: str | None = None,
               level: str = "domain", story_angle: str = "", parent: str | None = None,
               theme: str | None = None, as_json: bool = False) -> int:
    """Open a claim by hand (the orchestrator opens its own)."""
    from nika_brain.brain import Brain
    from nika_brain.engine import service, sync
    from nika_brain.state import claims
    brain = Brain.find()
    sync.pull_if_shared(brain)  # another machine's claims and locks, fresh
    c = service.open_claim(brain, workflow=workflow, step=step, satellite_type=type, scope=scope,
                           zone=zone, satellite_level=level, story_angle=story_angle, parent=parent,
                           theme=theme)
    print(json.dumps(claims.to_dict(c)) if as_json else c.id)
    return 0


def claim_show(claim_id: str, as_json: bool = False) -> int:
    from nika_brain.brain import Brain
    from nika_brain.state import claims
    brain = Brain.find()
    claim_id = claims.id_from_argument(claim_id)  # a tab-completed claims/<id>.yml works too
    c = claims.load_claim(brain, claim_id)
    if as_json:
        print(json.dumps(claims.to_dict(c)))
    else:
        print(claims.claim_path(brain, claim_id).read_text(), end="")
    return 0


def list_records(folder: Callable[[Any], Any], loader: Callable[[Any], Any], to_dict: Callable[[Any], dict],
                 line: Callable[[Any], str], status: str | None, as_json: bool, strict: bool) -> int:
    """`claim list` and `gate list`: the valid records (of `status`), one line or one JSON list; the
    invalid ones named on stderr."""
    from nika_brain.brain import Brain
    from nika_brain.state import listing
    brain = Brain.find()
    records, bad = listing.load_each(brain, folder(brain), loader)
    records = [r for r in records if status is None or r.status == status]
    if as_json:
        print(json.dumps([to_dict(r) for r in records]))
    else:
        for r in records:
            print(line(r))
    return report_invalid(bad, strict)


def claim_list(status: str | None = None, as_json: bool = False, strict: bool = False) -> int:
    from nika_brain.state import claims
    return list_records(lambda b: b.claims_dir, claims.load_path, claims.to_dict,
                        lambda c: f"{c.id}\t{c.status}{f' {c.result.status}' if c.result else ''}\t"
                                  f"{' '.join(c.scope)}", status, as_json, strict)


def index(check: bool = False, stdout: bool = False) -> int:
    """Regenerate BRAIN-INDEX.md from the state files (byte-identical when nothing changed)."""
    from nika_brain.brain import Brain
    from nika_brain.engine import index as idx
    brain = Brain.find()
    if stdout:
        sys.stdout.write(idx.render(brain))
        return 0
    if check:
        if idx.is_current(brain):
            print("BRAIN-INDEX.md is current")
            return 0
        print("BRAIN-INDEX.md is stale: run `nika-brain index`", file=sys.stderr)
        return 1
    print("BRAIN-INDEX.md updated" if idx.regenerate(brain) else "BRAIN-INDEX.md unchanged")
    return 0


def claim_close(claim_id: str, status: str, summary: str = "", tests_passed: int | None = None,
                tests_failed: int | None = None, empty: bool = False, as_json: bool = False) -> int:
    """Close a claim; the orchestrator routes its exit action at once, and one line says what follows."""
    from nika_brain.bus import door
    # A satellite's door, or inside a kernel's sandbox (claims/ is read-only there) its door: the close
    # is made there, on the host.
    via = door.claim_door() or (door.SOCKET if door.present() else None)
    if via is not None:
        r = door.call("claim_close", via, claim=claim_id, status=status, summary=summary, tests_passed=tests_passed,
                      tests_failed=tests_failed, empty=empty)
        if as_json:
            print(json.dumps({**r, "outcome": None}))
        else:
            print(f"closed {r['claim']}: {r['result']}")
            for w in r.get("warnings") or ():
                print(f"warning: {w}")
            print(r["next"])
        return 0
    from nika_brain.brain import Brain
    from nika_brain.engine import nextstep, service
    from nika_brain.gitrepo import git
    from nika_brain.state.claims import id_from_argument
    brain = Brain.find()
    claim_id = id_from_argument(claim_id)
    # Outside a door a close is the operator's (the key), whatever $NIKA_CLAIM says: a bound claim's
    # session closes it through its door, and an agent without one acts as no claim.
    _operator(brain, f"closing claim {claim_id}", claim_id,
              f"outside the session nika-brain started for {claim_id}, which closes it through its door"
              if door.bound(brain, claim_id) else None)
    git.rerun_is_this_command()  # what the git hooks name when they refuse this close's commit
    done = service.report(brain, claim_id, status, summary, tests_passed=tests_passed,
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
    """Run a plain lock/claim/index call without typer; None when typer must handle it."""
    parsed = parse(argv)
    if parsed is None:
        return None
    key, args = parsed
    if key in (("lock", "acquire"), ("lock", "release"), ("lock", "renew")):
        args["owner"] = _owner(args.get("owner"))
        if args["owner"] is None and not os.environ.get("NIKA_DOOR"):
            return None  # typer words the missing owner
    bodies: dict[tuple[str, ...], Callable[..., int]] = {
        ("lock", "acquire"): lock_acquire, ("lock", "release"): lock_release,
        ("lock", "renew"): lock_renew, ("lock", "status"): lock_status, ("lock", "list"): lock_list,
        ("claim", "open"): claim_open, ("claim", "close"): claim_close, ("claim", "show"): claim_show,
        ("claim", "list"): claim_list, ("index",): index}
    return guarded(bodies[key], args)


def guarded(body: Callable[..., int], args: dict) -> int:
    """Run a fast path's body as the typer CLI would end: an error is one line and its exit code."""
    from nika_brain.errors import BrainError, missing_extra, os_error_line
    try:
        return body(**args)
    except BrainError as exc:
        print(f"nika-brain: {exc}", file=sys.stderr)
        return exc.exit_code
    except ImportError as exc:  # a federation command without the federation extra: one line
        extra = missing_extra(exc)
        if extra is None:
            raise
        print(f"nika-brain: {extra}", file=sys.stderr)
        return extra.exit_code
    except OSError as exc:
        print(os_error_line(exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("nika-brain: interrupted", file=sys.stderr)
        return 130
