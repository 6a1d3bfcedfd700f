"""ADAPT {workflow, changes}: brain-hypervisor modifies the plan mid-sequence.

Changes are recorded in the run (runs/<name>.yml `adaptations`) and applied on top of the declared
workflow each time it is read, so the workflow file itself stays as declared and reviewable.
  {op: skip,    step: <id>}
  {op: insert,  after: <id>, step: {<a step mapping>}}
  {op: replace, step: <id>, with: {<a step mapping>}}
"""
from __future__ import annotations

from dataclasses import replace

from nika_brain.errors import BrainError
from nika_brain.state.workflows import Step, Workflow, _step, check_routes
from nika_brain.support.yamlsafe import dumps, loads

OPS = ("skip", "insert", "replace")


def _parse_step(mapping: object, where: str) -> Step:
    if not isinstance(mapping, dict):
        raise BrainError(f"ADAPT {where}: a step must be a mapping")
    doc = loads(dumps({"chain": [mapping]}), f"<ADAPT {where}>")
    return _step(doc, doc.data["chain"][0], 0)


def apply(wf: Workflow, changes) -> Workflow:
    chain = list(wf.chain)
    ids = lambda: [s.id for s in chain]  # noqa: E731
    for i, ch in enumerate(changes):
        if not isinstance(ch, dict) or ch.get("op") not in OPS:
            raise BrainError(f"ADAPT change {i}: op must be one of {', '.join(OPS)}")
        op = ch["op"]
        if op == "skip":
            sid = str(ch.get("step"))
            if sid not in ids():
                raise BrainError(f"ADAPT skip: no step {sid}")
            del chain[ids().index(sid)]
        elif op == "insert":
            after = str(ch.get("after"))
            if after not in ids():
                raise BrainError(f"ADAPT insert: no step {after} to insert after")
            new = _parse_step(ch.get("step"), f"insert after {after}")
            if new.id in ids():
                raise BrainError(f"ADAPT insert: step {new.id} already exists")
            chain.insert(ids().index(after) + 1, new)
        else:
            sid = str(ch.get("step"))
            if sid not in ids():
                raise BrainError(f"ADAPT replace: no step {sid}")
            new = _parse_step({**(ch.get("with") or {}), "step": ch.get("step")}, f"replace {sid}")
            chain[ids().index(sid)] = new
    if not chain:
        raise BrainError("ADAPT would leave the workflow without steps")
    out = replace(wf, chain=tuple(chain))
    check_routes(out)
    return out
