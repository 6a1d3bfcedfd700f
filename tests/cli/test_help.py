"""`--help` reads like typer's classic help: a flag shows no metavar, a value a plain word, every
command has a help line (issue 17, item 4)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import typer

from nika_brain import cli


def _tree():
    cli._register()
    root = cli.plain_metavars(typer.main.get_command(cli.app))

    def walk(cmd, path):
        yield path, cmd
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            yield from walk(sub, [*path, name])
    return list(walk(root, []))


def test_every_command_has_a_help_line():
    missing = [" ".join(path) for path, cmd in _tree() if path and not (cmd.help or cmd.short_help)]
    assert not missing, missing


def test_flags_show_no_metavar_and_values_a_plain_word():
    for path, cmd in _tree():
        for param in cmd.params:
            if getattr(param, "is_flag", False):
                assert param.metavar == "", (path, param.name)
            else:
                assert param.metavar and not param.metavar.startswith("<"), (path, param.name, param.metavar)


def test_each_top_level_command_imports_exactly_the_modules_that_make_it():
    """A call of `nika-brain X ...` imports only cli._OWNERS[X]: every command under X (to the leaves)
    is defined in one of them, and every top-level command is in the table."""
    root = _tree()[0][1]

    def modules(cmd):
        found = {getattr(getattr(cmd, "callback", None), "__module__", None)}
        for sub in getattr(cmd, "commands", {}).values():
            found |= modules(sub)
        return found
    made = {name: {m.removeprefix("nika_brain.cli.") for m in modules(sub) if m} for name, sub in root.commands.items()}
    assert set(made) == set(cli._OWNERS), set(made) ^ set(cli._OWNERS)
    for name, mods in made.items():
        assert mods <= set(cli._OWNERS[name]), (name, mods, cli._OWNERS[name])
    assert made["kernel"] == {"kernel", "proposals", "stealing"}   # several modules extend one command


def _help(*words: str) -> str:
    out = subprocess.run([sys.executable, "-m", "nika_brain", *words, "--help"], capture_output=True,
                         text=True, env={**os.environ, "COLUMNS": "120", "TERM": "dumb"}, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_help_as_a_user_reads_it():
    text = _help("kernel", "spawn")
    assert not re.search(r"<(bool|str|int|path|list\[str\])>", text), text
    assert re.search(r"--temporary\s+a burst worker", text), text   # a flag: no value shown
    assert re.search(r"--max-restarts\s+INTEGER", text), text
    assert re.search(r"--examples\s+PATH", text), text
    assert "GOAL" in text
    assert re.search(r"show\s+One kernel's record", _help("kernel")), "kernel show has a help line"
