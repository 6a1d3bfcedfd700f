"""The console's routes (Starlette): pages, the live event stream, and the operator's requests.

    GET  /  /decisions  /workflows  /asks  /kernels/<id>       pages (`?format=json`: their data)
    GET  /kernels/<id>/vault                                    the kernel's vault stats (loaded after)
    GET  /events                                                server-sent events from the bus
    POST /gates/<id>/approve|reject   /proposals/<id>/approve|reject   /kernels/<id>/<action>
    POST /asks/<id>/correct                                     a triage correction (`triage correct`)

Every request needs the session token (401 otherwise); every POST the CSRF token too (403).
"""
from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import os
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qs, quote, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from nika_brain.brain import Brain
from nika_brain.errors import BrainError

from . import actions, auth, views
from .asks import page as asks_page
from .live import Feed
from .records import Records

HERE = Path(__file__).parent
MAX_FORM = 64 * 1024
KEEPALIVE = 15.0


class Console:
    """What the routes share: the brain, the token, the parsed-records cache and the bus feed."""

    def __init__(self, brain: Brain, token: str, port: int, *, secure: bool = False, feed: Feed | None = None):
        self.brain, self.token, self.port, self.secure = brain, token, port, secure
        self.csrf = auth.csrf_for(token)
        self.cookie = auth.cookie_name(port)
        self.records = Records()
        self.feed = feed or Feed(brain)
        self.operator = _whoami()
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")),
                                      autoescape=True, undefined=jinja2.StrictUndefined,
                                      trim_blocks=True, lstrip_blocks=True)

    def render(self, name: str, request: Request, status: int = 200, **data: Any) -> HTMLResponse:
        known = data.get("decisions")
        pending = known["count"] if known else views.decisions(self.brain, self.records)["count"]
        html = self.env.get_template(name).render(
            csrf=self.csrf, path=request.url.path, pending=pending, brain=str(self.brain.root),
            msg=request.query_params.get("msg", ""), err=request.query_params.get("err", ""), **data)
        return HTMLResponse(html, status_code=status)


def _whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid-{os.getuid()}"


def _wants_json(request: Request) -> bool:
    return request.query_params.get("format") == "json" or \
        "application/json" in request.headers.get("accept", "").split(",")[0]


def _safe_next(value: str | None, default: str) -> str:
    """A path of this console only (never `//host` or `/\\host`, which browsers read as another site)."""
    if value and value.startswith("/") and not value.startswith(("//", "/\\")) and "\n" not in value:
        return value
    return default


HEADERS = [(b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer"),
           (b"x-content-type-options", b"nosniff"),
           (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                        b"img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")]


class SecurityHeaders:
    """No framing (clickjacking), no referrer (the first URL carries the token), our scripts only."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + HEADERS
            await send(message)
        await self.app(scope, receive, with_headers)


def _unauthorized() -> Response:
    return HTMLResponse("<!doctype html><title>nika-brain console</title><h1>401: no session token</h1>"
                        "<p>Open the URL <code>nika-brain console</code> printed (it carries the token); "
                        "the operator's private folder keeps it too.</p>", status_code=401)


Handler = Callable[[Request, Console], Awaitable[Response]]


def guarded(handler: Handler, console: Console, *, post: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """The token (cookie, or `?token=` once, which becomes the cookie) on every request; on a POST the
    CSRF token too (form field `csrf` or header `X-CSRF-Token`)."""
    async def endpoint(request: Request) -> Response:
        given = request.query_params.get("token")
        if not post and given is not None:
            if not auth.same(given, console.token):
                return _unauthorized()
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            resp = RedirectResponse(target, status_code=303)
            resp.set_cookie(console.cookie, console.token, httponly=True, samesite="strict",
                            secure=console.secure, path="/")
            return resp
        if not auth.same(request.cookies.get(console.cookie), console.token):
            return _unauthorized()
        if post:
            body = await request.body()
            if len(body) > MAX_FORM:
                return JSONResponse({"error": "request too large"}, status_code=413)
            ctype = request.headers.get("content-type", "").split(";")[0].strip()
            form: dict[str, str] = {}
            if ctype == "application/x-www-form-urlencoded":
                form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
            elif ctype == "application/json" and body:
                try:
                    data = json.loads(body)
                except ValueError:
                    data = None
                form = {k: str(v) for k, v in data.items()} if isinstance(data, dict) else {}
            csrf = form.get("csrf") or request.headers.get("x-csrf-token")
            if not auth.same(csrf, console.csrf):
                return JSONResponse({"error": "missing or wrong CSRF token"}, status_code=403)
            request.state.form = form
        return await handler(request, console)
    return endpoint


async def _run(fn: Callable[..., Any], *args: Any) -> Any:
    """Blocking work (files, the bus, signing, a kernel's delivery) off the event loop."""
    return await asyncio.to_thread(fn, *args)


# ---- pages -----------------------------------------------------------------------------------------

async def overview(request: Request, c: Console) -> Response:
    data = await _run(views.overview, c.brain, c.records, c.feed.last(20))
    if _wants_json(request):
        return JSONResponse(data)
    return c.render("overview.html", request, **data, bus_error=c.feed.error)


async def decisions(request: Request, c: Console) -> Response:
    data = await _run(views.decisions, c.brain, c.records)
    if _wants_json(request):
        return JSONResponse(data)
    return c.render("decisions.html", request, decisions=data)


async def workflows(request: Request, c: Console) -> Response:
    data = await _run(lambda: views.run_rows(c.brain, c.records, active_only=False))
    if _wants_json(request):
        return JSONResponse(data)
    return c.render("workflows.html", request, runs=data)


async def asks(request: Request, c: Console) -> Response:
    data = await _run(asks_page, c.brain)
    if _wants_json(request):
        return JSONResponse(data)
    return c.render("asks.html", request, **data)


async def kernel(request: Request, c: Console) -> Response:
    kid = request.path_params["kid"]
    try:
        data = await _run(views.kernel_page, c.brain, c.records, kid, c.feed.history(kid))
    except BrainError as exc:
        return c.render("error.html", request, error=str(exc), status=404)
    if _wants_json(request):
        return JSONResponse(data)
    return c.render("kernel.html", request, **data)


async def vault(request: Request, c: Console) -> Response:
    kid = request.path_params["kid"]

    def stats() -> dict:
        from nika_brain.federation.vault import admin
        return admin.stats(c.brain, kid)
    try:
        data = await _run(stats)
    except (BrainError, ImportError) as exc:
        return JSONResponse({"error": str(exc)})
    return JSONResponse(data)


async def events(request: Request, c: Console) -> Response:
    q = c.feed.subscribe()

    async def stream():
        try:
            yield f"event: hello\ndata: {json.dumps({'bus_error': c.feed.error})}\n\n"
            while True:
                try:
                    text = await asyncio.wait_for(q.get(), KEEPALIVE)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return
                    yield ": keepalive\n\n"
                    continue
                yield f"data: {text}\n\n"
        finally:
            c.feed.unsubscribe(q)
    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


# ---- the operator's requests ------------------------------------------------------------------------

async def _act(request: Request, fn: Callable[[], str], back: str) -> Response:
    form = request.state.form
    try:
        line = await _run(fn)
    except BrainError as exc:
        if _wants_json(request):
            return JSONResponse({"ok": False, "error": str(exc)}, status_code=409)
        return RedirectResponse(f"{_safe_next(form.get('next'), back)}?err={quote(str(exc))}", status_code=303)
    if _wants_json(request):
        return JSONResponse({"ok": True, "result": line})
    return RedirectResponse(f"{_safe_next(form.get('next'), back)}?msg={quote(line)}", status_code=303)


async def gate_decision(request: Request, c: Console) -> Response:
    gid, decision = request.path_params["gid"], request.path_params["decision"]
    note = request.state.form.get("note", "")
    return await _act(request, lambda: actions.decide_gate(c.brain, gid, decision, note), "/decisions")


async def proposal_decision(request: Request, c: Console) -> Response:
    pid, decision = request.path_params["pid"], request.path_params["decision"]
    note = request.state.form.get("note", "")
    return await _act(request, lambda: actions.decide_proposal(c.brain, pid, decision, note), "/decisions")


async def kernel_action(request: Request, c: Console) -> Response:
    kid, action = request.path_params["kid"], request.path_params["action"]
    text = request.state.form.get("text", "")
    return await _act(request, lambda: actions.kernel_action(c.brain, kid, action, text, c.operator),
                      f"/kernels/{quote(kid)}")


async def ask_correction(request: Request, c: Console) -> Response:
    aid = request.path_params["aid"]
    kernel = request.state.form.get("kernel", "")
    return await _act(request, lambda: actions.correct_ask(c.brain, aid, kernel), "/asks")


def build(console: Console) -> Starlette:
    def page(path: str, fn: Handler) -> Route:
        return Route(path, guarded(fn, console), methods=["GET"])

    def act(path: str, fn: Handler) -> Route:
        return Route(path, guarded(fn, console, post=True), methods=["POST"])

    routes = [
        page("/", overview), page("/decisions", decisions), page("/workflows", workflows), page("/asks", asks),
        page("/kernels/{kid}", kernel), page("/kernels/{kid}/vault", vault), page("/events", events),
        act("/gates/{gid}/{decision:str}", gate_decision), act("/proposals/{pid}/{decision:str}", proposal_decision),
        act("/kernels/{kid}/{action:str}", kernel_action), act("/asks/{aid}/correct", ask_correction),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette):
        await asyncio.to_thread(console.feed.start)
        try:
            yield
        finally:
            await asyncio.to_thread(console.feed.stop)
    return Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(SecurityHeaders)])
