"""`nika-brain federation up|down|status|supervise|acl`: the federation's daemon, health and supervisor."""
from __future__ import annotations

import json
from typing import List

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app, operator_only

fed_app = typer.Typer(no_args_is_help=True, help="The kernel federation: health, supervisor, Redis ACLs.")
app.add_typer(fed_app, name="federation")


@fed_app.command("status")
def federation_status(as_json: bool = typer.Option(False, "--json")):
    """Every kernel (alive, stale, dead, killed...), the aggregates, and the bus in use."""
    from nika_brain.federation.daemon import host
    from nika_brain.federation.kernels import status
    brain = Brain.find()
    s = status.status(brain)
    s["daemon"] = host.status(brain)
    if as_json:
        print(json.dumps(s))
        raise typer.Exit(0 if s["bus_ok"] else 1)
    d = s["daemon"]
    if d["running"]:
        svcs = "  ".join(f"{n}{'' if v.get('running') else ' (off)'}{' ERROR: ' + v['error'] if v.get('error') else ''}"
                         for n, v in d["services"].items())
        print(f"daemon: running (pid {d['pid']}, since {d['started']})  services: {svcs}")
    else:
        print("daemon: not running (nika-brain federation up --detach)")
    a = s["aggregates"]
    print(f"bus: {s['bus']}  kernels: {a['kernels']}  " +
          "  ".join(f"{k}: {v}" for k, v in sorted(a["by_state"].items())) +
          f"  mean context: {a['mean_context_pct'] if a['mean_context_pct'] is not None else '-'}%"
          f"  queued: {a['queue_depth']}")
    for k in s["kernels"]:
        state = k["state"] + (f", {k['held']} held (machine lost)" if k.get("held") else "")
        print(f"{k['id']}\t{state}\t{k['runtime']}@{k.get('machine') or '-'}\thb={k['last_heartbeat'] or '-'}\t"
              f"ctx={k['context_pct'] if k['context_pct'] is not None else '-'}\t{k['reason'] or ''}")
    raise typer.Exit(0 if s["bus_ok"] else 1)  # the records are shown; the bus is not there


@fed_app.command("supervise")
def federation_supervise(once: bool = typer.Option(False, "--once", help="one pass, then exit"),
                         interval: float = typer.Option(2.0, "--interval")):
    """Watch every live kernel: death detection, release, bounded restart, heartbeats."""
    from nika_brain.errors import BrainError
    from nika_brain.federation.kernels import supervisor
    if not 0.05 <= interval <= 3600:
        raise BrainError("--interval must be between 0.05 and 3600 seconds")
    brain = Brain.find()
    if once:
        for kid, what in supervisor.check_once(brain).items():
            print(f"{kid}\t{what}")
        return
    supervisor.run(brain, interval=interval)


@fed_app.command("doors")
def federation_doors():
    """Open every kernel's door (its socket to the vault and the bus) in the foreground, until Ctrl-C
    (the federation daemon hosts the same service)."""
    from nika_brain.federation.doors.__main__ import main
    raise typer.Exit(main([str(Brain.find().root)]))


@fed_app.command("acl")
def federation_acl(kernel: List[str] = typer.Option([], "--kernel",
                                                   help="a kernel (repeat; default all live)"),
                   revoke: bool = typer.Option(False, "--revoke")):
    """Create (or rotate) one Redis ACL user per kernel (its password goes to its credentials file), then
    turn Redis' open default user off (nika-brain then connects as the operator's own user)."""
    operator_only("creating the federation's Redis users")
    from nika_brain.federation.kernels import acl
    for line in acl.apply(Brain.find(), kernel or None, revoke=revoke):
        print(line)



@fed_app.command("up")
def federation_up(detach: bool = typer.Option(False, "--detach", help="run in the background")):
    """Run the federation daemon for this brain (one per brain): supervisor, work stealing, triggers,
    daily summaries, bus retention, redelivery and the resident embedder."""
    operator_only("starting the federation daemon")
    from nika_brain.federation.daemon import host
    brain = Brain.find()
    if detach:
        pid = host.up(brain)
        print(f"federation daemon running (pid {pid}); log: {brain.rel(host.log_path(brain))}")
        return
    host.run(brain)


@fed_app.command("down")
def federation_down():
    """Stop this brain's federation daemon (its kernels keep running)."""
    operator_only("stopping the federation daemon")
    from nika_brain.federation.daemon import host
    pid = host.down(Brain.find())
    print(f"federation daemon stopped (pid {pid})" if pid else "no federation daemon was running")
