"""`nika-brain doctor` and `nika-brain operator ...`: the operator's key and what protects it."""
from __future__ import annotations

import shutil
import subprocess

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app

operator_app = typer.Typer(no_args_is_help=True, help="The operator's signing key (outside the brain).")
app.add_typer(operator_app, name="operator")

WHEN_OFF = ("when it is off, only the PreToolUse hook's tripwire stands between an agent and the "
            "operator key and secrets; an agent able to read the key could sign decisions "
            "(hand-edited decisions stay invalid, pull-request reviews stay the other authority)")


@operator_app.command("init")
def operator_init():
    """Create this brain's operator key pair and pin it (operator.pub, commit it); refused to agents."""
    from nika_brain.state import authority
    brain = Brain.find()
    pub = authority.create_key(brain)
    print(f"operator key: {authority.key_paths(brain.root)[0]} (private, 0600)\npublic key: {pub}\n"
          f"pinned in the brain: {authority.pin_path(brain)} (commit it)")


@operator_app.command("show")
def operator_show():
    """The pinned operator key (what every decision is checked against), where the key is and
    whether this process can sign with it."""
    from nika_brain.state import authority
    for key, value in authority.status(Brain.find()).items():
        print(f"{key}: {value}")


@app.command("doctor")
def doctor():
    """Is Claude Code's OS sandbox effective here? Is the operator key in place? Is claude installed?"""
    from nika_brain.claude.sandbox import brain_status
    from nika_brain.state import authority
    brain = Brain.find()
    box = brain_status(brain.root)
    if box.effective:
        print(f"sandbox: effective ({box.detail})")
    else:
        print(f"sandbox: NOT effective: {box.detail}; {WHEN_OFF}")
    st = authority.status(brain)
    print(f"operator key: {'present' if st['public_present'] else 'missing'} ({st['public']}); "
          f"this process {'can' if st['can_sign'] else 'cannot'} sign")
    exe = shutil.which("claude")
    version = "-"
    if exe:
        try:
            version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30,
                                     check=False).stdout.strip() or "?"
        except (OSError, subprocess.TimeoutExpired):
            version = "?"
    print(f"claude: {exe or 'not on PATH'} {version if exe else ''}".rstrip())
    if exe:
        from nika_brain.claude.settings import TESTED_CLAUDE, older_than_tested
        old = older_than_tested(version)
        if old or old is None:
            print(f"claude: WARNING: {'older than' if old else 'cannot tell if it is at least'} "
                  f"{TESTED_CLAUDE}, the release nika-brain's hooks (onFailure: block) are tested with; "
                  "an older one may let a tool call through when a hook times out. Upgrade Claude Code")
    if brain.config.sandbox == "required" and not box.effective:
        raise typer.Exit(1)
