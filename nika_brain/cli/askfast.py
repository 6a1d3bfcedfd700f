"""`nika-brain ask` without the CLI framework (issue 21 item 7: a cold `ask` process < 400 ms).

`ask` is a client of the federation daemon: the triage runs on the daemon's resident embedder, and
importing typer (with pydantic under it) cost a cold `ask` more than the rest of its work. `__main__`
hands a plain call here before typer is imported:

    ask PROMPT [--wait] [--json] [--timeout S]      ask show ID [--json]

Anything else (--help, an unknown or repeated option, `--timeout=S`, a value that does not convert,
a prompt that starts with "-", no prompt) returns None and the typer command (cli/ask.py) runs
instead, so usage text and errors stay the framework's. Both paths run `body()` below: the same lines,
the same exit codes (tests/federation/test_ask.py compares them).
"""
from __future__ import annotations

import json

EXIT_NOT_ANSWERED = 8
_FLAGS = {"--wait": "wait", "--json": "as_json"}


def parse(argv: list[str]) -> dict | None:
    """The arguments of a plain `ask` call (argv[0] == "ask"); None: let typer handle it."""
    if argv[:1] != ["ask"]:
        return None
    args: dict = {"wait": False, "as_json": False, "timeout": 600.0}
    seen: set[str] = set()
    pos: list[str] = []
    rest = argv[1:]
    i = 0
    while i < len(rest):
        a = rest[i]
        i += 1
        if a.startswith("-") and a != "-":
            if a in seen:
                return None
            seen.add(a)
            if a in _FLAGS:
                args[_FLAGS[a]] = True
            elif a == "--timeout" and i < len(rest):
                try:
                    args["timeout"] = float(rest[i])
                except (ValueError, OverflowError):
                    return None
                i += 1
            else:
                return None
        else:
            pos.append(a)
    if not 1 <= len(pos) <= 2:
        return None
    args["prompt"] = pos[0]
    args["ask_id"] = pos[1] if len(pos) == 2 else None
    return args


def show(rec: dict, as_json: bool) -> None:
    from nika_brain.federation.asking import route
    said(route.public(rec), as_json)


def said(out: dict, as_json: bool) -> None:
    """Print an ask in its public shape (route.public)."""
    if as_json:
        print(json.dumps(out, ensure_ascii=False))
        return
    print(f"ask {out['ask']}: {out['decision']} ({out.get('reason') or '-'})")
    for r in out["routes"]:
        print(f"-> {r['kernel']} [{r['status']}{' ' + r['prompt_id'] if r['prompt_id'] else ''}]: {r['prompt']}")
        if r.get("answer") is not None:
            print(r["answer"])
        elif r.get("reason"):
            print(f"   {r['reason']}")


def body(prompt: str, ask_id: str | None = None, wait: bool = False, as_json: bool = False,
         timeout: float = 600.0) -> int:
    """Route a prompt (or show a recorded ask); the exit code. Raises BrainError for bad input."""
    import getpass

    from nika_brain.brain import Brain
    from nika_brain.errors import BrainError
    from nika_brain.federation import resident
    from nika_brain.state import prompts as queue
    brain = Brain.find()
    if prompt == "show" and ask_id is not None:
        from nika_brain.federation.asking import record
        show(record.load_ask(brain, ask_id), as_json)
        return 0
    if ask_id is not None:
        raise BrainError('one prompt: quote it (nika-brain ask "...")')
    if not 0 < timeout <= 86400:
        raise BrainError("--timeout must be between 0 and 86400 seconds")
    queue.check(prompt)
    from nika_brain.bus import door
    via = door.claim_door()
    if via:   # a satellite: its door queues and delivers (the kernels' queues are read-only in its wall)
        out = door.call("ask", via, answer_within=timeout + 60, prompt=prompt, wait=wait, timeout=timeout)
        said(out, as_json)
        return _code(out["routes"], wait)
    # The triage request leaves first: the daemon embeds the prompt while this process imports the
    # delivery (kernels, runtimes, queue), about as long.
    sent = resident.send(brain.state_dir, "triage", prompt=prompt, context=None)
    try:
        from nika_brain.federation.asking import route
        rec = route.ask(brain, prompt, wait=wait, timeout=timeout, by=getpass.getuser(), sent=sent)
    finally:
        if sent is not None:
            sent.close()   # read by route.decide; closed here too when something failed before
    show(rec, as_json)
    return _code(rec["routes"], wait)


def _code(routes: list[dict], wait: bool) -> int:
    want = "answered" if wait else "taken"
    return EXIT_NOT_ANSWERED if any(r["status"] != want for r in routes) else 0


def run(argv: list[str]) -> int | None:
    """Run a plain `ask` call without typer; None when typer must handle it."""
    args = parse(argv)
    if args is None:
        return None
    from nika_brain.cli.fast import guarded
    return guarded(body, args)
