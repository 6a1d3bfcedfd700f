"""Human gate through a pull-request review on GitHub.

The theme branch's pull request is where a person reads the diff anyway, so its review decision is
the gate answer: approved -> "approved", changes requested -> "rejected", anything else -> pending.
Standard library only (urllib, json): this runs in CI and on the hook path, where every import costs.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Mapping

from nika_brain import __version__
from nika_brain.errors import BrainError

DEFAULT_API = "https://api.github.com"
_PER_PAGE = 100          # GitHub's maximum page size
_MAX_PAGES = 1000        # a server that never returns a short page must not loop us forever
_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
# Review states that carry a reviewer's standing; COMMENTED and PENDING do not change it.
_STANDING = {"APPROVED", "CHANGES_REQUESTED", "DISMISSED"}


class GitHubReviewGate:
    """Find or open a pull request and read its review decision over GitHub's REST API."""

    def __init__(self, api_url: str, repo: str, token: str, *, timeout: float = 10.0):
        if not token or not token.strip():
            raise BrainError("no GitHub token: set GITHUB_TOKEN (or NIKA_GITHUB_TOKEN)", key="token")
        if any(c.isspace() or ord(c) < 32 for c in token.strip()):
            raise BrainError("the GitHub token contains whitespace or control characters",
                             key="token")
        if not _REPO_RE.match(repo or ""):
            raise BrainError(f"GitHub repository must be 'owner/name', got {repo!r}", key="repo")
        scheme = urllib.parse.urlsplit(api_url).scheme
        if scheme not in ("http", "https"):
            raise BrainError(f"GitHub API URL must be http(s), got {api_url!r}", key="api_url")
        self.api_url = api_url.rstrip("/")
        self.repo = repo
        self.owner = repo.split("/", 1)[0]
        self.timeout = timeout
        self._token = token.strip()

    @classmethod
    def from_env(cls, repo: str | None = None, env: Mapping[str, str] | None = None,
                 **kwargs: Any) -> "GitHubReviewGate":
        """Configure from NIKA_GITHUB_API, NIKA_GITHUB_TOKEN/GITHUB_TOKEN and, when `repo` is
        None, NIKA_GITHUB_REPO or GITHUB_REPOSITORY (set by GitHub Actions)."""
        env = os.environ if env is None else env
        repo = repo or env.get("NIKA_GITHUB_REPO") or env.get("GITHUB_REPOSITORY")
        if not repo:
            raise BrainError("no GitHub repository: pass owner/name or set NIKA_GITHUB_REPO",
                             key="repo")
        token = env.get("NIKA_GITHUB_TOKEN") or env.get("GITHUB_TOKEN") or ""
        return cls(env.get("NIKA_GITHUB_API") or DEFAULT_API, repo, token, **kwargs)

    # --- HTTP -----------------------------------------------------------------------------------

    def _request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                 body: Any = None, expect: tuple[int, ...] = (200,)) -> tuple[int, Any]:
        endpoint = f"{method} {path}"
        url = self.api_url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"nika-brain/{__version__}",
        })
        if data is not None:
            req.add_header("Content-Type", "application/json")
        # Unredirected: a redirect to another host must not carry the token along.
        req.add_unredirected_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, _read_quietly(exc)
            if status not in expect:
                raise BrainError(f"GitHub API {endpoint}: HTTP {status} "
                                 f"{_api_message(raw) or exc.reason}") from None
        except (socket.timeout, TimeoutError):
            raise BrainError(f"GitHub API {endpoint}: timed out after {self.timeout:g}s") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise BrainError(f"GitHub API {endpoint}: timed out after {self.timeout:g}s") \
                    from None
            raise BrainError(f"GitHub API {endpoint}: cannot reach {self.api_url}: "
                             f"{getattr(reason, 'strerror', None) or reason}") from None
        except (OSError, ValueError, http.client.HTTPException) as exc:  # resets, garbled replies
            raise BrainError(f"GitHub API {endpoint}: {type(exc).__name__}: {exc}") from None
        if status not in expect:
            raise BrainError(f"GitHub API {endpoint}: unexpected HTTP {status}")
        try:
            return status, json.loads(raw) if raw else None
        except (ValueError, UnicodeDecodeError):
            raise BrainError(f"GitHub API {endpoint}: HTTP {status} with a body that is not "
                             f"JSON") from None

    def _repo_path(self, tail: str) -> str:
        owner, name = self.repo.split("/", 1)
        return f"/repos/{urllib.parse.quote(owner)}/{urllib.parse.quote(name)}{tail}"

    # --- gate operations ------------------------------------------------------------------------

    def _find_pr(self, head: str, base: str) -> int | None:
        path = self._repo_path("/pulls")
        _, pulls = self._request("GET", path, query={
            "head": f"{self.owner}:{head}", "base": base, "state": "open"})
        if not isinstance(pulls, list):
            raise BrainError(f"GitHub API GET {path}: expected a list of pull requests")
        return _number(pulls[0], f"GET {path}") if pulls else None

    def find_or_open_pr(self, head: str, base: str, title: str, body: str) -> int:
        """The number of the open pull request from `head` into `base`, opening one if needed."""
        found = self._find_pr(head, base)
        if found is not None:
            return found
        path = self._repo_path("/pulls")
        status, created = self._request("POST", path, expect=(201, 422), body={
            "title": title, "head": head, "base": base, "body": body})
        if status == 422:
            # Someone opened it between our look-up and our create: that one is ours too.
            found = self._find_pr(head, base)
            if found is not None:
                return found
            raise BrainError(f"GitHub API POST {path}: HTTP 422 {_api_message(created)}")
        return _number(created, f"POST {path}")

    def reviews(self, pr_number: int) -> list[dict]:
        """All reviews of the pull request, oldest first, across every page."""
        path = self._repo_path(f"/pulls/{_pr(pr_number)}/reviews")
        out: list[dict] = []
        for page in range(1, _MAX_PAGES + 1):
            _, items = self._request("GET", path, query={"per_page": _PER_PAGE, "page": page})
            if not isinstance(items, list):
                raise BrainError(f"GitHub API GET {path}: expected a list of reviews")
            out.extend(i for i in items if isinstance(i, dict))
            if len(items) < _PER_PAGE:
                break
        return out

    def decision(self, pr_number: int, since: str | None = None) -> tuple[str | None, str | None]:
        """("approved"|"rejected"|None, reviewer login) from each reviewer's latest standing.

        `since` (an ISO time, the gate's creation) ignores reviews submitted before it: one theme
        pull request carries every gate of its workflow, and an approval given for an earlier gate
        must not decide a later one.
        """
        reviews = self.reviews(pr_number)
        if since is not None:
            reviews = [r for r in reviews if _submitted(r) is not None and _submitted(r) >= _parse_time(since)]
        return decide(reviews)

    def comment(self, pr_number: int, text: str) -> int:
        """Post `text` on the pull request's conversation; returns the comment id."""
        path = self._repo_path(f"/issues/{_pr(pr_number)}/comments")
        _, created = self._request("POST", path, body={"body": text}, expect=(201,))
        if not isinstance(created, dict) or not isinstance(created.get("id"), int):
            raise BrainError(f"GitHub API POST {path}: response has no comment id")
        return created["id"]


def _parse_time(text: str):
    from datetime import datetime, timezone
    dt = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def _submitted(review: dict):
    try:
        return _parse_time(review["submitted_at"])
    except (KeyError, TypeError, ValueError):
        return None


def decide(reviews: list[dict]) -> tuple[str | None, str | None]:
    """Map reviews (oldest first, as GitHub lists them) to a gate decision.

    Each reviewer counts by their latest APPROVED / CHANGES_REQUESTED / DISMISSED review: a later
    comment does not withdraw an approval, but a dismissal does withdraw that reviewer's standing
    (an older approval must not come back to life when a change request is dismissed). Any standing
    change request rejects; otherwise any standing approval approves; otherwise pending.
    """
    latest: dict[str, str] = {}
    for review in reviews:
        login = (review.get("user") or {}).get("login")
        state = review.get("state")
        if login and state in _STANDING:
            latest.pop(login, None)  # re-insert so dict order follows the latest review
            latest[login] = state
    for wanted, decision in (("CHANGES_REQUESTED", "rejected"), ("APPROVED", "approved")):
        who = [login for login, state in latest.items() if state == wanted]
        if who:
            return decision, who[-1]  # the most recent such reviewer
    return None, None


def _pr(pr_number: int) -> int:
    if isinstance(pr_number, bool) or not isinstance(pr_number, int) or pr_number < 1:
        raise BrainError(f"pull request number must be a positive integer, got {pr_number!r}",
                         key="pr")
    return pr_number


def _number(pull: Any, endpoint: str) -> int:
    if not isinstance(pull, dict) or not isinstance(pull.get("number"), int):
        raise BrainError(f"GitHub API {endpoint}: response has no pull request number")
    return pull["number"]


def _read_quietly(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read()
    except OSError:
        return b""


def _api_message(raw: Any) -> str:
    """GitHub's own one-line explanation from an error body, when there is one."""
    if isinstance(raw, (bytes, str)):
        try:
            raw = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return ""
    if isinstance(raw, dict) and isinstance(raw.get("message"), str):
        return " ".join(raw["message"].split())[:200]
    return ""
