"""`nika-brain ask`: triage a prompt, deliver it, wait for the answers, record it all.

The decision comes from the triage (through the federation daemon's resident embedder and goals
index when a daemon runs, in this process otherwise): `kernel` -> one route; `split` -> one route per
part, each to its kernel; `fallback` -> one route to the generalist kernel the triage names
(`federation.triage.default`); `refused` (the data policy lets no kernel take it, the generalist
included) -> recorded with no route, and Refused (exit 6) with the triage's reason. Each route is
delivered with kernel_invoke (queued first, so nothing
is lost: a kernel not ready yet gets it when it is); with `wait`, each route's answer is the kernel's
reply to that prompt. Statuses: taken, queued (it waits in the kernel's queue),
held (its kernel's machine is lost: held on that machine's stream, not re-routed; `ask show` says
taken once the machine came back and ran it), answered, failed.
"""
from __future__ import annotations

import socket
import time

from nika_brain.brain import Brain
from nika_brain.errors import BrainError, Refused
from nika_brain.federation import resident
from nika_brain.federation.asking import record
from nika_brain.federation.kernels import remote, runtimes, verbs
from nika_brain.state import prompts as queue
from nika_brain.support import clock


def decide(brain: Brain, prompt: str, sent: socket.socket | None = None) -> dict:
    """The triage's decision as a dict (Decision.as_dict()), from the daemon when one runs. `sent`: the
    request already sent (resident.send): a cold `nika-brain ask` sends it before importing this
    module, whose delivery imports load while the daemon embeds the prompt."""
    answer = resident.receive(sent) if sent is not None else \
        resident.request(brain.state_dir, "triage", prompt=prompt, context=None)
    if answer is not None:
        return answer["decision"]
    from nika_brain.federation.triage.decide import triage
    return triage(brain, prompt).as_dict()


def routes_of(d: dict, prompt: str) -> list[dict]:
    if d["decision"] == "split" and d.get("parts"):
        pairs = [(p["kernel"], p["text"]) for p in d["parts"]]
    else:
        pairs = [(d["kernels"][0], prompt)]
    return [{"kernel": k, "prompt": text, "prompt_id": None, "status": "queued", "answer": None}
            for k, text in pairs]


SCORES_KEPT = 5


def top_scores(d: dict) -> list[dict]:
    """The triage's highest calibrated scores (kernel, score, threshold, passes, why_not): what the
    console's Asks page shows beside the decision, and what an operator's correction is judged on."""
    keep = ("kernel", "score", "threshold", "passes", "allowed", "why_not")
    return [{k: s[k] for k in keep if k in s} for s in (d.get("scores") or [])[:SCORES_KEPT]
            if isinstance(s, dict) and "kernel" in s]


def ask(brain: Brain, prompt: str, *, wait: bool = False, timeout: float = 600.0, by: str = "",
        sent: socket.socket | None = None) -> dict:
    queue.check(prompt)
    d = decide(brain, prompt, sent)
    refused = d["decision"] == "refused" or not d.get("kernels")
    rec = {"ask": record.new_id(), "at": clock.iso(clock.now()), "by": by, "prompt": prompt,
           "decision": d["decision"], "reason": d.get("reason"), "scores": top_scores(d),
           "routes": [] if refused else routes_of(d, prompt)}
    record.save(brain, rec)
    if refused:  # the data policy holds on every route: no allowed kernel, the generalist included
        raise Refused(f"ask {rec['ask']} refused: {d.get('reason') or 'no kernel may take it'}")
    taken: list[tuple[dict, dict]] = []
    for r in rec["routes"]:
        try:
            # with wait, each route's prompt gets a turn of its own: the answer awaited is its own
            out = verbs.kernel_invoke(brain, r["kernel"], r["prompt"], by=by or "ask", own_turn=wait,
                                      timeout=timeout)
        except remote.Held as exc:  # its machine is lost: held there, delivered once when it returns
            r.update(status="held", machine=exc.machine, request=exc.request, reason=str(exc))
            continue
        except runtimes.NotTaken as exc:
            r.update(status="queued" if exc.queued else "failed", prompt_id=exc.queued, reason=str(exc))
            continue
        except BrainError as exc:
            r.update(status="failed", reason=str(exc))
            continue
        r.update(kernel=out["kernel"], status="taken", prompt_id=out["id"], session=out["session"])
        taken.append((r, out))
    record.save(brain, rec)
    if wait:
        deadline = time.monotonic() + timeout
        for r, out in taken:
            try:
                ev = verbs.await_answer(brain, out["kernel"], out["id"], out, out["offset"],
                                        max(0.1, deadline - time.monotonic()))
            except runtimes.NotTaken as exc:
                r.update(status="failed", reason=str(exc))
                continue
            except BrainError as exc:  # no answer in time: it is still taken
                r["reason"] = str(exc)
                continue
            ref = {"kernel": out["kernel"], "session": ev.get("session"), "at": ev.get("at"),
                   "offset": ev.get("offset")}
            if "result" in ev:
                ref["result"] = ev["result"]
            elif ev.get("machine"):  # answered on another machine: its events are there, the text here
                ref.update(machine=ev["machine"], result=ev.get("text"))
            r.update(status="answered", answer_ref=ref)
        record.save(brain, rec)
    return record.resolve(brain, rec)


def public(rec: dict) -> dict:
    """The `--json` shape: {"ask", "decision", "routes": [{kernel, prompt, prompt_id, status, answer}]}."""
    return {"ask": rec["ask"], "decision": rec["decision"], "reason": rec.get("reason"),
            "routes": [{"kernel": r["kernel"], "prompt": r["prompt"], "prompt_id": r.get("prompt_id"),
                        "status": r["status"], "answer": r.get("answer"),
                        **({"reason": r["reason"]} if r.get("reason") and r["status"] != "answered" else {})}
                       for r in rec["routes"]]}
