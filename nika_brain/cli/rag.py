"""`nika-brain rag ...`: the shared vault (ingest, query, grant, revoke, tree, merge, summarize,
stats, purge). Thin: each command parses, calls one function of nika_brain.federation.vault, prints."""
# ruff: noqa: B008  (typer declares options as argument defaults)
from __future__ import annotations

import json
import os
import sys

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app, json_object, operator_only
from nika_brain.errors import BrainError

rag_app = typer.Typer(no_args_is_help=True,
                      help="The shared vault: scoped RAG per kernel (nika_vault), grants, summaries.")
app.add_typer(rag_app, name="rag")


DOOR_COMMANDS = ("query", "ingest", "summaries")   # what a kernel's sandbox reaches, through its door


@rag_app.callback()
def _inside_a_kernel(ctx: typer.Context) -> None:
    from nika_brain.bus import door
    if door.present() and ctx.invoked_subcommand not in DOOR_COMMANDS:
        raise BrainError(f"`rag {ctx.invoked_subcommand}` is not a kernel's: inside its sandbox, only "
                         f"{', '.join('rag ' + c for c in DOOR_COMMANDS)} go (through its door)")


def _door_line(r: dict) -> str:
    score = f"{r['score']:.3f}\t" if r.get("score") is not None else ""
    return f"{score}{r.get('id')}\t{r.get('level')}\t{' '.join(str(r.get('text', '')).split())[:100]}"


def _known_kernel(brain: Brain, kernel_id: str) -> None:
    from nika_brain.state import kernels
    kernels.load_kernel(brain, kernel_id)


def _rec_line(r) -> str:
    score = f"{r.score:.3f}\t" if r.score is not None else ""
    text = " ".join(r.text.split())
    return f"{score}{r.id}\t{r.level}\t{text[:100]}"


@rag_app.command("ingest")
def rag_ingest(paths: list[str] = typer.Argument(..., help="files and folders (text, Markdown, PDF)"),
               kernel: str = typer.Option(..., "--kernel"),
               level: str = typer.Option("atomic", "--level"),
               parent: str = typer.Option("", "--parent", help="record id of the parent"),
               as_json: bool = typer.Option(False, "--json")):
    """Ingest text, Markdown and PDF files and folders into a kernel's vault records."""
    from nika_brain.bus import door
    if door.present():  # the door knows which kernel asks; --kernel cannot say otherwise
        import os
        rep = door.call("ingest", paths=[os.path.abspath(p) for p in paths])
        print(json.dumps(rep) if as_json else f"{rep.get('added', 0)} added, {rep.get('already', 0)} "
              f"already there, {rep.get('dropped', 0)} near-duplicate(s) dropped (through the door)")
        return
    from nika_brain.federation.vault.ingest import ingest
    from nika_brain.federation.vault.query import caller_kernel
    brain = Brain.find()
    kernel = caller_kernel(kernel)
    _known_kernel(brain, kernel)
    from nika_brain.federation.vault import store as vstore
    vstore.store(brain)   # the store first: without the federation extra, one line before any progress
    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None and total:
            bar = typer.progressbar(length=total, label=f"ingest {kernel}", file=sys.stderr)
            bar.__enter__()
        if bar is not None:
            bar.update(done - bar.pos)

    try:
        report = ingest(brain, paths, kernel, level=level, parent=parent, progress=progress)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    for file, msg in report.errors:
        print(f"nika-brain: {file}: {msg}", file=sys.stderr)
    if as_json:
        print(json.dumps(report.to_json()))
    else:
        print(f"{kernel}: {report.files} file(s), {report.chunks} chunk(s): {report.added} added, "
              f"{report.already} already there, {report.dropped} near-duplicate(s) dropped, "
              f"{len(report.errors)} file(s) refused")
    if report.errors:
        raise typer.Exit(1)


@rag_app.command("query")
def rag_query(text: str, kernel: str | None = typer.Option(None, "--kernel"),
              k: int = typer.Option(5, "--k"),
              level: list[str] = typer.Option([], "--level"),
              owners: list[str] = typer.Option([], "--from", help="also read this kernel's records "
                                                "(needs a grant)"),
              where: str | None = typer.Option(None, "--where", help="extra metadata filter, JSON"),
              include_superseded: bool = typer.Option(False, "--all", help="include chunks merged "
                                                      "into super-chunks"),
              as_json: bool = typer.Option(False, "--json")):
    """Search the records the kernel may read (its own, plus granted kernels with --from)."""
    from nika_brain.bus import door
    if door.present():  # inside a kernel's sandbox: the door answers as that kernel
        rows = door.call("query", text=text, kernel=kernel, k=k, levels=level, owners=owners)
        print(json.dumps(rows, ensure_ascii=False) if as_json else "\n".join(map(_door_line, rows)))
        return
    from nika_brain.federation.vault.query import caller_kernel, search
    extra = json_object(where, "--where") if where else None
    brain = Brain.find()
    for known in (caller_kernel(kernel), *owners):   # an unknown kernel is an error, not an empty answer
        _known_kernel(brain, known)
    _reading_as(brain, caller_kernel(kernel))
    recs = search(brain, text, kernel=kernel, k=k, levels=level, owners=owners, where=extra,
                  include_superseded=include_superseded)
    if as_json:
        print(json.dumps([r.to_json() for r in recs], ensure_ascii=False))
        return
    for r in recs:
        print(_rec_line(r))


def _reading_as(brain: Brain, kernel: str) -> None:
    """Reading a kernel's records from outside any kernel's session (no door, no NIKA_KERNEL_ID: a
    satellite, a script) is the operator's act: a kernel reads as itself through its door or its
    own session (issue 24, hole 3)."""
    if not os.environ.get("NIKA_KERNEL_ID"):
        from nika_brain.state import authority
        authority.require(brain, f"reading kernel {kernel}'s vault records outside its session")


@rag_app.command("grant")
def rag_grant(owner: str = typer.Argument(..., help="the kernel whose records are shared"),
              reader: str = typer.Argument(..., help="the kernel that may read them"),
              level: list[str] = typer.Option([], "--level", help="only these levels (repeat)"),
              until: str | None = typer.Option(None, "--until", help="ISO time the grant ends")):
    """Let READER read OWNER's records (a file in grants/, journaled)."""
    operator_only("granting vault access")
    from nika_brain.federation.vault import grants
    brain = Brain.find()
    _known_kernel(brain, owner)
    _known_kernel(brain, reader)
    g = grants.grant(brain, owner, reader, levels=level, until=until)
    print(f"{reader} may read {owner}'s records ({', '.join(g.levels) or 'all levels'}, "
          f"until {g.until or 'revoked'}): {brain.rel(grants.grant_path(brain, owner, reader))}")


@rag_app.command("revoke")
def rag_revoke(owner: str, reader: str):
    """Withdraw READER's access to OWNER's records."""
    operator_only("revoking vault access")
    from nika_brain.federation.vault import grants
    if not grants.revoke(Brain.find(), owner, reader):
        raise BrainError(f"no grant from {owner} to {reader}")
    print(f"{reader} may no longer read {owner}'s records")


@rag_app.command("grants")
def rag_grants(as_json: bool = typer.Option(False, "--json")):
    """List the grants."""
    from nika_brain.federation.vault import grants
    from nika_brain.state.grants import authentic
    brain = Brain.find()
    gs = [(g, authentic(brain, g)) for g in grants.list_grants(brain)]
    if as_json:
        print(json.dumps([g.__dict__ | {"levels": list(g.levels), "authentic": why is None,
                                        "ignored": why} for g, why in gs]))
        return
    for g, why in gs:
        print(f"{g.owner} -> {g.reader}\t{','.join(g.levels) or 'all'}\tuntil {g.until or '-'}\tby {g.by}"
              + (f"\tIGNORED: {why}" if why else ""))


@rag_app.command("tree")
def rag_tree(record: str, kernel: str | None = typer.Option(None, "--kernel"),
             as_json: bool = typer.Option(False, "--json")):
    """A record's ancestors (strategy → atomic) and children."""
    from nika_brain.federation.vault.query import caller_kernel, tree
    brain = Brain.find()
    reader = kernel or record.split(":", 1)[0]
    _reading_as(brain, caller_kernel(reader))
    t = tree(brain, record, kernel=reader)
    if as_json:
        print(json.dumps({"record": t["record"].to_json(),
                          "ancestors": [r.to_json() for r in t["ancestors"]],
                          "children": [r.to_json() for r in t["children"]]}, ensure_ascii=False))
        return
    depth = 0
    for r in t["ancestors"]:
        print("  " * depth + _rec_line(r))
        depth += 1
    print("  " * depth + "* " + _rec_line(t["record"]))
    for r in t["children"]:
        print("  " * (depth + 1) + _rec_line(r))


@rag_app.command("merge")
def rag_merge(kernel: str = typer.Option(..., "--kernel")):
    """Merge groups of frequent near-duplicates into super-chunks."""
    from nika_brain.federation.vault.superchunks import merge
    made = merge(Brain.find(), kernel)
    for s in made:
        print(f"{s.id}\treplaces {len(s.replaces)}: {', '.join(s.replaces)}")
    print(f"{kernel}: {len(made)} super-chunk(s)")


@rag_app.command("summarize")
def rag_summarize(kernel: str | None = typer.Option(None, "--kernel", help="default: every kernel"),
                  day: str | None = typer.Option(None, "--day", help="YYYY-MM-DD, default today (UTC)"),
                  as_json: bool = typer.Option(False, "--json")):
    """Write the day's summary per kernel into nika_federation_summaries (replaced on rerun)."""
    from nika_brain.federation.vault import summaries
    from nika_brain.state import kernels
    brain = Brain.find()
    ids = [kernel] if kernel else [k.id for k in kernels.list_kernels(brain)]
    out = []
    for kid in ids:
        s = summaries.summarize(brain, kid, day)
        out.append({"kernel": kid, "summary": s.to_json() if s else None})
        if not as_json:
            print(f"{kid}: " + (f"{s.id} ({len(s.text)} chars)" if s else "nothing that day"))
    if as_json:
        print(json.dumps(out, ensure_ascii=False))


@rag_app.command("summaries")
def rag_summaries(day: str | None = typer.Option(None, "--day", help="YYYY-MM-DD"),
                  as_json: bool = typer.Option(False, "--json")):
    """Every kernel's daily summaries (what the others do, without their transcripts)."""
    from nika_brain.bus import door
    if door.present():
        rows = door.call("summaries", day=day)
    else:
        from nika_brain.federation.vault import summaries
        rows = [x.to_json() for x in summaries.list_summaries(Brain.find(), day=day)]
    if as_json:
        print(json.dumps(rows, ensure_ascii=False))
        return
    for r in rows:
        print(f"{r.get('kernel_id')}\t{r.get('key', '')}\t{' '.join(str(r.get('text', '')).split())}")


@rag_app.command("stats")
def rag_stats(kernel: str | None = typer.Option(None, "--kernel"),
              as_json: bool = typer.Option(False, "--json")):
    """What the vault holds, per kernel."""
    from nika_brain.federation.vault.admin import stats
    s = stats(Brain.find(), kernel)
    if as_json:
        print(json.dumps(s))
        return
    print(f"store: {s['store']} ({s['where']}); {s['records']} record(s), {s['summaries']} "
          f"summary(ies), {s['grants']} grant(s)")
    for kid, row in s["kernels"].items():
        levels = ", ".join(f"{lv} {n}" for lv, n in row["levels"].items())
        print(f"  {kid}: {row['records']} records ({row['live']} live, {row['super']} super, "
              f"{row['superseded']} merged), {row['duplicates_dropped']} duplicates dropped, "
              f"{row['summaries']} summaries; {levels}")


@rag_app.command("purge")
def rag_purge(kernel: str = typer.Option(..., "--kernel"),
              yes: bool = typer.Option(False, "--yes", help="required: this deletes the records")):
    """Delete a kernel's records, summaries and grants (what a killed kernel leaves behind)."""
    operator_only("purging a kernel's vault records")
    from nika_brain.federation.vault.admin import purge
    if not yes:
        raise BrainError(f"rag purge deletes every vault record of {kernel}: add --yes to confirm")
    r = purge(Brain.find(), kernel)
    print(f"{kernel}: {r['records']} record(s), {r['summaries']} summary(ies), {r['grants']} grant(s) removed")
