"""Claude Code settings: merge nika-brain's hooks and rules into a `.claude/settings.json`, take
them out again, and render the status line.

What we add is found again without guessing:
- hook handlers are ours when their command runs `nika_brain hook <Event>` / `nika-brain hook`;
- permission rules, env keys and the status line we added are listed in a sidecar,
  `.claude/nika-brain.json`, so that `uninstall` removes exactly those and never a rule the user
  wrote (even an identical one written before us). Claude Code ignores the sidecar; we keep our
  bookkeeping out of settings.json because Claude Code validates that file's keys.
Installing twice gives the same file: our previous entries are taken out before the fresh ones go
in, which also updates a stale interpreter path.

The status line runs as its own process on every render, so it shares the hook path's rule: stdlib
and PyYAML only, and it never fails (a broken brain still gets a line, never a traceback).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from nika_brain.errors import BrainError

SIDECAR = "nika-brain.json"
FILE_TOOLS = "Edit|Write|MultiEdit|NotebookEdit"
# Event -> (matcher or None for "every", timeout in seconds). Matchers are exact-name lists: a
# pattern like "Edit.*" would be a regex and also match tools we never meant to gate.
HOOKS: dict[str, tuple[str | None, int]] = {
    "SessionStart": (None, 15),
    "UserPromptSubmit": (None, 10),
    # Monitor and PowerShell run shell commands: the Bash checks apply to them. LS and NotebookRead
    # are gone from current builds; Grep and Glob remain in builds that still ship them.
    # WebFetch and WebSearch: a kernel's doctrine may say no network (federation/kernels/doctrine.py).
    "PreToolUse": (FILE_TOOLS + "|Read|Grep|Glob|Bash|Monitor|PowerShell|WebFetch|WebSearch", 10),
    "PostToolUse": (FILE_TOOLS, 10),
    "Stop": (None, 15),
    "PreCompact": (None, 15),
    "SessionEnd": (None, 5),
}
_OURS = re.compile(r"(?:-m\s+nika_brain|nika-brain)\s+hook\s+[A-Za-z-]+\s*$")
_OUR_STATUSLINE = re.compile(r"(?:-m\s+nika_brain|nika-brain)\s+claude\s+statusline\s*$")
SANDBOX_MODES = ("auto", "required", "off")
# Brain files an agent's own nika-brain commands never write: its guard (.claude), git's hooks and
# config (a core.hooksPath would switch the pre-commit lock check off), the zones, cards, workflows
# and config that decide what the agent may do.
# The Claude Code release the hooks' `onFailure: "block"` is tested with (tests/claudecli/harness.PIN,
# .ci/run): `doctor` says when the installed `claude` is older, since a release that ignores the key
# lets a tool call through when a hook times out or fails (issue 24, hole 9).
TESTED_CLAUDE = "2.1.332"


def older_than_tested(version_text: str) -> bool | None:
    """Whether `claude --version`'s text names a release older than TESTED_CLAUDE (None: unreadable)."""
    import re
    m = re.match(r"\s*(\d+)\.(\d+)\.(\d+)", version_text)
    if not m:
        return None
    return tuple(map(int, m.groups())) < tuple(map(int, TESTED_CLAUDE.split(".")))


_NO_AGENT_WRITE = (".claude", ".git/hooks", ".git/config", "nika-brain.yml", "operator.pub", "brain", "agents",
                   "workflows", "hooks", ".nika/guarded")   # .nika/guarded: caches and journals the operator trusts


def default_command() -> str:
    """How a hook calls nika-brain: this interpreter by absolute path, so no PATH is needed (a
    missing command exits 127 and would silently turn every gate off)."""
    return f"{shlex.quote(sys.executable)} -m nika_brain"


def _abs_rule(tool: str, path: Path | str, glob: str) -> str:
    # '//' starts an absolute path in permission rules; '/x' would be relative to the settings file.
    return f"{tool}(/{Path(path).as_posix()}/{glob})"


def _other_kernels(root: Path, kernel_id: str | None) -> list[str]:
    kernels_dir = root / "kernels"
    if kernel_id is None or not kernels_dir.is_dir():
        return []
    return sorted(p.name for p in kernels_dir.iterdir() if p.is_dir() and p.name != kernel_id)


def deny_rules(root: Path, kernel_id: str | None = None) -> list[str]:
    """Claude Code deny rules for a session in this brain: the secret list (secretfiles.py), the
    operator's private key folder, the folders only nika-brain or git write, and for a kernel the
    other kernels' folders (as they exist now: a re-install picks up new ones, and the PreToolUse
    hook covers them meanwhile). They guard Claude's own file tools; the sandbox guards commands."""
    from nika_brain.claude import secretfiles
    from nika_brain.state import authority
    kernels_dir = root / "kernels"
    rules = [_abs_rule(tool, kernels_dir / other, "**") for other in _other_kernels(root, kernel_id)
             for tool in ("Read", "Edit")]
    rules += [_abs_rule("Read", root, g) for g in secretfiles.globs()]
    rules += [_abs_rule(tool, authority.private_dir(), "**") for tool in ("Read", "Edit")]
    # Edit rules also become sandbox denyWrite entries in Claude Code, so none for the state
    # folders and .git: the agent's own `nika-brain claim close` writes claims/, locks/, runs/
    # (the hook refuses the file tools and hand-written commands there; authority is signed).
    rules += [_abs_rule("Edit", root / ".claude", "**")]
    return rules


def kernel_deny_rules(root: Path, kernel_id: str) -> list[str]:
    return deny_rules(root, kernel_id)


def sandbox_block(root: Path, kernel_id: str | None = None, mode: str = "auto") -> dict[str, Any]:
    """Claude Code's OS sandbox (bubblewrap + socat on Linux) for every command the agent runs.

    Reads: the secret list, the operator's private key folder and, for a kernel, the other kernels'
    folders are denied. Writes: only the brain (its own nika-brain commands write claims, locks,
    runs, gates and commit), minus the files that guard or steer the agent (_NO_AGENT_WRITE) and
    the other kernels. Authority does not rest on write protection: a decision is valid only with
    the operator's signature (authority.py), which needs the denied key."""
    from nika_brain.claude import secretfiles
    from nika_brain.state import authority
    others = [str(root / "kernels" / k) for k in _other_kernels(root, kernel_id)]
    deny_read = others + [str(authority.private_dir())]
    deny_read += [f"{root}/{g}" for g in secretfiles.globs()] + secretfiles.globs()
    deny_write = [str(root / d) for d in _NO_AGENT_WRITE] + others
    if (root / "kernels").is_dir():
        deny_write += [str(p / ".claude") for p in sorted((root / "kernels").iterdir()) if p.is_dir()]
    return {"enabled": True, "failIfUnavailable": mode == "required",
            "autoAllowBashIfSandboxed": True, "allowUnsandboxedCommands": False,
            "filesystem": {"allowWrite": [str(root)], "denyRead": deny_read, "denyWrite": deny_write}}


# What a satellite's commands never write themselves: its lock and claim changes go through its door
# (federation/doors/claim.py), which acts as its claim only (issue 24, holes 2 and 10).
SATELLITE_NO_WRITE = ("locks", "claims", ".git")   # .git: `git reset --hard HEAD~2` (the orchestrator commits)


def _session_sockets() -> list[Path]:
    from nika_brain.claude import bwrap
    return bwrap.session_sockets()


def satellite_settings(root: Path, source: Path, dest: Path, walled: bool = False) -> Path:
    """The settings one satellite runs under (`--settings dest`): the session's (`source`: the
    brain's or its kernel's) and, when they turn Claude Code's sandbox on, what makes its door the
    only way to change locks and claims: `locks/`, `claims/` and `.git` in denyWrite (besides
    .nika/guarded, where the door sockets are), unix sockets allowed (Claude Code's seccomp filter
    otherwise refuses every socket, the door's too) and, so that this opens no other door, the
    kernels' doors (`.nika/doors`), nika-brain's tmux server and the user's session sockets
    (_session_sockets) hidden (denyRead), as in a kernel's sandbox. The
    door checks who connects (its satellite's processes only), so another satellite's socket, which
    stays visible under .nika/guarded, is of no use."""
    data = _load_json(source)
    box = data.get("sandbox")
    if walled and isinstance(box, dict) and box.get("enabled"):
        # Inside nika-brain's own wall (claude/bwrap.satellite_wall: the brain read-only, the doors and
        # sockets hidden, no capabilities) Claude Code's bwrap cannot nest: without capabilities no new
        # namespace, and keeping them would let the agent unmount the wall. Ours takes its place, as
        # in a kernel's sandbox (kernels/sandbox.claude_sandbox).
        # Claude Code auto-allows a sandboxed Bash command (autoAllowBashIfSandboxed); in ours every
        # command is walled, so Bash stays allowed (its deny rules and the PreToolUse hook still apply).
        data["sandbox"] = {"enabled": False}
        allow = data.setdefault("permissions", {}).setdefault("allow", [])
        if "Bash" not in allow:
            allow.append("Bash")
    elif isinstance(box, dict) and box.get("enabled"):
        fs = box.setdefault("filesystem", {})
        deny_write = fs.setdefault("denyWrite", [])
        deny_write += [str(root / d) for d in SATELLITE_NO_WRITE if str(root / d) not in deny_write]
        hidden = [root / ".nika" / "doors",
                  Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"]
        for folder in hidden:   # bwrap binds each denied path: it must exist when the sandbox starts
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for d in SATELLITE_NO_WRITE[:2]:
            (root / d).mkdir(parents=True, exist_ok=True)
        # the kernels' headless results (`runs/<n>.exit|json`, what the supervisor reads of a run): no
        # satellite writes them (each kernel's own runtime does, in its sandbox)
        kernels_dir = root / "kernels"
        for k in sorted(kernels_dir.iterdir()) if kernels_dir.is_dir() else ():
            if k.is_dir() and not k.name.startswith("."):
                (k / "runs").mkdir(exist_ok=True)
                (k / "queue.jsonl").touch()   # its prompt queue: a satellite's `ask` goes through its door
                deny_write += [str(k / n) for n in ("runs", "queue.jsonl") if str(k / n) not in deny_write]
        deny_read = fs.setdefault("denyRead", [])
        deny_read += [str(p) for p in hidden + _session_sockets() if str(p) not in deny_read]
        box.setdefault("network", {})["allowAllUnixSockets"] = True
    _write_json(dest, data)
    return dest


def sandbox_dependencies() -> list[str]:
    """What Claude Code's sandbox needs on this platform and is missing (Debian package names)."""
    import shutil
    if sys.platform != "linux":
        return []  # macOS: Seatbelt is built in
    return [pkg for exe, pkg in (("bwrap", "bubblewrap"), ("socat", "socat")) if not shutil.which(exe)]


def _load_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise BrainError(f"cannot read: {exc.strerror}", file=str(path)) from exc
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BrainError(f"not valid JSON ({getattr(exc, 'msg', exc)}); fix or move it, nothing "
                         "was changed", file=str(path), line=getattr(exc, "lineno", None)) from exc
    if not isinstance(data, dict):
        raise BrainError("expected a JSON object at the top", file=str(path), line=1)
    return data


def _write_json(path: Path, data: dict[str, Any]) -> None:
    from nika_brain.support.fsio import atomic_write
    atomic_write(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _kernel_of(target_dir: Path) -> tuple[str, Path] | None:
    """(kernel id, brain root) when target_dir is a kernel folder kernels/<id>/ of a brain."""
    from nika_brain.brain import CONFIG_NAME
    parent = target_dir.parent
    if parent.name == "kernels" and (parent.parent / CONFIG_NAME).is_file():
        return target_dir.name, parent.parent
    return None


def _section(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = data.setdefault(key, {})
    if not isinstance(value, dict):
        raise BrainError("expected an object", file=str(path), key=key)
    return value


def _strip_ours(data: dict[str, Any], mine: dict[str, Any]) -> None:
    """Take out every entry nika-brain added; leave the user's entries and their order alone."""
    hooks = data.get("hooks")
    if isinstance(hooks, dict):
        for event in list(hooks):
            groups = hooks[event]
            if not isinstance(groups, list):
                continue
            kept = []
            for group in groups:
                if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                    handlers = [h for h in group["hooks"]
                                if not (isinstance(h, dict) and _OURS.search(str(h.get("command", ""))))]
                    if not handlers and group["hooks"]:
                        continue  # the group only held our handlers
                    group = {**group, "hooks": handlers}
                kept.append(group)
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
        if not hooks:
            del data["hooks"]
    perms = data.get("permissions")
    if isinstance(perms, dict):
        for kind, rules in (mine.get("permissions") or {}).items():
            have = perms.get(kind)
            if isinstance(have, list):
                perms[kind] = [r for r in have if r not in rules]
                if not perms[kind]:
                    del perms[kind]
        if not perms:
            del data["permissions"]
    env = data.get("env")
    if isinstance(env, dict):
        for key, value in (mine.get("env") or {}).items():
            if env.get(key) == value:  # the user changed it since: theirs now
                del env[key]
        if not env:
            del data["env"]
    status = data.get("statusLine")
    if isinstance(status, dict) and _OUR_STATUSLINE.search(str(status.get("command", ""))):
        del data["statusLine"]
    if mine.get("sandbox") and isinstance(data.get("sandbox"), dict):
        del data["sandbox"]


def install(target_dir: Path, *, command: str | None = None, kernel_id: str | None = None,
            brain_dir: Path | None = None, sandbox: str = "auto", tools: tuple[str, ...] = ()) -> Path:
    """Merge nika-brain's hooks, deny rules and sandbox (and, for a kernel folder, its isolation
    and env) into `target_dir/.claude/settings.json`; return the settings path.

    `command` is how to run nika-brain (default: this interpreter with `-m nika_brain`).
    A kernel install is recognised from `kernels/<id>/` under a brain, or named explicitly.
    `sandbox`: auto (enabled; Claude Code runs commands unsandboxed where it cannot sandbox),
    required (failIfUnavailable: Claude Code refuses to start without it), off (no block).
    `tools`: more tool names the PreToolUse hook sees (those a kernel's doctrine refuses).
    """
    if sandbox not in SANDBOX_MODES:
        raise BrainError(f"sandbox must be one of {', '.join(SANDBOX_MODES)}, not {sandbox!r}")
    target_dir = Path(target_dir).resolve()
    command = (command or default_command()).strip()
    exe = shlex.split(command)[0] if command else ""
    if os.sep in exe and not os.access(exe, os.X_OK):
        raise BrainError(f"hook command {exe} is not an executable file; a hook that cannot start "
                         "exits 127 and Claude Code then runs without any gate")
    settings_path = target_dir / ".claude" / "settings.json"
    sidecar_path = target_dir / ".claude" / SIDECAR
    data = _load_json(settings_path)
    _strip_ours(data, _load_json(sidecar_path))

    hooks = _section(data, "hooks", settings_path)
    for event, (matcher, timeout) in HOOKS.items():
        # onFailure "block": a hook that times out or fails must not let the tool call through
        # (Claude Code lets it through by default); the pinned CLI honours it (tests/claudecli).
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": f"{command} hook {event}",
                                            "timeout": timeout, "onFailure": "block"}]}
        if matcher:
            extra = [t for t in tools if re.fullmatch(r"[A-Za-z0-9_]+", t) and t not in matcher.split("|")]
            group = {"matcher": "|".join([matcher, *extra]) if event == "PreToolUse" else matcher, **group}
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise BrainError("expected a list of matcher groups", file=str(settings_path),
                             key=f"hooks.{event}")
        groups.append(group)

    mine: dict[str, Any] = {"version": 1, "command": command}
    found = _kernel_of(target_dir)
    kid = kernel_id or (found[0] if found else None)
    if brain_dir:
        root = Path(brain_dir).resolve()
    elif found:
        root = found[1]
    else:
        root = target_dir.parent.parent if kid else target_dir
    perms = _section(data, "permissions", settings_path)
    have = perms.setdefault("deny", [])
    if not isinstance(have, list):
        raise BrainError("expected a list", file=str(settings_path), key="permissions.deny")
    added = [r for r in deny_rules(root, kid) if r not in have]
    have.extend(added)
    mine["permissions"] = {"deny": added}
    if kid:
        ours_env = {"NIKA_KERNEL_ID": kid, "NIKA_BRAIN_DIR": str(root)}
        _section(data, "env", settings_path).update(ours_env)
        mine.update(kernel=kid, env=ours_env)
    if sandbox != "off":   # a denied folder must exist when the sandbox starts (bwrap binds it)
        (root / ".nika" / "guarded").mkdir(parents=True, exist_ok=True)
    if sandbox != "off" and "sandbox" not in data:
        data["sandbox"] = sandbox_block(root, kid, sandbox)
        mine["sandbox"] = sandbox
    if sandbox != "off":
        from nika_brain.state import authority
        authority.ensure_key(root)  # the key the sandbox denies must exist before any agent runs

    if "statusLine" not in data:
        data["statusLine"] = {"type": "command", "command": f"{command} claude statusline"}
        mine["statusLine"] = True
    _write_json(settings_path, data)
    _write_json(sidecar_path, mine)
    return settings_path


def uninstall(target_dir: Path) -> Path:
    """Remove what `install` added to `target_dir/.claude/settings.json`; return its path.

    The file is deleted only when nothing else is left in it (it was ours alone)."""
    target_dir = Path(target_dir).resolve()
    settings_path = target_dir / ".claude" / "settings.json"
    sidecar_path = target_dir / ".claude" / SIDECAR
    data = _load_json(settings_path)
    _strip_ours(data, _load_json(sidecar_path))
    if data:
        _write_json(settings_path, data)
    elif settings_path.exists():
        settings_path.unlink()
    if sidecar_path.exists():
        sidecar_path.unlink()
    return settings_path

