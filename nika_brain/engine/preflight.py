"""Preflight: what must hold before a satellite may start on a scope (seed step 4).

Every failing check names its reason; the orchestrator turns a failure into BLOCKED_ON and stops.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.gitrepo import git
from nika_brain.state import agents, breakers, locks, zones
from nika_brain.state.scopes import normalize_scope, overlap_test
from nika_brain.support import clock


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    reason: str = ""


def _scope_check(brain: Brain, scopes, me: str | None, now: datetime) -> Check:
    from nika_brain.engine.index import claim_summaries  # each claim parsed once, when it changed
    problems = []
    overlapping = overlap_test(scopes)
    for c in claim_summaries(brain):
        if c["status"] != "open" or c["id"] == me:
            continue
        hit = overlapping(c["scope"])
        if hit:
            problems.append(f"{', '.join(hit)} overlaps open claim {c['id']} ({', '.join(c['scope'])})")
    for s in scopes:
        for lk in locks.conflicts(brain, s, me or "", now=now):
            problems.append(f"{s}: locked — {locks.describe(lk)}")
    return Check("scope", not problems, "; ".join(problems))


def _zone_check(brain: Brain, scopes, zone: str | None, agent: str) -> Check:
    zs = zones.load_zones(brain)
    card = agents.load_card(brain, agent)
    wanted = set()
    if zone:
        zones.zone_named(zs, zone)
        wanted.add(zone)
    for s in scopes:
        z = zones.zone_of(zs, s)
        if z is None:
            return Check("zone", False, f"{s} lies in no zone of brain/KERNEL.md")
        if z.level == "tool-only":
            return Check("zone", False, f"{s} is in zone {z.name} (tool-only): no satellite writes there")
        wanted.add(z.name)
    missing = sorted(wanted - set(card.zone_access))
    if missing:
        return Check("zone", False, f"agent {agent} is not granted zone {', '.join(missing)} "
                                     f"(zone_access: {', '.join(card.zone_access) or 'none'})")
    return Check("zone", True)


def _breaker_check(brain: Brain, scopes) -> Check:
    tripped = breakers.tripped_for(brain, scopes)
    if tripped:
        return Check("breaker", False, "; ".join(
            f"circuit breaker tripped on {b.scope} ({b.fails} consecutive fails, last {b.last_claim}); "
            f"a human resets it with `preflight-check.sh reset {b.scope}`" for b in tripped))
    return Check("breaker", True)


def _git_check(brain: Brain, branch: str | None, worktree: Path | None) -> Check:
    if not git.is_repo(brain.root):
        return Check("git", False, f"{brain.root} is not a git repository")
    problems = []
    places = [git.git_dir(brain.root)]
    if worktree is not None:
        if not worktree.is_dir():
            problems.append(f"theme worktree {worktree} is missing (theme-branch-open.sh {branch})")
        else:
            places.append(git.git_dir(worktree))
            on = git.current_branch(worktree)
            if branch and on != branch:
                problems.append(f"worktree {worktree} is on {on}, not on theme branch {branch}")
    for gd in places:
        for marker in ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply"):
            if (gd / marker).exists():
                problems.append(f"{marker} present in {gd}: finish or abort it first")
        if (gd / "index.lock").exists():
            problems.append(f"{gd / 'index.lock'} exists: another git is running, or a stale lock to remove")
    return Check("git", not problems, "; ".join(problems))


def run_checks(brain: Brain, scopes, zone: str | None = None, *, agent: str | None = None,
               claim: str | None = None, branch: str | None = None, worktree: Path | None = None,
               now: datetime | None = None) -> list[Check]:
    now = now or clock.now()
    scopes = tuple(normalize_scope(s) for s in scopes)
    agent = agent or brain.config.default_agent
    out = []
    for fn, args in ((_scope_check, (brain, scopes, claim, now)), (_zone_check, (brain, scopes, zone, agent)),
                     (_breaker_check, (brain, scopes)), (_git_check, (brain, branch, worktree))):
        try:
            out.append(fn(*args))
        except BrainError as exc:  # an unreadable state file is a failed check, not a crash
            out.append(Check(fn.__name__.strip("_").replace("_check", ""), False, str(exc)))
    return out


def failures(checks: list[Check]) -> list[Check]:
    return [c for c in checks if not c.ok]
