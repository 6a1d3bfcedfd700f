"""Who decides a human gate: a backend per channel (CLI, pull-request review), behind one Protocol.

The gate records themselves are state (nika_brain.state.gates); this module is the part that talks to
the outside world (GitHub's API), so it sits in the engine layer.
"""
from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime
from typing import Callable, Protocol

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.state.gates import Gate, decide, list_gates
from nika_brain.support import clock


class GateBackend(Protocol):
    name: str

    def announce(self, brain: Brain, gate: Gate) -> Gate:
        """Make the gate visible to humans (print, open a PR...); may record e.g. the PR number."""

    def poll(self, brain: Brain, gate: Gate) -> tuple[str | None, str | None]:
        """(approve | reject | None, who) as the backend currently sees it."""


class CliGate:
    """The human runs `nika-brain gate approve|reject` (or human-gate-ack.sh); nothing to poll."""
    name = "cli"

    def announce(self, brain: Brain, gate: Gate) -> Gate:  # noqa: ARG002 (the GateBackend protocol)
        return gate

    def poll(self, brain: Brain, gate: Gate) -> tuple[str | None, str | None]:  # noqa: ARG002 (the GateBackend protocol)
        return None, None


class PullRequestGate:
    """The theme branch's pull request on GitHub is the gate: approved → approve, changes
    requested → reject. Token from GITHUB_TOKEN / NIKA_GITHUB_TOKEN; API URL from nika-brain.yml
    (github_api) unless NIKA_GITHUB_API overrides it."""
    name = "github-pr"

    def __init__(self, brain: Brain):
        from nika_brain.github.client import GitHubReviewGate
        env = dict(os.environ)
        env.setdefault("NIKA_GITHUB_API", brain.config.github_api)
        # The environment wins over the brain's config: in the Actions workflow the brain files
        # come from the branch under review, which must not choose where its review is read.
        repo = env.get("NIKA_GITHUB_REPO") or brain.config.github_repo
        self.client = GitHubReviewGate.from_env(repo=repo, env=env)

    def _branches(self, brain: Brain, gate: Gate) -> tuple[str, str]:
        from nika_brain.state.workflows import find_workflow
        if not gate.workflow:
            raise BrainError(f"gate {gate.id} names no workflow: no theme branch to review")
        wf = find_workflow(brain, gate.workflow)
        return wf.branch, wf.base or brain.config.base_branch

    def announce(self, brain: Brain, gate: Gate) -> Gate:
        head, base = self._branches(brain, gate)
        pr = self.client.find_or_open_pr(head, base, f"[nika-brain] {gate.workflow}: {head}",
                                         "Review this pull request to decide the brain's human gates.")
        self.client.comment(pr, f"Human gate `{gate.id}`: {gate.message}\n\nApprove the pull request "
                                "to approve, request changes to reject.")
        return replace(gate, pr=pr)

    def poll(self, brain: Brain, gate: Gate) -> tuple[str | None, str | None]:  # noqa: ARG002 (the GateBackend protocol)
        if gate.pr is None:
            return None, None
        # Second precision: GitHub stamps reviews in whole seconds.
        since = clock.iso(gate.created.replace(microsecond=0))
        decision, who = self.client.decision(gate.pr, since=since)
        return {"approved": "approve", "rejected": "reject"}.get(decision or ""), who


BACKENDS: dict[str, Callable[[Brain], GateBackend]] = {
    "cli": lambda _brain: CliGate(),
    "github": PullRequestGate,
}


def backend(brain: Brain, name: str | None = None) -> GateBackend:
    name = name or brain.config.gate_backend
    if name not in BACKENDS:
        raise BrainError(f"unknown gate backend {name!r} (known: {', '.join(sorted(BACKENDS))})")
    return BACKENDS[name](brain)


def sync(brain: Brain, name: str | None = None, now: datetime | None = None,
         pr: int | None = None) -> list[Gate]:
    """Apply the backend's view to every pending gate (of one PR if given); return those decided."""
    be = backend(brain, name)
    decided = []
    for g in list_gates(brain, "pending"):
        if pr is not None and g.pr != pr:
            continue
        decision, who = be.poll(brain, g)
        if decision:
            decided.append(decide(brain, g.id, decision, by=who, via=be.name, now=now))
    return decided


def review_check(brain: Brain):
    """For gates.effective: the pull request's review decision of a gate, read from GitHub."""
    def review(gate: Gate) -> str | None:
        return backend(brain, "github").poll(brain, gate)[0]
    return review
