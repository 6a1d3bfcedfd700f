"""Work-stealing commands: `kernel enqueue`, `kernel queue`, `kernel work` (federation/stealing/protocol.py)."""

from __future__ import annotations

import json

import typer

from nika_brain.brain import Brain
from nika_brain.cli.kernel import kernel_app


def _bus(brain: Brain):
    from nika_brain.bus import open_bus

    return open_bus(brain)


@kernel_app.command("enqueue")
def kernel_enqueue(
    kernel_id: str,
    summary: str,
    priority: float = typer.Option(0.5, "--priority", help="0..1"),
    prompt: str = typer.Option(None, "--prompt", help="what the kernel is asked (default: the summary)"),
    task_id: str = typer.Option(None, "--id"),
):
    """Put a task in a kernel's queue; idle kernels may steal it (task_available / task_claim)."""
    from nika_brain.federation.kernels.verbs import check_live
    from nika_brain.federation.stealing import protocol as stealing

    brain = Brain.find()
    check_live(brain, kernel_id, "run this task")
    from nika_brain.federation.stealing.texts import Texts
    task = stealing.enqueue(
        _bus(brain), kernel_id, summary, texts=Texts(brain), priority=priority, prompt=prompt, task_id=task_id
    )
    print(task["id"])


@kernel_app.command("queue")
def kernel_queue(kernel_id: str, as_json: bool = typer.Option(False, "--json")):
    """The kernel's open tasks: waiting, kept, granted to another kernel, running."""
    from nika_brain.federation.stealing import protocol as stealing
    from nika_brain.state.kernels import load_kernel

    brain = Brain.find()
    load_kernel(brain, kernel_id)  # an unknown kernel is an error, not an empty queue
    from nika_brain.errors import BrainError
    from nika_brain.federation.stealing.texts import Texts
    tasks = stealing.queue(_bus(brain), kernel_id)
    texts = Texts(brain)   # the operator's view: the summaries from the brain (the bus has references)
    for t in tasks:
        try:
            t["summary"] = texts.task(t)["summary"]
        except BrainError as exc:
            t["summary"] = f"({exc})"
    if as_json:
        print(json.dumps(tasks, ensure_ascii=False))
        return
    if not tasks:
        print(f"{kernel_id}: queue empty")
    for t in tasks:
        where = f" -> {t['kernel']}" if t["kernel"] != kernel_id else ""
        print(f"{t['id']}\t{t['state']}{where}\tp={t['priority']:g}\t{t['summary']}")


@kernel_app.command("work")
def kernel_work(kernel_id: str):
    """Serve a kernel's side of work stealing until interrupted: run its queue through the kernel
    (kernel_invoke), offer what waits to idle kernels, claim others' tasks when idle."""
    from nika_brain.federation.stealing import protocol as stealing

    brain = Brain.find()
    from nika_brain.federation.kernels.verbs import kernel_invoke

    def run(task: dict) -> dict:
        got = kernel_invoke(brain, kernel_id, task["prompt"], wait=True)
        return {"answer": got.get("answer"), "session": got.get("session")}

    stealing.serve_kernel(lambda: stealing.worker_for(brain, kernel_id, run))
