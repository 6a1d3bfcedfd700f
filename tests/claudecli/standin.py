"""A LOCAL HTTP STAND-IN for Anthropic's Messages API. It is not Claude and runs no model.

The model behind Claude Code cannot be reached from the test suite, so the real `claude` CLI is
pointed at this server (`ANTHROPIC_BASE_URL=http://127.0.0.1:<port>`). It speaks the wire protocol
over a real socket on the loopback interface:

    POST /v1/messages                  -> one scripted assistant message; streamed as server-sent
                                          events when the request says `stream: true`
                                          (message_start, content_block_start/delta/stop,
                                          message_delta, message_stop), plain JSON otherwise
    POST /v1/messages/count_tokens     -> {"input_tokens": <rough count>}
    anything else                      -> 404 in the API's error shape

What it answers comes from a script: a list of turns, each a list of content blocks, e.g.
`[tool_use("Write", file_path=..., content=...)]`, then `[text("done")]`. Only the CLI's main
conversation (the requests that offer tools) consumes the script; side requests Claude Code makes
on its own (titles, summaries, quota probes) get a short text answer. When the script runs out the
stand-in answers "done" so the CLI ends its turn instead of hanging.

Every request is recorded (`requests`: path, headers, parsed body) so a test can assert what the CLI
sent: the SessionStart context, the deny reasons and tool results the model received.
"""
from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.kit.http_standin import HTTPStandin

Block = dict[str, Any]
_ids = itertools.count(1)


def text(value: str) -> Block:
    return {"type": "text", "text": value}


def tool_use(name: str, **tool_input: Any) -> Block:
    return {"type": "tool_use", "id": f"toolu_standin_{next(_ids):04d}", "name": name,
            "input": tool_input}


class MessagesStandin(HTTPStandin):
    """Scripted Messages API on 127.0.0.1:<free port>; use as a context manager."""

    def __init__(self, script: list[list[Block]] | None = None, *,
                 usage: dict[str, int] | None = None,
                 respond: Callable[[dict], list[Block] | None] | None = None):
        self.script: list[list[Block]] = list(script or [])
        # Reported on every message: what Claude Code turns into context use in the transcript.
        self.usage = usage or {"input_tokens": 1200, "cache_creation_input_tokens": 0,
                               "cache_read_input_tokens": 0, "output_tokens": 40}
        self.respond = respond            # optional: decide a turn from the request itself
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    # --- what was received ----------------------------------------------------------------------
    def conversation(self) -> list[dict[str, Any]]:
        """Bodies of the main-conversation requests (those offering tools), in order."""
        return [r["body"] for r in self.requests
                if r["path"].startswith("/v1/messages") and not r["path"].endswith("count_tokens")
                and isinstance(r["body"], dict) and r["body"].get("tools")]

    def tool_results(self) -> dict[str, dict[str, Any]]:
        """tool_use_id -> the tool_result block the CLI sent back (content flattened to text)."""
        out: dict[str, dict[str, Any]] = {}
        for body in self.conversation():
            for msg in body.get("messages", []):
                content = msg.get("content")
                if msg.get("role") != "user" or not isinstance(content, list):
                    continue
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        out[block["tool_use_id"]] = {"is_error": bool(block.get("is_error")),
                                                     "text": _flatten(block.get("content"))}
        return out

    def sent_text(self) -> str:
        """Everything the CLI put in front of the model: system prompt and messages, as text."""
        parts = []
        for body in self.conversation():
            parts.append(_flatten(body.get("system")))
            for msg in body.get("messages", []):
                parts.append(_flatten(msg.get("content")))
        return "\n".join(parts)

    # --- answering ------------------------------------------------------------------------------
    def _next_turn(self, body: dict) -> list[Block]:
        if not body.get("tools"):
            return [text("Stand-in reply.")]  # a side request of the CLI, not the conversation
        if self.respond is not None:
            blocks = self.respond(body)
            if blocks is not None:
                return blocks
        with self._lock:
            return self.script.pop(0) if self.script else [text("done")]


def _flatten(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_flatten(c.get("text", c.get("content")) if isinstance(c, dict) else c)
                         for c in content)
    return "" if content is None else str(content)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # keep pytest output clean
        pass

    @property
    def standin(self) -> MessagesStandin:
        return self.server.standin  # type: ignore[attr-defined]

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_standin")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.standin.requests.append({"method": "GET", "path": self.path,
                                      "headers": dict(self.headers), "body": None})
        self._json(404, {"type": "error", "error": {"type": "not_found_error",
                                                    "message": f"stand-in: no {self.path}"}})

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self._body()
        path = self.path.split("?", 1)[0]
        with self.standin._lock:
            self.standin.requests.append({"method": "POST", "path": self.path,
                                          "headers": dict(self.headers), "body": body})
        if path == "/v1/messages/count_tokens":
            size = len(json.dumps(body)) if body is not None else 0
            self._json(200, {"input_tokens": max(1, size // 4)})
            return
        if path != "/v1/messages" or not isinstance(body, dict):
            self._json(404, {"type": "error", "error": {"type": "not_found_error",
                                                        "message": f"stand-in: no {path}"}})
            return
        blocks = self.standin._next_turn(body)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        message = {"id": f"msg_standin_{next(_ids):04d}", "type": "message", "role": "assistant",
                   "model": body.get("model", "stand-in"), "content": blocks,
                   "stop_reason": stop, "stop_sequence": None, "usage": dict(self.standin.usage)}
        if body.get("stream"):
            self._stream(message)
        else:
            self._json(200, message)

    def _stream(self, message: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_header("request-id", "req_standin")
        self.end_headers()
        self.close_connection = True

        def event(name: str, data: dict) -> None:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

        usage = message["usage"]
        start = {**message, "content": [], "stop_reason": None,
                 "usage": {**usage, "output_tokens": 1}}
        event("message_start", {"type": "message_start", "message": start})
        for i, block in enumerate(message["content"]):
            if block["type"] == "text":
                event("content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": {"type": "text", "text": ""}})
                event("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "text_delta", "text": block["text"]}})
            else:
                event("content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": {**block, "input": {}}})
                event("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "input_json_delta",
                                                        "partial_json": json.dumps(block["input"])}})
            event("content_block_stop", {"type": "content_block_stop", "index": i})
        event("message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                "usage": {"output_tokens": usage.get("output_tokens", 1)}})
        event("message_stop", {"type": "message_stop"})
        self.wfile.flush()


MessagesStandin.handler = _Handler
MessagesStandin.thread_name = "messages-standin"
