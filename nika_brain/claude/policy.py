"""Deny or allow one Claude Code tool call of one bound session.

Pure decisions: everything read from disk (locks, claim scope, zones, the card's zone access) is
gathered by the hook into `Facts`, including `locate`, which maps an absolute path to the brain's
logical path (a file in a linked worktree of the brain counts as the same brain path). `decide`
returns the reason to deny, written for Claude to act on, or None to allow.

What is denied:
- writes (Edit, Write, MultiEdit, NotebookEdit) into the folders only nika-brain writes (claims/,
  locks/, gates/, .nika/) or a `tool-only` zone; into .git/; into a `.claude/settings*.json` (the
  hooks guarding the session); into another kernel's folder; under another owner's unexpired
  exclusive lock (the git pre-commit hook's rule); outside the open claim's scope; into a zone the
  session's card does not grant; any write inside the brain when a fact needed to judge it could
  not be read (`problems`). A kernel's own kernels/<id>/memory/ is its notebook: only locks apply;
- reads (Read, Grep, Glob, LS, NotebookRead) of another kernel's folder, or of a secret file;
- Bash commands that approve or reject a human gate, write by hand where a write tool may not,
  touch another kernel's folder, or name a secret file.
The Bash checks read the command's words (redirections, the operands of rm/mv/cp/tee/sed -i...);
they are a tripwire against an agent doing by hand what nika-brain does, not a sandbox: code run by
an interpreter (`python -c ...`) is not analysed. Claude Code's own deny rules (installed by
claude_settings) and the gate's refusal to run inside Claude Code are the other layers.
"""
from __future__ import annotations

import os
import re
from datetime import datetime
from typing import Any, Callable, NamedTuple

from nika_brain.brain import STATE_FOLDERS

WRITE_TOOLS = {"Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path",
               "NotebookEdit": "notebook_path"}
READ_TOOLS = {"Read": "file_path", "NotebookRead": "notebook_path", "Grep": "path", "Glob": "path",
              "LS": "path"}
STATE_DIRS = STATE_FOLDERS
_STATE_HINT = ("it is written only by nika-brain; use `nika-brain claim|lock|gate ...` (a human "
               "decides gates)")

_SECRET_NAMES = {".env", ".netrc", ".pgpass", ".git-credentials", "credentials", "credentials.json",
                 "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"}
_SECRET_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".keystore", ".jks")
_SECRET_DIRS = {"secrets", ".secrets", ".ssh", ".aws", ".gnupg"}
_NOT_SECRET = (".example", ".sample", ".template", ".dist")

# A human decides gates: an agent that runs the deciding command is approving its own work.
# Patterns stay strings (re caches them on first use): most hook calls never look at a command.
_GATE_DECISION = (
    r"(?:nika-brain|nika_brain|human-gate-ack(?:\.sh)?)\b[^;&|\n]*?\b(?:approve|reject|approved|rejected)\b"
    r"|\bgh\s+pr\s+review\b[^;&|\n]*--(?:approve|request-changes)\b")


# Records here are NamedTuples, not frozen dataclasses: creating a frozen dataclass class costs about
# 0.7 ms at import, and the hook path pays every import on every tool call of every agent.
class Target(NamedTuple):
    path: str            # absolute, normalised
    rel: str | None      # brain-relative logical path, None outside the brain


class Facts(NamedTuple):
    locate: Callable[[str], Target]
    kernel: str | None = None
    claim: str | None = None                   # the session's open claim
    scope: tuple[str, ...] | None = None       # that claim's scope; None when no open claim
    owners: frozenset[str] = frozenset()       # lock owners that are this session
    locks: tuple[Any, ...] = ()                # locks.Lock
    zones: tuple[Any, ...] = ()                # zones.Zone
    card: str | None = None                    # card governing zone access; None: no card applies
    zone_access: tuple[str, ...] = ()
    lineage: tuple[str, ...] = ()              # predecessor kernels: readable, not writable
    problems: tuple[str, ...] = ()             # facts that could not be read: writes fail closed
    now: datetime | None = None
    home: str = os.path.expanduser("~")


def kind_of(tool_name: str) -> str:
    if tool_name in WRITE_TOOLS:
        return "write"
    if tool_name in READ_TOOLS:
        return "read"
    if tool_name == "Bash":
        return "bash"
    return "other"


def _abs(path: str, cwd: str, home: str) -> str:
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    return os.path.normpath(os.path.join(cwd or "/", path))


def _segments(rel: str | None) -> list[str]:
    return [s for s in (rel or "").split("/") if s and s != "."]


def is_secret(path: str) -> bool:
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    if not parts:
        return False
    name = parts[-1]
    if any(p in _SECRET_DIRS for p in parts[:-1]) or name in _SECRET_NAMES:
        return True
    if name.startswith(".env.") and not name.endswith(_NOT_SECRET):
        return True
    return name.endswith(_SECRET_SUFFIXES) or name.startswith(("id_rsa", "id_ed25519"))


def _other_kernel(rel: str | None, facts: Facts, *, reading: bool = False) -> str | None:
    """The other kernel whose folder `rel` is in; a successor may still read its predecessors'."""
    seg = _segments(rel)
    if facts.kernel and len(seg) >= 2 and seg[0] == "kernels" and seg[1] != facts.kernel:
        if reading and seg[1] in facts.lineage:
            return None
        return seg[1]
    return None


def _kernel_reason(rel: str, other: str, facts: Facts) -> str:
    return (f"{rel} belongs to kernel {other}; kernel {facts.kernel} may not read or write "
            "another kernel's folder. Share through the federation layer (bus, shared RAG) instead.")


def _guarded(rel: str | None) -> str | None:
    """Why nobody may write `rel` by hand: nika-brain's state, git's internals, or the Claude Code
    settings that hold these very hooks (an agent must not switch its own guard off)."""
    seg = _segments(rel)
    if not seg:
        return None
    if seg[0] in STATE_DIRS:
        return f"{rel} is under {seg[0]}/: {_STATE_HINT}."
    if seg[0] == ".git":
        return f"{rel} is inside git's own folder; use git commands."
    if ".claude" in seg[:-1] and (seg[-1].startswith("settings") or seg[-1] == "nika-brain.json"):
        return (f"{rel} holds the Claude Code hooks and rules that guard this session; a human changes "
                "them with `nika-brain claude install|uninstall`.")
    return None


# ---- file tools ---------------------------------------------------------------------------------

def _check_write(t: Target, facts: Facts) -> str | None:
    rel = t.rel
    if rel is None:
        return None  # outside the brain: not ours to govern
    guarded = _guarded(rel)
    if guarded:
        return guarded
    other = _other_kernel(rel, facts)
    if other:
        return _kernel_reason(rel, other, facts)
    seg = _segments(rel)
    own_memory = (facts.kernel is not None and seg[:3] == ["kernels", facts.kernel, "memory"]
                  and len(seg) > 3)
    if facts.problems:
        return (f"refused to write {rel}: nika-brain could not check it ("
                + "; ".join(facts.problems) + "). Fix that file, then retry.")
    from nika_brain.state.locks import describe
    from nika_brain.state.scopes import covers
    # Same rule as the git pre-commit hook, so an edit and its commit get one answer: another
    # owner's exclusive lock whose TTL has not run out.
    # A LockView (the hook) parses only the locks that may cover rel; a plain tuple is read whole.
    covering = getattr(facts.locks, "covering", None)
    for lk in covering(rel) if covering else facts.locks:
        if lk.mode != "exclusive" or lk.owner in facts.owners or not covers(lk.scope, rel):
            continue
        if facts.now is not None and lk.expired(facts.now):
            continue
        return (f"{rel} is locked: {describe(lk)}. Do not edit around the lock: wait for its release "
                "or report BLOCKED_ON to the orchestrator.")
    if own_memory:
        return None  # a kernel's own notebook: not a claim's work product, in no zone's care
    from nika_brain.state.zones import zone_of
    zone = zone_of(list(facts.zones), rel) if facts.zones else None
    if zone is not None:
        if zone.level == "tool-only":
            return f"{rel} is in zone {zone.name!r} (tool-only): {_STATE_HINT}."
        if facts.card is not None and zone.name not in facts.zone_access:
            granted = ", ".join(facts.zone_access) or "none"
            return (f"{rel} is in zone {zone.name!r} ({zone.level}); agent card {facts.card!r} grants "
                    f"zones: {granted}. Ask a human or the orchestrator to do this change.")
    if facts.scope is not None and not any(covers(s, rel) for s in facts.scope):
        return (f"{rel} is outside the scope of claim {facts.claim} ({', '.join(facts.scope)}). "
                "Stay inside the scope; if the step needs this file, close the claim as partial "
                "and say why, so the orchestrator can widen it.")
    return None


def _check_read(tool: str, tool_input: dict, cwd: str, facts: Facts) -> str | None:
    raw = tool_input.get(READ_TOOLS[tool])
    paths = [raw] if isinstance(raw, str) and raw else []
    pattern = tool_input.get("pattern")
    if tool == "Glob" and isinstance(pattern, str) and pattern:
        paths.append(os.path.join(raw if isinstance(raw, str) and raw else cwd, pattern))
    for p in paths:
        path = _abs(p, cwd, facts.home)
        t = facts.locate(path)
        if is_secret(path) or is_secret(t.path):
            return (f"{path} looks like a secret (credentials, keys, .env); its content must not enter "
                    "the conversation. Ask the operator to provide what you need another way.")
        other = _other_kernel(t.rel, facts, reading=True)
        if other:
            return _kernel_reason(t.rel or path, other, facts)
    return None


# ---- Bash ---------------------------------------------------------------------------------------

_PUNCT = set("();<>|&")
_WRAPPERS = {"sudo", "doas", "env", "command", "builtin", "exec", "nohup", "time", "nice", "xargs"}
_WRAPPER_VALUED = {"-u", "-g", "-n", "-I", "-C", "-p", "-U"}
_SHELLS = {"sh", "bash", "zsh", "dash", "ksh"}
_WRITE_ALL = {"rm", "rmdir", "unlink", "shred", "touch", "truncate", "tee", "mkdir", "chmod", "chown",
              "mv"}
_WRITE_LAST = {"cp", "ln", "install", "rsync", "scp"}
_TEXT_OPTIONS = {"-m", "--message", "-c", "-e"}  # their value is text or code, not a file name
_SECRET_OK = {"ls", "test", "[", "[[", "stat", "file", "echo", "printf"}
_ASSIGN = r"^[A-Za-z_][A-Za-z0-9_]*="


def _words(command: str) -> list[str]:
    # Newlines separate commands too; shlex would read them as plain spaces.
    import shlex
    text = command.replace("\n", " ; ")
    try:
        lex = shlex.shlex(text, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        return list(lex)
    except ValueError:  # unbalanced quotes: fall back to a rough split, still worth checking
        return re.findall(r"[;&|()<>]+|[^\s;&|()<>]+", text)


class Segment(NamedTuple):
    verb: str
    operands: tuple[str, ...]   # words that may name files
    writes: tuple[str, ...]     # of those, the ones this command writes


def _segment(words: list[str], redirected: list[str], depth: int) -> list[Segment]:
    while words and (re.match(_ASSIGN, words[0]) or words[0] in _WRAPPERS):
        words.pop(0)
        while words and words[0].startswith("-"):  # options of the wrapper (sudo -u x ...)
            opt = words.pop(0)
            if opt in _WRAPPER_VALUED and words:
                words.pop(0)
    verb = os.path.basename(words[0]) if words else ""
    args = words[1:]
    if verb in _SHELLS and "-c" in args and args.index("-c") + 1 < len(args) and depth < 3:
        inner = segments(args[args.index("-c") + 1], depth + 1)  # bash -c "...": judge the inside
        return inner + ([Segment(verb, tuple(redirected), tuple(redirected))] if redirected else [])
    operands: list[str] = []
    skip = False
    for w in args:
        if skip:
            skip = False
        elif w in _TEXT_OPTIONS:
            skip = True
        elif w.startswith("-"):
            if "=" in w:
                operands.append(w.split("=", 1)[1])
        elif "://" not in w:
            operands.append(w.split("=", 1)[1] if verb == "dd" and "=" in w else w)
    writes = list(redirected)
    if verb in _WRITE_ALL:
        writes += operands
    elif verb in _WRITE_LAST and operands:
        writes.append(operands[-1])
    elif verb in ("sed", "perl") and any(a.startswith("-i") or a == "--in-place" for a in args):
        writes += operands[1:] if verb == "sed" else operands
    elif verb == "dd":
        writes += [w.split("=", 1)[1] for w in args if w.startswith("of=")]
    elif verb == "git" and operands[:1] and operands[0] in ("rm", "mv", "checkout", "restore", "clean"):
        writes += operands[1:]
    if not verb and not writes:
        return []
    return [Segment(verb, tuple(operands + redirected), tuple(writes))]


def segments(command: str, depth: int = 0) -> list[Segment]:
    """Split a shell command into simple commands and what each one reads and writes."""
    out: list[Segment] = []
    cur: list[str] = []
    redirected: list[str] = []
    words = _words(command)
    i = 0
    while i < len(words):
        w = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else None
        if not (set(w) <= _PUNCT):
            cur.append(w)
        elif ">" in w:
            if cur and cur[-1].isdigit():
                cur.pop()  # the fd number of `2>`
            if nxt is not None and not (set(nxt) <= _PUNCT):
                if not (w.endswith("&") and nxt.isdigit()):  # `2>&1` names no file
                    redirected.append(nxt)
                i += 1
        elif w in ("<<", "<<-", "<<<"):
            i += 1  # a heredoc delimiter or a here-string: text, not a file
        elif w == "<":
            if nxt is not None and not (set(nxt) <= _PUNCT):
                cur.append(nxt)  # read from: an operand like any other
                i += 1
        else:  # ; && || | & ( ) and their runs
            out += _segment(cur, redirected, depth)
            cur, redirected = [], []
        i += 1
    out += _segment(cur, redirected, depth)
    return out


def _check_bash(command: str, cwd: str, facts: Facts) -> str | None:
    if re.search(_GATE_DECISION, command):
        return ("approving or rejecting a human gate is for a human, not an agent. Report "
                "GATE_PENDING and wait; the operator decides with `nika-brain gate approve|reject`.")
    here = cwd
    for seg in segments(command):
        if seg.verb == "cd":
            here = _abs(seg.operands[0], here, facts.home) if seg.operands else facts.home
            continue
        for word in seg.writes:
            guarded = _guarded(facts.locate(_abs(word, here, facts.home)).rel)
            if guarded:
                return f"this command writes by hand: {guarded}"
        for word in seg.operands:
            path = _abs(word, here, facts.home)
            t = facts.locate(path)
            if seg.verb not in _SECRET_OK and (is_secret(path) or is_secret(t.path)):
                return (f"this command reads or copies {word}, which looks like a secret; its "
                        "content must not enter the conversation.")
            other = _other_kernel(t.rel, facts, reading=word not in seg.writes)
            if other:
                return _kernel_reason(t.rel or path, other, facts)
    return None


def decide(tool_name: str, tool_input: dict, cwd: str, facts: Facts) -> str | None:
    """The reason to deny this tool call, or None to allow it."""
    kind = kind_of(tool_name)
    if not isinstance(tool_input, dict):
        return None
    if kind == "write":
        raw = tool_input.get(WRITE_TOOLS[tool_name])
        if not isinstance(raw, str) or not raw:
            return None  # Claude Code rejects the call itself; nothing names a file to protect
        return _check_write(facts.locate(_abs(raw, cwd, facts.home)), facts)
    if kind == "read":
        return _check_read(tool_name, tool_input, cwd, facts)
    if kind == "bash":
        command = tool_input.get("command")
        return _check_bash(command, cwd, facts) if isinstance(command, str) else None
    return None
