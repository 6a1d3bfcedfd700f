"""The operator console: one local web page for the whole federation (`nika-brain console`).

A process the operator starts, like the CLI (it ranks with hooks, below cli): a Starlette app served
by uvicorn, Jinja2 templates and a little plain JavaScript shipped here (no build step).

- `records`  parsed state files kept per (mtime, size, inode): a page is served without re-parsing
- `views`    what each page shows, as plain dicts (kernels, decisions, runs, signals)
- `asks`     the Asks page's adapter over where prompts and their answers are recorded
- `actions`  the state-changing requests: the same core functions the CLI calls (signed decisions)
- `live`     one thread tailing the bus; server-sent events fan it out to the open pages
- `auth`     the session token (first URL, then a cookie) and the CSRF token of every form
- `app`      routes; `server` binds, TLS, prints the URL

Its dependencies are the `console` extra (starlette, uvicorn); without them the command says so.
"""
