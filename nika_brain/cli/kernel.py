"""Kernel commands: the seed's five verbs (spawn, invoke, readjust, observe, kill) plus list and show.
Thin: each parses, calls one function of nika_brain.federation.kernels.verbs (or kernels), prints."""
from __future__ import annotations

import getpass
import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app, operator_only
from nika_brain.errors import BrainError
from nika_brain.state import kernels

kernel_app = typer.Typer(no_args_is_help=True, help="Kernels: one folder per /goal under kernels/<id>/.")
app.add_typer(kernel_app, name="kernel")


def _row(brain: Brain, k: kernels.Kernel) -> dict:
    from nika_brain.federation.kernels import health
    try:
        hb = health.last_heartbeat(brain, k.id) if k.runtime else None
    except BrainError:
        hb = None
    from nika_brain.federation.kernels import remote, runtimes
    state = runtimes.load_state(brain, k.id)
    st = remote.status_of(brain, k)
    return {"id": k.id, "goal": k.goal, "tags": list(k.tags), "card": k.card, "parent": k.parent,
            "status": st, "held": len(remote.held(brain, k.id)) if st == "lost" else 0,
            "reason": k.status_reason, "runtime": k.runtime,
            "limits": k.limits.to_dict(), "enforcement": k.enforcement, "sandbox": k.sandbox,
            "cpu_enforced": bool(state.get("cpu_enforced")) if k.limits.cpu_percent is not None else None,
            "restarts": k.restarts, "last_heartbeat": hb.get("at") if hb else None,
            "machine": k.machine, "region": k.region}


@kernel_app.command("list")
def kernel_list(as_json: bool = typer.Option(False, "--json")):
    """Every kernel: state, runtime, limits (and what enforces them), last heartbeat."""
    brain = Brain.find()
    rows = [_row(brain, k) for k in kernels.list_kernels(brain)]
    if as_json:
        print(json.dumps(rows))
        return
    for r in rows:
        lim = " ".join(f"{k}={v}" for k, v in r["limits"].items()) or "no-limits"
        if r["cpu_enforced"] is False and r["enforcement"] not in (None, "kubernetes"):
            lim += " (cpu not enforced)"
        status = r["status"] + (f", {r['held']} held (machine lost)" if r["held"] else "")
        print(f"{r['id']}\t{status}\t{r['runtime']}@{r['machine'] or '-'}\t{lim} [{r['enforcement'] or '-'}]\t"
              f"sandbox={r['sandbox'] or '-'}\thb={r['last_heartbeat'] or '-'}\t{r['goal']}")


@kernel_app.command("show")
def kernel_show(kernel_id: str):
    """One kernel's record: goal, status, runtime, limits (and what enforces them), card, tags."""
    brain = Brain.find()
    k = kernels.load_kernel(brain, kernel_id)
    print(f"{k.id}: {k.goal}\n  status: {k.status}{f' ({k.status_reason})' if k.status_reason else ''}"
          f"\n  runtime: {k.runtime}  limits: {k.limits} [{k.enforcement or '-'}]  sandbox: {k.sandbox or '-'}"
          f"\n  card: {k.card}\n  tags: {', '.join(k.tags) or '-'}")
    for label, value in (("scope", ", ".join(k.scope)), ("region", k.region), ("data class", k.data_class),
                         ("doctrine", k.doctrine), ("restart", f"{k.restart} ({k.restarts}/{k.max_restarts})"
                                                    if k.restart != "never" else None),
                         ("temporary", f"ttl {k.ttl:g}s" if k.temporary and k.ttl else None)):
        if value:
            print(f"  {label}: {value}")
    for ex in k.examples:
        print(f"  example: {ex}")
    if k.parent:
        print("  lineage: " + " <- ".join(x.id for x in kernels.lineage(brain, k)))
    for d in kernels.list_directives(brain, k.id):
        print(f"  directive {d.id} ({d.at}, {d.by}): {d.text}")
    from nika_brain.state import sessions
    for rec in sessions.list_sessions(brain):
        if rec.kernel != k.id or rec.ended_at and rec.context_pct is None:
            continue
        ctx = "-"
        if rec.context_pct is not None:
            ctx = (f"{rec.context_pct:.1f}% of window {rec.context_window:,} "
                   f"({rec.context_window_source or 'model'})")
        print(f"  session {rec.id}: context {ctx}{' (ended)' if rec.ended_at else ''}")


@kernel_app.command("spawn")
def kernel_spawn(goal: str,
                 kernel_id: Optional[str] = typer.Option(None, "--id", help="default: from the goal"),
                 tags: List[str] = typer.Option([], "--tags", help="a domain (repeat)"),
                 examples: Optional[Path] = typer.Option(None, "--examples",
                                                         help="file of canonical prompts, one a line"),
                 scope: List[str] = typer.Option([], "--scope", help="a path scope (repeat)"),
                 memory: Optional[str] = typer.Option(None, "--memory", help="e.g. 1G"),
                 cpu: Optional[str] = typer.Option(None, "--cpu", help="e.g. 50% (of one CPU)"),
                 region: Optional[str] = typer.Option(None, "--region"),
                 data_class: Optional[str] = typer.Option(None, "--data-class"),
                 doctrine: Optional[str] = typer.Option(None, "--doctrine",
                                                        help="its doctrine (text or a path)"),
                 card: Optional[str] = typer.Option(None, "--card"),
                 runtime: str = typer.Option("tmux", "--runtime", help="tmux | headless | kubernetes"),
                 restart: str = typer.Option("never", "--restart", help="never | on-failure"),
                 max_restarts: int = typer.Option(kernels.DEFAULT_MAX_RESTARTS, "--max-restarts"),
                 temporary: bool = typer.Option(False, "--temporary", help="a burst worker (needs --ttl)"),
                 ttl: Optional[str] = typer.Option(None, "--ttl", help="e.g. 2h (with --temporary)"),
                 env_file: Optional[Path] = typer.Option(None, "--env-file",
                                                         help="KEY=value lines: the kernel's credentials"),
                 no_sandbox: bool = typer.Option(False, "--no-sandbox",
                                                 help="run it without its OS sandbox (recorded)")):
    """Create kernels/<id>/, register its goal and start it in its own sandbox (a human command)."""
    operator_only("spawning a kernel")
    from nika_brain.federation.kernels import credentials, runtimes, verbs
    env = credentials.read_file(env_file) if env_file is not None else None
    ex: list[str] = []
    if examples is not None:
        from nika_brain.support import fsio
        try:   # a regular file only: no FIFO, no /dev/zero
            text = fsio.read_text(examples, limit=1 << 20)
        except BrainError as exc:
            raise BrainError(f"cannot read examples file {examples}: {exc.message}") from exc
        ex = [ln.strip() for ln in text.splitlines() if ln.strip()]
    k = verbs.kernel_spawn(Brain.find(), goal, scope=scope, resource_limits={"memory": memory, "cpu": cpu},
                           kernel_id=kernel_id, tags=tags, examples=ex, region=region,
                           data_class=data_class, doctrine=doctrine, card=card, runtime=runtime,
                           restart=restart, max_restarts=max_restarts, temporary=temporary, ttl=ttl,
                           env=env, sandboxed=not no_sandbox)
    brain = Brain.find()
    from nika_brain.federation.kernels import remote
    where = remote.elsewhere(brain, k)
    if where:  # placed on a machine of its region: that machine's daemon spawned it
        print(f"spawned {k.id} on machine {where} (region {k.region}: placed there through the bus; "
              f"{k.runtime}, sandbox {k.sandbox or '-'}); its record comes here with the next sync")
        return
    print(f"spawned {k.id} ({k.runtime}, limits {k.limits} [{k.enforcement}], sandbox {k.sandbox or '-'})"
          + (f"; credentials: {', '.join(sorted(env))}" if env else ""))
    _say_trust(runtimes.load_state(brain, k.id))
    from nika_brain.federation.kernels import doctrine as doctrines
    doc = doctrines.for_hook(brain, k.id)
    if doc is not None and (doc.text or doc.enforced):
        print(f"doctrine ({', '.join(doc.sources)}): given to its session at start; enforced: "
              + (doc.policy_line() if doc.enforced or set(doc.sources) != {"kernel.yml"} else
                 "nothing (free text states no policy: name a doctrines/<id>.yml with invariants "
                 "external_writes, network, tools_denied)"))


def _say_trust(state: dict) -> None:
    if state.get("claude_config"):
        print(f"trusted the kernel's folder in Claude Code's config {state['claude_config']} "
              "(projects.<folder>.hasTrustDialogAccepted)")


@kernel_app.command("invoke")
def kernel_invoke(kernel_id: str, prompt: str,
                  wait: bool = typer.Option(False, "--wait", help="print the answer"),
                  timeout: float = typer.Option(600.0, "--timeout", help="seconds --wait waits")):
    """Deliver a prompt and confirm the agent took it (exit 8 when it could not: it stays queued)."""
    from nika_brain.federation.kernels import verbs
    if not 0 < timeout <= 86400:
        raise BrainError("--timeout must be between 0 and 86400 seconds")
    out = verbs.kernel_invoke(Brain.find(), kernel_id, prompt, wait=wait, timeout=timeout,
                              by=getpass.getuser())
    print(out["answer"] or "" if wait else f"prompt {out['id']} taken by {out['kernel']} at {out['taken']}")


@kernel_app.command("readjust")
def kernel_readjust(kernel_id: str, directive: str):
    """Inject a directive into a running kernel without killing it (the seed's readjust verb)."""
    operator_only("readjusting a kernel")
    from nika_brain.federation.kernels import verbs
    d = verbs.kernel_readjust(Brain.find(), kernel_id, directive, by=getpass.getuser())
    print(f"directive {d.id} queued for {kernel_id}")


@kernel_app.command("observe")
def kernel_observe(kernel_id: str, since: str = typer.Option("1h", "--since"),
                   query: Optional[str] = typer.Option(None, "--query"),
                   as_json: bool = typer.Option(False, "--json")):
    """Recent heartbeats, context use, directives, claims, sessions and queue of a kernel."""
    from nika_brain.federation.kernels import verbs
    o = verbs.kernel_observe(Brain.find(), kernel_id, since=since, query=query)
    if as_json:
        print(json.dumps(o, default=str))
        return
    k, m = o["kernel"], o["metrics"]
    hb = o["last_heartbeat"] or {}
    print(f"{k['id']}: {k['status']} ({k.get('runtime', 'tmux')}) - {k['goal']}")
    ctx = "-" if m["context_pct"] is None else m["context_pct"]
    ttfa = "-" if m["ttfa_s"] is None else m["ttfa_s"]
    print(f"  last heartbeat: {hb.get('at', '-')}  context: {ctx}%"
          f"  error rate: {m['error_rate']}  ttfa: {ttfa}s"
          f"  queue: {m['queue_depth']}")
    for e in o["health_events"]:
        print(f"  {e.get('at')} {e.get('kind')}: {e.get('reason', '')}")
    for d in o["directives"]:
        print(f"  directive {d['id']} ({d['at']}): {d['text']}")
    for s in o["sessions"]:
        print(f"  session {s['id']} started {s['started_at']} context {s['context_pct']}")
    for c in o["claims"]:
        print(f"  claim {c['id']} {c['status']} {c['result'] or ''}")
    for sg in o["signals"]:
        print(f"  signal {sg.get('time')} {sg.get('type')} {sg.get('claim') or ''} {sg.get('reason') or ''}")
    for q in o["queue"]:
        print(f"  queued {q['id']} ({q['at']}): {q['prompt'][:80]}")
    fed = o.get("federation") or {}
    for t in fed.get("queue", []):
        if "error" in t:
            print(f"  work-stealing queue: {t['error']}")
            continue
        where = f" -> {t['kernel']}" if t["kernel"] != k["id"] else ""
        print(f"  task {t['id']} {t['state']}{where}: {t['summary'][:80]}")
    if fed.get("stealing"):
        print("  stealing: " + ", ".join(f"{key} {v}" for key, v in fed["stealing"].items() if key != "kernel"))
    for h in fed.get("handovers", []):
        print(f"  handover {h['from_kernel']} -> {h['successor']} at {h['pct']}% (root {h['root']})")
    for p in fed.get("proposals", []):
        print(f"  spawn proposal {p['id']} ({p['trigger']}) pending: {p['goal']}")
    if "vault" in o:
        print(f"  vault: {json.dumps(o['vault'], default=str)[:2000]}")


@kernel_app.command("kill")
def kernel_kill(kernel_id: str, reason: str = typer.Option(..., "--reason")):
    """Stop a kernel (graceful, then forced); keeps its folder and history."""
    operator_only("killing a kernel")
    from nika_brain.federation.kernels import verbs
    out = verbs.kernel_kill(Brain.find(), kernel_id, reason, by=getpass.getuser())
    how = out["how"] or "not running"
    print(f"killed {out['kernel']} in {out['seconds']}s ({how}); released {len(out['locks_released'])} lock(s), "
          f"failed {len(out['claims_failed'])} claim(s)")


@kernel_app.command("ready")
def kernel_ready(kernel_id: str):
    """Exit 0 when the kernel's agent session has started here and not ended (a pod's readiness probe)."""
    from nika_brain.state import sessions
    brain = Brain.find()
    kernels.load_kernel(brain, kernel_id)   # an unknown kernel is an error, not "not ready"
    live = [s for s in sessions.list_sessions(brain) if s.kernel == kernel_id and not s.ended_at]
    if not live:
        print(f"kernel {kernel_id}: no session started yet", file=sys.stderr)
        raise typer.Exit(1)
    print(f"kernel {kernel_id}: ready (session {live[-1].id})")


def _start(kernel_id: str, restart: bool) -> None:
    operator_only("restarting a kernel" if restart else "starting a kernel")
    from nika_brain.federation.kernels import runtimes, verbs
    brain = Brain.find()
    verb = verbs.kernel_restart if restart else verbs.kernel_start
    k = verb(brain, kernel_id, by=getpass.getuser())
    print(f"{'restarted' if restart else 'started'} {k.id} ({k.runtime}); queued prompts are delivered "
          "once its session has started")
    _say_trust(runtimes.load_state(brain, k.id))


@kernel_app.command("start")
def kernel_start(kernel_id: str):
    """Start a dead, killed or failed kernel again (same id, history kept)."""
    _start(kernel_id, restart=False)


@kernel_app.command("restart")
def kernel_restart(kernel_id: str):
    """Stop a kernel's agent and start it again (same id, history kept; picks up `kernel env`)."""
    _start(kernel_id, restart=True)


env_app = typer.Typer(no_args_is_help=True, help="A kernel's credentials (credentials.env, 0600).")
kernel_app.add_typer(env_app, name="env")


@env_app.command("set")
def kernel_env_set(kernel_id: str, assignment: str = typer.Argument(..., metavar="KEY=VALUE")):
    """Set one variable of the kernel's credentials (applies at its next start)."""
    operator_only("setting a kernel's credentials")
    from nika_brain.federation.kernels import verbs
    key, eq, value = assignment.partition("=")
    if not eq:
        raise BrainError("expected KEY=VALUE")
    out = verbs.kernel_env(Brain.find(), kernel_id, key, value)
    print(f"set {out['key']} for {kernel_id}" +
          (f"; applies at its next start: nika-brain kernel restart {kernel_id}" if out["restart"] else ""))


@env_app.command("unset")
def kernel_env_unset(kernel_id: str, key: str = typer.Argument(..., metavar="KEY")):
    """Remove one variable from the kernel's credentials (applies at its next start)."""
    operator_only("changing a kernel's credentials")
    from nika_brain.federation.kernels import verbs
    out = verbs.kernel_env(Brain.find(), kernel_id, key, None)
    print(f"unset {out['key']} for {kernel_id}" +
          (f"; applies at its next start: nika-brain kernel restart {kernel_id}" if out["restart"] else ""))
