"""Spawn proposals and triggers: `kernel proposals|propose|approve|reject|triggers`."""

from __future__ import annotations

import json

import typer

from nika_brain.brain import Brain
from nika_brain.cli import operator_only
from nika_brain.cli.kernel import kernel_app


def _line(p: dict) -> str:
    extra = f" -> {p['spawned']}" if p.get("spawned") else (f" ({p['error']})" if p.get("error") else "")
    return (
        f"{p['id']}\t{p['status']}{extra}\t{p['trigger']}\t{p.get('kernel') or '-'}\t"
        f"mem~{p.get('memory_estimate', '?')}\t{p['goal']}\n    why: {p.get('why', '')}"
    )


@kernel_app.command("proposals")
def kernel_proposals(
    status: str | None = typer.Option(None, "--status"), as_json: bool = typer.Option(False, "--json")
):
    """Spawn proposals written by the triggers, each waiting for a human (gates decided elsewhere
    are applied first)."""
    from nika_brain.federation.spawning import proposals

    brain = Brain.find()
    proposals.reconcile(brain)
    ps = proposals.list_proposals(brain, status)
    if as_json:
        print(json.dumps(ps, ensure_ascii=False, default=str))
        return
    if not ps:
        print("no spawn proposals")
    for p in ps:
        print(_line(p))


@kernel_app.command("propose")
def kernel_propose(
    goal: str, kernel: str | None = typer.Option(None, "--kernel", help="the kernel it comes from")
):
    """Propose a new kernel (the explicit trigger); a human approves or rejects it."""
    from nika_brain.federation.spawning import triggers

    p = triggers.explicit(Brain.find(), goal, kernel=kernel, by="cli")
    print(
        f"{p['id']} pending (gate {p['gate']})"
        if p
        else "not proposed: the same request is pending or was rejected"
    )


@kernel_app.command("approve")
def kernel_approve(proposal_id: str, note: str = typer.Option("", "--note")):
    """Approve a spawn proposal (a human only): the kernel is spawned."""
    operator_only("approving a spawn proposal")
    from nika_brain.federation.spawning import proposals

    p = proposals.decide(Brain.find(), proposal_id, "approve", note=note)
    print(_line(p))
    if p["status"] == "failed":
        raise typer.Exit(1)


@kernel_app.command("reject")
def kernel_reject(proposal_id: str, note: str = typer.Option("", "--note")):
    """Reject a spawn proposal (a human only): its trigger stays silent until its measure changes."""
    operator_only("rejecting a spawn proposal")
    from nika_brain.federation.spawning import proposals

    print(_line(proposals.decide(Brain.find(), proposal_id, "reject", note=note)))


@kernel_app.command("triggers")
def kernel_triggers(kernel: list[str] = typer.Option([], "--kernel")):  # noqa: B008
    """Evaluate the saturation, diversity and doctrine triggers now; print the proposals written."""
    from nika_brain.federation.spawning import triggers

    written = triggers.run_all(Brain.find(), list(kernel or []) or None)
    if not written:
        print("no new spawn proposal")
    for p in written:
        print(_line(p))
