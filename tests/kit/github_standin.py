"""A LOCAL HTTP STAND-IN for GitHub's REST API. It is not GitHub.

GitHub cannot be reached from the test suite, so this serves, over a real socket on 127.0.0.1, the
endpoints nika-brain's pull-request gate uses, with in-memory state and GitHub's JSON shapes:

    GET  /repos/{owner}/{repo}/pulls?head=owner:branch&base=&state=
    POST /repos/{owner}/{repo}/pulls                          -> 201 {number, ...}; 422 if one is open
    GET  /repos/{owner}/{repo}/pulls/{n}/reviews?per_page=&page=
    POST /repos/{owner}/{repo}/issues/{n}/comments            -> 201 {id, body, ...}
    GET  /repos/{owner}/{repo}/issues/{n}/comments

Every request must carry `Authorization: Bearer <token>` (401 "Bad credentials" otherwise).
Use the `github_standin` fixture (registered in tests/kit/fixtures.py) or
`with GitHubStandin() as standin:`.
"""
from __future__ import annotations

import json
import re
import threading
import urllib.parse
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler

from tests.kit.http_standin import HTTPStandin

_PULLS = re.compile(r"^/repos/([^/]+)/([^/]+)/pulls$")
_REVIEWS = re.compile(r"^/repos/([^/]+)/([^/]+)/pulls/(\d+)/reviews$")
_COMMENTS = re.compile(r"^/repos/([^/]+)/([^/]+)/issues/(\d+)/comments$")


class GitHubStandin(HTTPStandin):
    """In-memory GitHub for one repository, served by a ThreadingHTTPServer in a thread."""

    def __init__(self, repo: str = "nika/brain", token: str = "standin-token"):
        self.repo = repo
        self.owner = repo.split("/", 1)[0]
        self.token = token
        self.pulls: list[dict] = []
        self.reviews: dict[int, list[dict]] = {}
        self.comments: dict[int, list[dict]] = {}
        self.requests: list[tuple[str, str]] = []      # (method, path?query), in arrival order
        self.request_headers: list[dict[str, str]] = []
        self._raw_next: list[tuple[int, bytes]] = []
        self._lock = threading.Lock()
        self._next_number = 1
        self._next_id = 1000

    # --- helpers for tests ----------------------------------------------------------------------

    def add_pull(self, head: str, base: str, title: str = "", body: str = "",
                 state: str = "open") -> int:
        with self._lock:
            return self._create_pull(head, base, title, body, state)["number"]

    def add_review(self, pr: int, login: str, state: str, body: str = "",
                   submitted_at: str | None = None) -> int:
        """Record a review as GitHub lists it (oldest first), submitted now unless told; returns its id."""
        with self._lock:
            self._next_id += 1
            when = submitted_at or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            review = {"id": self._next_id, "user": {"login": login, "type": "User"},
                      "state": state, "body": body,
                      "submitted_at": None if state == "PENDING" else when}
            self.reviews.setdefault(pr, []).append(review)
            return review["id"]

    def reply_raw_next(self, status: int, body: bytes) -> None:
        """Answer the next request with exactly this status and body (to play a broken GitHub)."""
        with self._lock:
            self._raw_next.append((status, body))

    def count(self, method: str, path_prefix: str) -> int:
        return sum(1 for m, p in self.requests if m == method and p.startswith(path_prefix))

    # --- state (called under the lock) -----------------------------------------------------------

    def _create_pull(self, head: str, base: str, title: str, body: str, state: str) -> dict:
        number = self._next_number
        self._next_number += 1
        pull = {"number": number, "state": state, "title": title, "body": body,
                "head": {"ref": head, "label": f"{self.owner}:{head}"},
                "base": {"ref": base, "label": f"{self.owner}:{base}"},
                "html_url": f"https://github.invalid/{self.repo}/pull/{number}"}
        self.pulls.append(pull)
        return pull

    def _handle(self, method: str, target: str, headers: dict[str, str],
                payload: bytes) -> tuple[int, object]:
        with self._lock:
            self.requests.append((method, target))
            self.request_headers.append(headers)
            if self._raw_next:
                return self._raw_next.pop(0)
            if headers.get("authorization") != f"Bearer {self.token}":
                return 401, {"message": "Bad credentials"}
            split = urllib.parse.urlsplit(target)
            query = dict(urllib.parse.parse_qsl(split.query))
            for pattern, route in ((_PULLS, self._pulls), (_REVIEWS, self._reviews),
                                   (_COMMENTS, self._comments)):
                m = pattern.match(split.path)
                if m:
                    if f"{m.group(1)}/{m.group(2)}" != self.repo:
                        return 404, {"message": "Not Found"}
                    return route(method, query, payload, *(int(g) for g in m.groups()[2:]))
            return 404, {"message": "Not Found"}

    def _pulls(self, method, query, payload):
        if method == "GET":
            found = [p for p in self.pulls
                     if query.get("state", "open") in ("all", p["state"])
                     and ("head" not in query or p["head"]["label"] == query["head"])
                     and ("base" not in query or p["base"]["ref"] == query["base"])]
            return 200, found
        if method == "POST":
            data = _json(payload)
            if not isinstance(data, dict) or not all(
                    isinstance(data.get(k), str) and data[k] for k in ("head", "base", "title")):
                return 422, {"message": "Validation Failed"}
            label = f"{self.owner}:{data['head']}"
            if any(p["state"] == "open" and p["head"]["label"] == label
                   and p["base"]["ref"] == data["base"] for p in self.pulls):
                return 422, {"message": "Validation Failed", "errors": [
                    {"message": f"A pull request already exists for {label}."}]}
            return 201, self._create_pull(data["head"], data["base"], data["title"],
                                          data.get("body") or "", "open")
        return 404, {"message": "Not Found"}

    def _reviews(self, method, query, payload, number):
        if method != "GET" or not any(p["number"] == number for p in self.pulls):
            return 404, {"message": "Not Found"}
        per_page = min(int(query.get("per_page", 30)), 100)
        page = int(query.get("page", 1))
        items = self.reviews.get(number, [])
        return 200, items[(page - 1) * per_page: page * per_page]

    def _comments(self, method, query, payload, number):
        if not any(p["number"] == number for p in self.pulls):
            return 404, {"message": "Not Found"}
        if method == "GET":
            return 200, self.comments.get(number, [])
        if method == "POST":
            data = _json(payload)
            if not isinstance(data, dict) or not isinstance(data.get("body"), str):
                return 422, {"message": "Validation Failed"}
            self._next_id += 1
            comment = {"id": self._next_id, "body": data["body"], "user": {"login": "nika-bot"}}
            self.comments.setdefault(number, []).append(comment)
            return 201, comment
        return 404, {"message": "Not Found"}


def _json(payload: bytes):
    try:
        return json.loads(payload or b"null")
    except ValueError:
        return None


class _Handler(BaseHTTPRequestHandler):
    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        payload = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, body = self.server.standin._handle(self.command, self.path, headers, payload)
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = do_PATCH = do_DELETE = _serve

    def log_message(self, format, *args):  # keep pytest output clean
        pass


GitHubStandin.handler = _Handler
GitHubStandin.thread_name = "github-standin"
GitHubStandin.poll = 0.02  # so that stop() (and each test's teardown) does not wait 0.5 s
