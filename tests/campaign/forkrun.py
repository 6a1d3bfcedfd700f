"""Run a sequence of `nika-brain` commands as a user runs them, one process each, without paying for
an interpreter start and the imports each time: this process imports what the commands import, then
forks once per command; the child runs `nika_brain.__main__.main(argv)` exactly as `python -m
nika_brain` does (its exit code, an escaping exception printed as a traceback with exit 1) with its
own stdout and stderr, and the parent records them. Nothing of one command's run survives into the
next (each child exits), as with separate processes.

    python forkrun.py <sequence.json> <out.json>

A sequence item is an argv list, or {"unlink": path}. The environment is the commands' (NIKA_NO_FAST_CLI=1
sends them to the CLI framework, as in a real process).
<out.json>: one [argv, exit code, stdout, stderr] per command.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback


def preload() -> None:
    """What the commands import, imported once here (the CLI framework and its command tree included:
    the fast path hands a call it does not take to it); their children start with it loaded."""
    import importlib
    import pkgutil

    import nika_brain
    from nika_brain import cli
    cli._register()
    import yaml  # noqa: F401  (the C loader, imported on the first YAML read)
    for pkg in ("state", "engine", "support", "gitrepo", "hooks", "claude"):
        mod = importlib.import_module(f"nika_brain.{pkg}")
        for info in pkgutil.walk_packages(mod.__path__, f"{nika_brain.__name__}.{pkg}."):
            try:
                importlib.import_module(info.name)
            except ImportError:  # an optional extra: the command that needs it imports it (or says so)
                pass
    cli._command(cli.app)   # last: the tree is keyed on the command modules imported
    import contextlib
    import io

    from nika_brain.__main__ import main
    for argv in (["lock", "acquire", "--help"], ["claim", "open", "--help"], ["index", "--help"]):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(argv)   # the parser's own lazy imports (help: no side effect on any brain)


def one(argv: list[str]) -> tuple[int, str, str]:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: `python -m nika_brain <argv>`
            code = 1
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                from nika_brain.__main__ import main
                try:
                    rc = main(argv)
                    code = rc if isinstance(rc, int) else (0 if rc is None else 1)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                except BaseException:  # noqa: BLE001 - what the interpreter would print
                    traceback.print_exc()
                    code = 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return (os.waitstatus_to_exitcode(status), out.read().decode("utf-8", "replace"),
                err.read().decode("utf-8", "replace"))


def main() -> None:
    seq_path, out_path = sys.argv[1:3]
    preload()
    results = []
    for item in json.loads(open(seq_path, encoding="utf-8").read()):
        if isinstance(item, dict):
            os.unlink(item["unlink"])
            continue
        results.append([item, *one(item)])
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main()
