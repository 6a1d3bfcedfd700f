"""The thin CLI: each command parses options, calls one core function and prints.

Every BrainError becomes one line on stderr (`nika-brain: <message>`) and its exit code; no traceback
reaches the user for bad input.
"""
from __future__ import annotations

import sys
from typing import Any

from nika_brain.errors import BrainError, missing_extra, os_error_line


def __getattr__(name: str) -> Any:
    """`app` is built on first use: `nika_brain.cli.fast` (the lock and claim commands in loops) lives
    in this package and must not pay for importing typer."""
    if name != "app":
        raise AttributeError(name)
    import typer
    app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                      help="nika-brain: run many coding-agent sessions from one git-native brain.")

    def version(value: bool) -> None:
        if value:
            from importlib.metadata import PackageNotFoundError
            from importlib.metadata import version as package_version
            try:
                v = package_version("nika-brain")
            except PackageNotFoundError:
                v = "unknown (not installed)"
            print(f"nika-brain {v}")
            raise typer.Exit(0)

    @app.callback()
    def main(show_version: bool = typer.Option(False, "--version", callback=version, is_eager=True,  # noqa: ARG001
                                               help="print the version and exit")) -> None:
        """nika-brain: run many coding-agent sessions from one git-native brain."""

    globals()["app"] = app
    return app


def json_object(text: str, what: str) -> dict:
    """A JSON object given on the command line, or one clear error naming the option."""
    import json
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise BrainError(f"{what} is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise BrainError(f"{what} is nested too deeply") from exc
    if not isinstance(value, dict):
        raise BrainError(f"{what} must be a JSON object ({{...}})")
    return value


# The modules that make each top-level command: a call imports only those (a `gate list` does not pay
# for the workflow commands, ~0.1-0.2 s of every CLI process). Help, no command or an unknown one
# registers every module. tests/cli/test_help.py checks this table against the full command tree.
_OWNERS = {"ask": ("ask",), "triage": ("triage",), "rag": ("rag",), "bus": ("bus",), "claude": ("claude",),
           "federation": ("federation",), "registry": ("registry",), "operator": ("operator",),
           "console": ("console",), "doctor": ("operator",), "init": ("index",), "validate": ("index",),
           "index": ("index",), "hooks": ("index",), "sync": ("sync",), "machine": ("machine",),
           "lock": ("state",), "claim": ("state",), "gate": ("state",),
           "workflow": ("workflow",), "workflow-launch": ("workflow",), "preflight": ("workflow",),
           "branch": ("workflow",), "kernel": ("kernel", "proposals", "stealing")}


def _register(argv: list[str] | None = None) -> None:
    # Command modules attach themselves to `app` (and its sub-apps) on import.
    owners = _OWNERS.get(argv[0]) if argv else None
    if owners:
        import importlib
        for owner in owners:
            importlib.import_module(f"nika_brain.cli.{owner}")
        return
    from nika_brain.cli import (  # noqa: F401
        ask,
        bus,
        claude,
        console,
        federation,  # noqa: F401
        index,
        kernel,
        machine,
        operator,
        proposals,
        rag,
        registry,
        state,
        stealing,
        sync,
        triage,
        workflow,
    )


_TYPE_WORDS = {"text": "TEXT", "integer": "INTEGER", "float": "FLOAT", "path": "PATH", "boolean": "BOOLEAN",
               "Path": "PATH", "datetime": "DATETIME"}


def _type_word(param: Any) -> str:
    desc = getattr(param, "type_descriptor", None)   # typer >= 0.24
    if desc is not None:
        if desc.is_choice and desc.choices:
            return "[" + "|".join(str(getattr(c, "value", c)) for c in desc.choices) + "]"
        if desc.is_path:
            return "PATH"
        annotation = desc.annotation
        if getattr(desc, "is_list", False):
            args = getattr(annotation, "__args__", ()) or (str,)
            annotation = args[0]
        kind = getattr(annotation, "__name__", "text")
        kind = {"str": "text", "int": "integer", "bool": "boolean"}.get(kind, kind)
    else:
        kind = getattr(getattr(param, "type", None), "name", "text")
    return _TYPE_WORDS.get(kind, kind.upper())


def plain_metavars(command: Any) -> Any:
    """Help that reads like typer's classic one: a flag shows no metavar, a value a plain word (TEXT,
    INTEGER, PATH, [a|b]) — recent typer shows `<bool>`, `<str>`, `<list[str]>` for everything, which
    makes a flag look as if it took a value. Applied to the whole command tree once per process."""
    for param in getattr(command, "params", ()):
        if getattr(param, "is_flag", False) or getattr(param, "count", False):
            param.metavar = ""
            continue
        word = _type_word(param)
        if getattr(param, "param_type_name", "") == "argument":
            param.metavar = param.metavar or (param.name or "value").upper()
            param.display_type_rich = lambda ctx, word=word: word  # noqa: ARG005  (instance attribute)
        elif param.metavar is None:
            param.metavar = word
    try:  # --help is made on demand, not one of the params
        helper = command.get_help_option(command.context_class(command))
    except (AttributeError, TypeError):  # pragma: no cover - another typer/click layout
        helper = None
    if helper is not None:
        helper.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        plain_metavars(sub)
    return command


_COMMANDS: dict[tuple[str, ...], Any] = {}  # (id of the app, the imported command modules...) -> tree


def _command(app: Any) -> Any:
    """The click command tree of `app`, built once per set of registered command modules: building it
    (typer reads every command's signature and type hints) is most of a plain command's CPU in a
    process that calls `main()` more than once (a campaign of a thousand argument vectors, a loop of
    in-process calls); a process that runs one command builds it once either way. The key is the set
    of imported `nika_brain.cli.*` modules: they attach their commands on import, so a call that
    registers one more module gets a new tree that holds it (and another `app` object, another tree)."""
    import typer
    key = (str(id(app)), *sorted(m for m in sys.modules if m.startswith("nika_brain.cli.")))
    command = _COMMANDS.get(key)
    if command is None:
        command = _COMMANDS[key] = plain_metavars(typer.main.get_command(app))
    return command


def run(argv: list[str]) -> int:
    import typer
    try:  # typer >= 0.24 vendors its own click; its exceptions are not click's
        from typer._click import exceptions as click_exc
    except ImportError:  # pragma: no cover - older typer uses click itself
        from click import exceptions as click_exc
    app = __getattr__("app") if "app" not in globals() else globals()["app"]
    _register(argv)
    try:
        # Without standalone mode click returns (not raises) a typer.Exit's code.
        command = _command(app)
        rv = command.main(args=argv, prog_name="nika-brain", standalone_mode=False)
    except BrainError as exc:
        print(f"nika-brain: {exc}", file=sys.stderr)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except click_exc.ClickException as exc:
        exc.show()
        return exc.exit_code
    except typer.Abort:
        print("nika-brain: aborted", file=sys.stderr)
        return 130
    except ImportError as exc:  # a federation command without the federation extra: one line, never a trace
        extra = missing_extra(exc)
        if extra is None:
            raise
        print(f"nika-brain: {extra}", file=sys.stderr)
        return extra.exit_code
    except OSError as exc:  # a path the file system refuses (name too long, permission...): one line
        print(os_error_line(exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("nika-brain: interrupted", file=sys.stderr)
        return 130
    return rv if isinstance(rv, int) else 0


def operator_only(what: str) -> None:
    """The CLI's own check for commands only the operator runs (authority.operator_only)."""
    from nika_brain.brain import Brain
    from nika_brain.state import authority
    authority.operator_only(Brain.find(), what)
