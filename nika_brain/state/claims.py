"""Claims: one YAML per step execution, claims/sess-YYYYMMDD-HHMM-<theme>-step-N.yml (BSI v3).

A claim is opened before a satellite works on a step and closed with a `result:`; a closed claim is
final (never closed again, never reopened). Read-modify-write happens under the claims mutex.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from nika_brain.brain import Brain
from nika_brain.errors import BrainError, InvalidScope, Refused
from nika_brain.state.scopes import normalize_scope
from nika_brain.support import clock
from nika_brain.support.schema import F, fields, name, step_id, step_id_error, step_id_yaml, str_list
from nika_brain.support.yamlsafe import Doc, Parsed, dumps_fast

SATELLITE_TYPES = ("code", "brain-write", "test", "deploy", "search")
LEVELS = ("domain", "leaf")
RESULT_STATUSES = ("ok", "partial", "failed")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,150}$")


@dataclass(frozen=True)
class Result:
    status: str
    summary: str = ""
    tests_passed: int | None = None
    tests_failed: int | None = None


@dataclass(frozen=True)
class TestFailure:
    """The last refused validated close: the test command, what it printed (its tail) and when."""
    command: str
    exit: int
    passed: int
    failed: int
    output: str
    at: str


@dataclass(frozen=True)
class Claim:
    id: str
    workflow: str
    theme: str
    step: str                      # a step id (support.schema.step_id)
    satellite_type: str
    satellite_level: str
    scope: tuple[str, ...]
    zone: str | None
    status: str
    opened: datetime
    story_angle: str = ""
    agent: str | None = None
    on_done: str | None = None
    on_partial: str | None = None
    on_fail: str | None = None
    closed: datetime | None = None
    parent: str | None = None
    children: tuple[str, ...] = ()
    session: str | None = None
    touched: tuple[str, ...] = ()
    result: Result | None = None
    failed_tests: TestFailure | None = None   # kept while open, shown by `claim show`

    @property
    def is_open(self) -> bool:
        return self.status == "open"


_SPEC = {
    "id": F(str, required=True),
    "workflow": F(str, required=True),
    "theme": F(str, required=True),
    "step": F((int, str), required=True, check=step_id_error),
    "satellite_type": F(str, required=True, choices=SATELLITE_TYPES),
    "satellite_level": F(str, default="domain", choices=LEVELS),
    "agent": F(str, check=name),
    "scope": F((list, str), required=True),
    "zone": F(str),
    "story_angle": F(str, default=""),
    "on_done": F(str),
    "on_partial": F(str),
    "on_fail": F(str),
    "status": F(str, required=True, choices=("open", "closed")),
    "opened": F(str, required=True),
    "closed": F(str),
    "parent": F(str),
    "children": F(list, default=[], check=str_list),
    "session": F(str),
    "touched": F(list, default=[], check=str_list),
    "result": F(dict),
    "failed_tests": F(dict),
}
_RESULT_SPEC = {
    "status": F(str, required=True, choices=RESULT_STATUSES),
    "summary": F(str, default=""),
    "tests": F(dict),
}
_TESTS_SPEC = {"passed": F(int), "failed": F(int)}
_FAILURE_SPEC = {"command": F(str, default=""), "exit": F(int, default=1), "passed": F(int, default=0),
                 "failed": F(int, default=0), "output": F(str, default=""), "at": F(str, default="")}


def check_id(claim_id: str) -> str:
    if not _ID.fullmatch(claim_id or ""):  # fullmatch: `$` would let a trailing newline in
        raise BrainError(f"not a valid claim id: {claim_id!r}")
    return claim_id


def id_from_argument(text: str) -> str:
    """A claim id as a user types it: the id itself, or its file's path as the shell completes it
    (`claims/<id>.yml`, `./claims/<id>.yml`, an absolute path into a brain's claims/ folder)."""
    if text.endswith(".yml"):
        head, _, base = text.replace("\\", "/").rpartition("/")
        if head.rstrip("/").rpartition("/")[2] == "claims":
            return check_id(base[: -len(".yml")])
    return check_id(text)


def _time(doc, values: dict, key: str) -> datetime:
    try:
        return clock.parse(values[key], what=key)
    except BrainError as exc:
        raise doc.error(exc.message, key) from exc


def load_path(path: Path, doc: Doc | None = None) -> Claim:
    """The claim in `path` (`doc`: its text already parsed, as the index does from the bytes it hashed)."""
    return _PARSED.load(path) if doc is None else _from_doc(path, doc)


def _from_doc(path: Path, doc: Doc) -> Claim:
    v = fields(doc, doc.data, (), _SPEC)
    result = None
    if v["result"] is not None:
        r = fields(doc, v["result"], ("result",), _RESULT_SPEC)
        t = fields(doc, r["tests"] or {}, ("result", "tests"), _TESTS_SPEC)
        result = Result(r["status"], r["summary"], t["passed"], t["failed"])
    failure = None
    if v["failed_tests"] is not None:
        f = fields(doc, v["failed_tests"], ("failed_tests",), _FAILURE_SPEC)
        failure = TestFailure(f["command"], f["exit"], f["passed"], f["failed"], f["output"], f["at"])
    if v["status"] == "closed" and result is None:
        raise doc.error("a closed claim needs a result", "result")
    if v["id"] != path.stem:
        raise doc.error(f"id does not match the file name ({path.stem})", "id")
    scope = v["scope"] if isinstance(v["scope"], list) else [v["scope"]]
    try:
        scope_t = tuple(normalize_scope(s) for s in scope)
    except InvalidScope as exc:
        raise doc.error(exc.message, "scope") from exc
    opened = _time(doc, v, "opened")
    closed = _time(doc, v, "closed") if v["closed"] else None
    return Claim(id=v["id"], workflow=v["workflow"], theme=v["theme"], step=step_id(v["step"]),
                 satellite_type=v["satellite_type"], satellite_level=v["satellite_level"], scope=scope_t,
                 zone=v["zone"], status=v["status"], opened=opened, story_angle=v["story_angle"],
                 agent=v["agent"], on_done=v["on_done"], on_partial=v["on_partial"], on_fail=v["on_fail"],
                 closed=closed, parent=v["parent"], children=tuple(v["children"]), session=v["session"],
                 touched=tuple(v["touched"]), result=result, failed_tests=failure)


_PARSED = Parsed(_from_doc)


def to_dict(c: Claim) -> dict:
    d: dict[str, Any] = {"id": c.id, "workflow": c.workflow, "theme": c.theme, "step": step_id_yaml(c.step),
         "satellite_type": c.satellite_type, "satellite_level": c.satellite_level, "agent": c.agent,
         "scope": list(c.scope), "zone": c.zone, "story_angle": c.story_angle, "on_done": c.on_done,
         "on_partial": c.on_partial, "on_fail": c.on_fail, "status": c.status,
         "opened": clock.iso(c.opened), "closed": clock.iso(c.closed) if c.closed else None,
         "parent": c.parent, "children": list(c.children), "session": c.session,
         "touched": list(c.touched), "result": None}
    if c.result:
        d["result"] = {"status": c.result.status, "summary": c.result.summary,
                       "tests": {"passed": c.result.tests_passed, "failed": c.result.tests_failed}}
    if c.failed_tests:
        f = c.failed_tests
        d["failed_tests"] = {"command": f.command, "exit": f.exit, "passed": f.passed, "failed": f.failed,
                             "output": f.output, "at": f.at}
    return d


def claim_path(brain: Brain, claim_id: str) -> Path:
    return brain.claims_dir / f"{check_id(claim_id)}.yml"


def load_claim(brain: Brain, claim_id: str) -> Claim:
    path = claim_path(brain, claim_id)
    if not path.exists():
        raise BrainError(f"no such claim: {claim_id}")
    return load_path(path)


def list_claims(brain: Brain, status: str | None = None) -> list[Claim]:
    out = brain.load_all(brain.claims_dir, load_path)
    return [c for c in out if status is None or c.status == status]


def _save(brain: Brain, c: Claim) -> None:
    brain.write(claim_path(brain, c.id), dumps_fast(to_dict(c)))


def slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-.")
    return s[:60] or "x"


def next_id(brain: Brain, theme: str, step: str, now: datetime) -> str:
    """sess-YYYYMMDD-HHMM-<theme>-step-N, with -rK for a retry of the same step in the same minute."""
    base = f"sess-{now:%Y%m%d-%H%M}-{slug(theme)}-step-{slug(str(step))}"
    claim_id, n = base, 1
    while claim_path(brain, claim_id).exists():
        n += 1
        claim_id = f"{base}-r{n}"
    return claim_id


def open_claim(brain: Brain, *, workflow: str, step: str, satellite_type: str,
               scope: list[str] | tuple[str, ...] | str, theme: str | None = None,
               satellite_level: str = "domain", zone: str | None = None, story_angle: str = "",
               agent: str | None = None, on_done: str | None = None, on_partial: str | None = None,
               on_fail: str | None = None, parent: str | None = None, session: str | None = None,
               claim_id: str | None = None, now: datetime | None = None) -> Claim:
    if satellite_type not in SATELLITE_TYPES:
        raise BrainError(f"satellite_type must be one of {', '.join(SATELLITE_TYPES)}")
    if satellite_level not in LEVELS:
        raise BrainError(f"satellite_level must be one of {', '.join(LEVELS)}")
    step = step_id(step)
    now = now or clock.now()
    theme = slug(theme or workflow)
    scopes = tuple(normalize_scope(s) for s in ([scope] if isinstance(scope, str) else scope))
    with brain.mutex("claims"):
        if claim_id is None:
            claim_id = next_id(brain, theme, step, now)
        elif claim_path(brain, claim_id).exists():
            raise Refused(f"claim {claim_id} already exists")
        if parent:
            p = load_claim(brain, parent)
            _save(brain, replace(p, children=p.children + (claim_id,)))
        c = Claim(id=claim_id, workflow=workflow, theme=theme, step=step, satellite_type=satellite_type,
                  satellite_level=satellite_level, scope=scopes, zone=zone, status="open", opened=now,
                  story_angle=story_angle, agent=agent, on_done=on_done, on_partial=on_partial,
                  on_fail=on_fail, parent=parent, session=session)
        _save(brain, c)
    return c


def close_claim(brain: Brain, claim_id: str, status: str, summary: str = "", *,
                tests_passed: int | None = None, tests_failed: int | None = None,
                now: datetime | None = None) -> Claim:
    if status not in RESULT_STATUSES:
        raise BrainError(f"result status must be one of {', '.join(RESULT_STATUSES)}")
    now = now or clock.now()
    with brain.mutex("claims"):
        c = load_claim(brain, claim_id)
        if not c.is_open:
            raise Refused(f"claim {claim_id} is already closed ({c.result.status if c.result else '?'})")
        c = replace(c, status="closed", closed=now, failed_tests=None,
                    result=Result(status, summary, tests_passed, tests_failed))
        _save(brain, c)
    return c


def update_open(brain: Brain, claim_id: str, **changes) -> Claim:
    """Change bookkeeping fields (session, touched) of an open claim."""
    with brain.mutex("claims"):
        c = load_claim(brain, claim_id)
        if not c.is_open:
            raise Refused(f"claim {claim_id} is closed")
        c = replace(c, **changes)
        _save(brain, c)
    return c


def record_touched(brain: Brain, claim_id: str, paths: list[str]) -> Claim:
    with brain.mutex("claims"):
        c = load_claim(brain, claim_id)
        merged = tuple(sorted(set(c.touched) | set(paths)))
        if merged == c.touched or not c.is_open:  # a closed claim is final
            return c
        c = replace(c, touched=merged)
        _save(brain, c)
    return c
