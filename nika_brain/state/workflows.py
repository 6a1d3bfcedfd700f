"""Workflow files: workflows/<name>.yml — name, branch, chain of steps (BSI v3).

Exit actions (on_done / on_partial / on_fail):
  trigger:next | trigger:<step> | trigger:<workflow>/<step>   run that step next
  signal:<TYPE>                                               emit a BSI signal (halting ones stop)
  gate:human → "<msg>"   (or ->)                              block until a human approves/rejects
  notify:<msg>                                                log + INFO, no blocking
  abort                                                       stop the chain, signal ABORT
Defaults as in the seed: on_partial falls back to on_done, on_fail to signal:BLOCKED_ON, on_done to
trigger:next. Validation rejects unknown actions, triggers to missing steps and chains that can never
end, before anything runs.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from nika_brain.brain import STATE_FOLDERS, Brain, is_state_path
from nika_brain.errors import BrainError
from nika_brain.state.claims import LEVELS, SATELLITE_TYPES
from nika_brain.state.scopes import normalize_scope
from nika_brain.support.schema import F, fields, name, step_id, step_id_error, str_list
from nika_brain.support.yamlsafe import Doc, load_doc

SIGNALS = ("STEP_DONE", "GATE_PENDING", "BLOCKED", "BLOCKED_ON", "DONE", "CIRCUIT_BREAK", "ABORT",
           "ESCALATE", "CHECKPOINT", "INFO")
HALTING_SIGNALS = ("BLOCKED", "BLOCKED_ON", "CIRCUIT_BREAK", "ABORT", "ESCALATE")
GATES = ("human", "0-failures")
_SIGNAL_RE = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*")
_GATE_RE = re.compile(r"^gate:human\s*(?:→|->)\s*(?:\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)'|(?P<bare>.+?))\s*$")


@dataclass(frozen=True)
class Action:
    kind: str                 # trigger | signal | gate | notify | abort
    target: str = ""          # trigger: "next", a step id, or "<workflow>/<step>"; signal: its TYPE
    message: str = ""

    def __str__(self) -> str:
        if self.kind == "trigger":
            return f"trigger:{self.target}"
        if self.kind == "signal":
            return f"signal:{self.target}"
        if self.kind == "gate":
            return f'gate:human → "{self.message}"'
        if self.kind == "notify":
            return f"notify:{self.message}"
        return "abort"

    @property
    def halts(self) -> bool:
        return self.kind == "abort" or (self.kind == "signal" and self.target in HALTING_SIGNALS)


def parse_action(text: str) -> Action:
    t = str(text).strip()
    if t == "abort":
        return Action("abort")
    if t.startswith("trigger:"):
        target = t[len("trigger:"):].strip()
        if not target:
            raise BrainError("trigger: needs a step (next, N or <workflow>/<step>)")
        return Action("trigger", target)
    if t.startswith("signal:"):
        sig = t[len("signal:"):].strip()
        if not _SIGNAL_RE.fullmatch(sig):  # the card's list is open-ended: any UPPER_SNAKE type
            raise BrainError(f"not a signal type: {sig!r} (UPPER_SNAKE, e.g. {', '.join(SIGNALS)})")
        return Action("signal", sig)
    if t.startswith("gate:"):
        m = _GATE_RE.match(t)
        if not m:
            if t == "gate:human":
                return Action("gate", message="continue?")
            raise BrainError('gate action must read gate:human → "<message>"')
        return Action("gate", message=(m.group("dq") or m.group("sq") or m.group("bare") or "").strip())
    if t.startswith("notify:"):
        return Action("notify", message=t[len("notify:"):].strip())
    raise BrainError(f"unknown exit action {t!r} (trigger:, signal:, gate:human →, notify:, abort)")


@dataclass(frozen=True)
class Step:
    id: str                   # the `step:` value as text (usually 1, 2, 3...)
    type: str
    scope: tuple[str, ...]
    zone: str | None = None
    story_angle: str = ""
    agent: str | None = None
    gate: str | None = None   # human | 0-failures | None: checked before the step runs
    test: str | None = None   # shell command whose exit code / counts decide the 0-failures gate
    level: str | None = None  # domain | leaf; default: leaf for the final step, else domain
    on_done: Action = Action("trigger", "next")
    on_partial: Action | None = None
    on_fail: Action = Action("signal", "BLOCKED_ON")

    @property
    def partial_action(self) -> Action:
        return self.on_partial or self.on_done


@dataclass(frozen=True)
class Workflow:
    name: str
    branch: str
    chain: tuple[Step, ...]
    base: str | None = None
    agent: str | None = None
    test: str | None = None   # whole-workflow test command for the final 0-failures merge gate
    description: str = ""
    path: Path | None = None

    def step(self, step_id: str | int) -> Step:
        for s in self.chain:
            if s.id == str(step_id):
                return s
        raise BrainError(f"workflow {self.name} has no step {step_id}")

    def index_of(self, step_id: str | int) -> int:
        return [s.id for s in self.chain].index(str(step_id))

    def next_of(self, step_id: str | int) -> Step | None:
        i = self.index_of(step_id)
        return self.chain[i + 1] if i + 1 < len(self.chain) else None

    def level_of(self, step: Step) -> str:
        return step.level or ("leaf" if step is self.chain[-1] else "domain")


_STEP_SPEC = {
    "step": F((int, str), required=True, check=step_id_error),
    "type": F(str, required=True, choices=SATELLITE_TYPES),
    "scope": F((str, list), required=True),
    "zone": F(str),
    "story_angle": F(str, default=""),
    "agent": F(str, check=name),
    "gate": F(str, choices=GATES),
    "test": F(str),
    "level": F(str, choices=LEVELS),
    "on_done": F(str),
    "on_partial": F(str),
    "on_fail": F(str),
}
_SPEC = {
    "name": F(str, required=True, check=name),
    "branch": F(str, required=True),
    "base": F(str),
    "agent": F(str, check=name),
    "test": F(str),
    "description": F(str, default=""),
    "chain": F(list, required=True, check=lambda v: None if v else "a workflow needs at least one step"),
}


def _step(doc: Doc, data, i: int) -> Step:
    v = fields(doc, data, ("chain", i), _STEP_SPEC)
    scope = v["scope"] if isinstance(v["scope"], list) else [v["scope"]]
    if not scope or str_list(scope):
        raise doc.error("scope must be a path or a list of paths", "chain", i, "scope")
    try:
        scopes = tuple(normalize_scope(s) for s in scope)
    except BrainError as exc:
        raise doc.error(exc.message, "chain", i, "scope") from exc
    for s in scopes:
        if s != "." and is_state_path(s.rstrip("/")):
            raise doc.error(f"scope {s} lies in a folder only nika-brain writes "
                            f"({', '.join(f'{d}/' for d in STATE_FOLDERS)}): a step cannot work there",
                            "chain", i, "scope")
    actions = {}
    for key in ("on_done", "on_partial", "on_fail"):
        if v[key] is not None:
            try:
                actions[key] = parse_action(v[key])
            except BrainError as exc:
                raise doc.error(exc.message, "chain", i, key) from exc
    return Step(step_id(v["step"]), v["type"], scopes, v["zone"], v["story_angle"], v["agent"], v["gate"],
                v["test"], v["level"], actions.get("on_done", Action("trigger", "next")),
                actions.get("on_partial"), actions.get("on_fail", Action("signal", "BLOCKED_ON")))


def build(doc: Doc) -> Workflow:
    v = fields(doc, doc.data, (), _SPEC)
    steps = tuple(_step(doc, item, i) for i, item in enumerate(v["chain"]))
    seen: dict[str, int] = {}
    for i, s in enumerate(steps):
        if s.id in seen:
            raise doc.error(f"step {s.id} is declared twice", "chain", i, "step")
        seen[s.id] = i
    wf = Workflow(v["name"], v["branch"], steps, v["base"], v["agent"], v["test"], v["description"],
                  Path(doc.source))
    for i, s in enumerate(steps):
        if s.gate == "0-failures" and not (s.test or wf.test):
            raise doc.error("gate: 0-failures runs the step's (or the workflow's) test command before the "
                            "step starts, and refuses to start it when red: give test:", "chain", i, "gate")
    check_routes(wf, doc)
    return wf


def resolve_target(wf: Workflow, step: Step, action: Action) -> str | None:
    """The step id a trigger leads to inside this workflow; None = past the end (chain done).

    A trigger into another workflow ("<other>/<step>") returns "<other>/<step>" unchanged.
    """
    target = action.target
    if target == "next":
        nxt = wf.next_of(step.id)
        return nxt.id if nxt else None
    if "/" in target:
        other, sid = target.split("/", 1)
        if other == wf.name:
            return sid
        return target
    return target


def check_routes(wf: Workflow, doc: Doc | None = None) -> None:
    """Unknown trigger targets and chains that can never end are errors."""
    def err(msg: str, i: int, key: str) -> BrainError:
        return doc.error(msg, "chain", i, key) if doc else BrainError(f"{wf.name}: step {wf.chain[i].id}: {key}: {msg}")

    ids = {s.id for s in wf.chain}
    edges: dict[str, set] = {}
    for i, s in enumerate(wf.chain):
        outs: set[str | None] = set()
        for key, action in (("on_done", s.on_done), ("on_partial", s.partial_action), ("on_fail", s.on_fail)):
            if action.kind != "trigger":
                outs.add(None)  # halts, gates or notifies: a way out of any loop
                if action.kind == "notify":
                    nxt = wf.next_of(s.id)
                    outs.add(nxt.id if nxt else None)
                continue
            target = resolve_target(wf, s, action)
            if target is not None and "/" not in target and target not in ids:
                raise err(f"trigger to step {target!r}, which does not exist", i, key)
            outs.add(target if target is None or "/" not in target else None)
        edges[s.id] = outs
    # A chain can never end when, from some step, every path loops without reaching an exit (None).
    can_end: set[str | None] = {None}
    changed = True
    while changed:
        changed = False
        for sid, outs in edges.items():
            if sid not in can_end and outs & can_end:
                can_end.add(sid)
                changed = True
    for i, s in enumerate(wf.chain):
        if s.id not in can_end:
            raise err("the chain loops forever from this step (no exit action can ever be reached)",
                      i, "on_done")


_LOADED: dict[str, tuple[tuple[int, int, int], Workflow]] = {}


def load_workflow(path: Path | str) -> Workflow:
    """The workflow of a file; parsed again only when the file changed (a swarm run reads its
    workflow at every transition). A Workflow is frozen: sharing it is safe."""
    try:
        st = os.stat(path)
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        return build(load_doc(path))
    hit = _LOADED.get(str(path))
    if hit is not None and hit[0] == key:
        return hit[1]
    wf = build(load_doc(path))
    _LOADED[str(path)] = (key, wf)
    return wf


def find_workflow(brain: Brain, ref: str) -> Workflow:
    """By path (workflows/x.yml) or by name (x)."""
    p = Path(ref)
    if p.suffix in (".yml", ".yaml"):
        path = p if p.is_absolute() else Path.cwd() / p
        if not path.is_file() and (brain.root / p).is_file():
            path = brain.root / p
    else:
        if name(ref):
            raise BrainError(f"not a workflow name: {ref!r}")
        path = brain.workflows_dir / f"{ref}.yml"
    if not path.is_file():
        raise BrainError(f"no workflow file {ref}")
    return load_workflow(path)


def list_workflows(brain: Brain) -> list[Workflow]:
    """The valid workflows: an invalid file elsewhere never stops the others (`validate` names it)."""
    from nika_brain.state import listing
    return listing.load_each(brain, brain.workflows_dir, load_workflow)[0]
