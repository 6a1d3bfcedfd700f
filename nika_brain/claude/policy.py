"""Deny or allow one Claude Code tool call of one bound session.

Pure decisions: everything read from disk (locks, claim scope, zones, the card's zone access) is
gathered by the hook into `Facts`, including `locate`, which maps an absolute path to the brain's
logical path (a file in a linked worktree of the brain counts as the same brain path). `decide`
returns the reason to deny, written for Claude to act on, or None to allow. Tool names are matched
case-insensitively (`write` is a write).

What is denied, exactly:
- file-tool writes (Edit, Write, MultiEdit, NotebookEdit) into the folders only nika-brain writes
  (claims/, locks/, gates/, breakers/, runs/, journal/, .nika/) or a `tool-only` zone; into .git/;
  into a `.claude/settings*.json` (the hooks guarding the session); into the operator's config
  folder (its key); into another kernel's folder; under another owner's unexpired exclusive lock
  (the git pre-commit hook's rule); outside the open claim's scope; into a zone the session's card
  does not grant; any write inside the brain when a fact needed to judge it could not be read
  (`problems`). A kernel's own kernels/<id>/memory/ is its notebook: only locks apply;
- reads (Read; Grep's `path` and `glob`; Glob's `path` and `pattern`) of a secret file (the one list
  in secretfiles.py), of the operator's private key folder, of another kernel's folder, and
  recursive searches from a folder that holds another kernel's folder;
- shell commands (Bash, Monitor, PowerShell), read word by word, that: run an operator-only
  command (deciding a gate, resetting a breaker, the operator key, lock release/renew for another
  owner) however it is spelt (`env -u CLAUDECODE`, `$N gate approve`, `sh human-gate-ack.sh 'rej'ect`,
  `python -m nika_brain`); set CLAUDECODE, NIKA_CLAIM, NIKA_AGENT, NIKA_LOCK_OVERRIDE or
  NIKA_OPERATOR_DIR, or unset CLAUDECODE; skip git's hooks (`commit --no-verify`/`-n`,
  `-c core.hooksPath=`); merge without the tests (`branch merge --no-tests`, `--force-human`);
  write where a file tool may not (redirections; rm, mv, cp (also `-t DIR`), tee, touch, ln,
  install, rsync, dd of=; sed/perl in place in any flag cluster (`-i`, `-pi`, `-Ei`, `-ni`); awk
  `-i inplace`; tar `-x ... -C DIR`; curl `-o`/wget `-O`/`-P`; find `-delete`/`-exec`; `xargs <writer>`
  fed from a listing), also under locks, outside the claim's scope and in zones the card lacks;
  `cd`/`pushd` move the base of later words, and `sh|bash|zsh -c` (any flag cluster with c) is judged
  inside; name a secret or a glob that matches one (`cat .en?`, `"$(<.env)"`, /proc/*/environ) or the
  operator's key folder; touch another kernel's folder; search recursively (grep -r/-R, rg, ag,
  ack, git grep, find -exec) over a tree holding a secret or another kernel's folder without
  excluding it (`--exclude`, `--exclude-dir`, rg `-g '!...'`).
What is not: code run by an interpreter (`python -c`, a script file), variables and command
substitutions that build a name at run time, and anything the words do not show. The OS sandbox
(`nika-brain claude install` writes it) is the boundary for those; these checks are a tripwire
that explains the rule to the agent. Claude Code's deny rules (settings.py) guard its file tools.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

from nika_brain.brain import STATE_FOLDERS
from nika_brain.claude.secretfiles import is_secret, mentions_secret

WRITE_TOOLS = {"Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path",
               "NotebookEdit": "notebook_path"}
READ_TOOLS = {"Read": "file_path", "Grep": "path", "Glob": "path"}
SHELL_TOOLS = ("Bash", "Monitor", "PowerShell")   # each runs a shell command in `command`
STATE_DIRS = STATE_FOLDERS
_STATE_HINT = ("it is written only by nika-brain; use `nika-brain claim|lock|gate ...` (a human "
               "decides gates)")
_BY_LOWER = {name.lower(): name for name in (*WRITE_TOOLS, *READ_TOOLS, "NotebookRead", "LS")}
_LEGACY_READ = {"NotebookRead": "notebook_path", "LS": "path"}  # older builds: still judged

# Records here are NamedTuples, not frozen dataclasses: creating a frozen dataclass class costs about
# 0.7 ms at import, and the hook path pays every import on every tool call of every agent.
class Target(NamedTuple):
    path: str            # absolute, normalised
    rel: str | None      # brain-relative logical path, None outside the brain
    links: int = 1       # hard links to the file (a second name may be a state file's)


class Facts(NamedTuple):
    locate: Callable[[str], Target]
    kernel: str | None = None
    claim: str | None = None                   # the session's open claim
    scope: tuple[str, ...] | None = None       # that claim's scope; None when no open claim
    owners: frozenset[str] = frozenset()       # lock owners that are this session
    locks: Any = ()   # a locks.LockView (its covering(rel) reads only candidate locks), or Lock records
    zones: tuple[Any, ...] = ()                # zones.Zone
    card: str | None = None                    # card governing zone access; None: no card applies
    zone_access: tuple[str, ...] = ()
    lineage: tuple[str, ...] = ()              # predecessor kernels: readable, not writable
    problems: tuple[str, ...] = ()             # facts that could not be read: writes fail closed
    now: datetime | None = None
    home: str = os.path.expanduser("~")
    operator_dir: str | None = None            # the operator's config folder (its key): off limits
    expand: Callable[[], Facts] | None = None  # the full facts (locks, scope...) when needed
    agent: bool = True                         # the hook runs in an agent session


def canonical_tool(tool_name: str) -> str:
    """`write` -> `Write`: Claude Code's names, whatever the case the call used."""
    return _BY_LOWER.get(tool_name.lower(), tool_name) if isinstance(tool_name, str) else ""


def kind_of(tool_name: str) -> str:
    name = canonical_tool(tool_name)
    if name in WRITE_TOOLS:
        return "write"
    if name in READ_TOOLS or name in _LEGACY_READ:
        return "read"
    if name.lower() in ("bash", "monitor", "powershell"):
        return "bash"
    return "other"


def _abs(path: str, cwd: str, home: str) -> str:
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    return os.path.normpath(os.path.join(cwd or "/", path))


def _segments(rel: str | None) -> list[str]:
    return [s for s in (rel or "").split("/") if s and s != "."]


def _in_operator_dir(path: str, facts: Facts) -> bool:
    op = facts.operator_dir
    if not op:
        return False
    return path == op or path.startswith(op.rstrip("/") + "/")


_OPERATOR_REASON = ("{path} is the operator's configuration (the key that signs gate decisions); "
                    "an agent session may not read or write it.")


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
    if seg == ["operator.pub"]:
        return (f"{rel} pins the operator's key (what every decision is checked against); a human "
                "changes it with `nika-brain operator init`.")
    if ".claude" in seg[:-1] and (seg[-1].startswith("settings") or seg[-1] == "nika-brain.json"):
        return (f"{rel} holds the Claude Code hooks and rules that guard this session; a human changes "
                "them with `nika-brain claude install|uninstall`.")
    return None


# ---- file tools ---------------------------------------------------------------------------------

def _check_write(t: Target, facts: Facts) -> str | None:
    rel = t.rel
    if _in_operator_dir(t.path, facts):
        return _OPERATOR_REASON.format(path=t.path)
    if rel is None:
        return None  # outside the brain: not ours to govern
    guarded = _guarded(rel)
    if guarded:
        return guarded
    if t.links > 1:
        return (f"{rel} has {t.links} hard links: writing it writes its other names too (maybe a "
                "lock, claim or gate). Write a new file instead (remove this link first).")
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
        if lk.owner == facts.claim:   # its $NIKA_CLAIM's lock, in a session without the claim's door
            return (f"{rel} is under the lock of claim {lk.owner}, and this session is not the one nika-brain "
                    f"started for it: the operator runs `nika-brain claude start {lk.owner}` to work as it.")
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


def _glob_base(pattern: str) -> str:
    """The literal folder part of a glob (`kernels/k2/**/*.md` -> `kernels/k2`)."""
    out = []
    for part in pattern.replace("\\", "/").split("/"):
        if any(c in part for c in "*?[{"):
            break
        out.append(part)
    return "/".join(out)


def _holds_other_kernel(t: Target, facts: Facts) -> str | None:
    """A folder whose tree holds another kernel's folder (the brain root, kernels/)."""
    if not facts.kernel or t.rel is None:
        return None
    seg = _segments(t.rel)
    if seg in ([], ["kernels"]):
        return ("a search from " + (t.rel or ".") + " reaches the other kernels' folders; kernel "
                f"{facts.kernel} searches its own folder, kernels/{facts.kernel}/.")
    return None


def _check_read(tool: str, tool_input: dict, cwd: str, facts: Facts) -> str | None:
    tool = canonical_tool(tool)
    raw = tool_input.get(READ_TOOLS.get(tool) or _LEGACY_READ.get(tool, "path"))
    base = raw if isinstance(raw, str) and raw else None
    paths: list[str] = []
    patterns = [tool_input.get(k) for k in (("glob",) if tool == "Grep" else ("pattern",) if
                                             tool == "Glob" else ())]
    for pattern in (p for p in patterns if isinstance(p, str) and p):
        # The glob selects files as much as the path does: judge its literal folder and its name.
        if mentions_secret(pattern.rsplit("/", 1)[-1]) or is_secret(pattern):
            return (f"the pattern {pattern} selects files that look like secrets (credentials, "
                    "keys, .env); their content must not enter the conversation.")
        paths.append(os.path.join(base or cwd, _glob_base(pattern)))
    paths += [base] if base else []  # after the globs: their narrower folder says more
    searching = tool in ("Grep", "Glob")
    for p in paths or ([cwd] if searching else []):
        path = _abs(p, cwd, facts.home)
        t = facts.locate(path)
        if _in_operator_dir(path, facts) or _in_operator_dir(t.path, facts):
            return _OPERATOR_REASON.format(path=path)
        if is_secret(path) or is_secret(t.path):
            return (f"{path} looks like a secret (credentials, keys, .env); its content must not enter "
                    "the conversation. Ask the operator to provide what you need another way.")
        other = _other_kernel(t.rel, facts, reading=True)
        if other:
            return _kernel_reason(t.rel or path, other, facts)
        if searching:
            wide = _holds_other_kernel(t, facts)
            if wide:
                return wide
    return None


# ---- Bash ---------------------------------------------------------------------------------------

_PUNCT = set("();<>|&")
_WRAPPERS = {"sudo", "doas", "env", "command", "builtin", "exec", "nohup", "time", "nice", "xargs",
             "timeout", "stdbuf", "ionice", "chroot", "setsid", "unbuffer"}
_WRAPPER_VALUED = {"-u", "-g", "-n", "-I", "-C", "-p", "-U", "-s", "-k", "-L", "-P", "-d", "-E",
                   "--unset", "-a", "-o", "-e"}
_SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "fish"}
_WRITE_ALL = {"rm", "rmdir", "unlink", "shred", "touch", "truncate", "tee", "mkdir", "chmod", "chown",
              "chgrp", "mv", "mkfifo", "mknod"}
_WRITE_LAST = {"cp", "ln", "install", "rsync", "scp"}
_TEXT_OPTIONS = {"-m", "--message", "-c", "-e", "-k", "--expression", "-F"}  # text or code values
_SECRET_OK = {"ls", "test", "[", "[[", "stat", "file", "echo", "printf"}
_SEARCHERS = {"grep", "egrep", "fgrep", "zgrep", "rgrep", "rg", "ag", "ack", "ugrep", "ug", "git"}
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")
# Variables that carry who a session is or what it may skip: setting them is an agent forging them.
IDENTITY_VARS = {"CLAUDECODE", "NIKA_CLAIM", "NIKA_AGENT", "NIKA_LOCK_OVERRIDE", "NIKA_OPERATOR_DIR",
                 "NIKA_KERNEL_ID"}
# Operator-only commands, as consecutive words of one simple command (None: any follower). Other
# layers add theirs (the federation's spawn approval) with `operator_only(...)`.
OPERATOR_ONLY: dict[str, tuple[str, ...] | None] = {
    "gate": ("approve", "reject", "approved", "rejected"),
    "preflight": ("reset",),
    "breaker": ("reset",),
    "operator": ("init", "rotate", "key", "sign"),
    # Governing the federation (issue 20 item 3): an agent asks with `/kernel new` or `kernel propose`.
    "kernel": ("spawn", "kill", "restart", "start", "env", "approve", "reject", "readjust"),
    "rag": ("grant", "revoke", "purge"),
    "federation": ("acl", "up", "down"),
    "workflow": ("abort", "adapt"),
}
_SCRIPTS = {"human-gate-ack": ("approve", "reject", "approved", "rejected"),
            "preflight-check": ("reset",)}
_MAX_WALK = 20_000


def operator_only(word: str, followers: tuple[str, ...] | None) -> None:
    """Register `nika-brain <word> <follower>` as a command only the operator may run."""
    OPERATOR_ONLY[word] = followers


def _words(command: str) -> list[str]:
    # Newlines separate commands too; shlex would read them as plain spaces.
    import shlex
    text = command.replace("\\\n", "").replace("\n", " ; ")  # a backslash-newline joins lines
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
    words: tuple[str, ...] = ()      # the whole simple command (assignments and wrappers too)
    searches: tuple[str, ...] = ()   # folders searched recursively
    excludes: tuple[str, ...] = ()   # what such a search leaves out (names, globs, folders)


def _cluster(arg: str, letter: str) -> bool:
    """`-Ei`, `-pi`, `-i.bak`: a short-option cluster holding `letter`."""
    return bool(re.match(r"^-[A-Za-z]*" + letter, arg)) and not arg.startswith("--")


def _value(args: list[str], i: int, long: str) -> str | None:
    """The value of the option at args[i] (`-o X`, `-oX`, `--output=X`)."""
    a = args[i]
    if a.startswith(long + "="):
        return a.split("=", 1)[1]
    if a == long or len(a) == 2:
        return args[i + 1] if i + 1 < len(args) else None
    return a[2:] if not a.startswith("--") else None


def _options(verb: str, args: list[str]) -> tuple[list[str], list[str], list[str], list[str]]:
    """(operands, extra write targets, recursive search roots, excludes) of one command."""
    operands: list[str] = []
    writes: list[str] = []
    excludes: list[str] = []
    skip = False
    script_given = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if verb in ("cp", "mv", "ln", "install") and (a in ("-t", "--target-directory") or
                                                      a.startswith("--target-directory=")):
            v = _value(args, i, "--target-directory")
            writes += [v] if v else []
            skip = "=" not in a
        elif verb == "tar" and (a == "-C" or a.startswith("--directory")):
            v = _value(args, i, "--directory")
            writes += [v] if v else []
            skip = "=" not in a
        elif verb == "curl" and (a in ("-o", "--output") or a.startswith("--output=")):
            v = _value(args, i, "--output")
            writes += [v] if v else []
            skip = "=" not in a
        elif verb == "wget" and (a in ("-O", "-P", "--output-document", "--directory-prefix")
                                 or a.startswith(("--output-document=", "--directory-prefix="))):
            v = args[i + 1] if "=" not in a and i + 1 < len(args) else a.split("=", 1)[-1]
            writes += [v] if v else []
            skip = "=" not in a
        elif verb in ("awk", "gawk") and (a in ("-i", "--include") or a.startswith("--include=")):
            v = _value(args, i, "--include")
            if v and v.startswith("inplace"):
                writes.append("@inplace")
            skip = "=" not in a
        elif a.startswith(("--exclude", "--include", "--glob", "--iglob", "--ignore")) \
                or a in ("-g", "--glob", "--iglob"):
            v = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
            if a.startswith(("--exclude", "--ignore")) or v.startswith("!"):
                excludes.append(v.lstrip("!"))
            skip = "=" not in a
        elif a in _TEXT_OPTIONS or (verb == "perl" and re.match(r"^-[A-Za-z]*e$", a)):
            skip = True
            script_given = script_given or a in ("-e", "--expression", "-f") or verb == "perl"
        elif a == "-f" and verb in ("sed", "awk", "gawk", "grep"):
            skip, script_given = True, True
        elif a.startswith("-"):
            if "=" in a:
                operands.append(a.split("=", 1)[1])
        elif "://" not in a:
            operands.append(a.split("=", 1)[1] if verb == "dd" and "=" in a else a)
    return operands, writes, [], excludes + (["@script"] if script_given else [])


def _segment(words: list[str], redirected: list[str], depth: int,
             piped: tuple[str, ...] = ()) -> list[Segment]:
    raw = tuple(words)
    xargs = False
    while words and (_ASSIGN.match(words[0]) or words[0] in _WRAPPERS):
        if words.pop(0) == "xargs":
            xargs = True
        while words and words[0].startswith("-"):  # options of the wrapper (sudo -u x ...)
            opt = words.pop(0)
            if opt in _WRAPPER_VALUED and words:
                words.pop(0)
    verb = os.path.basename(words[0]) if words else ""
    args = words[1:]
    if verb in _SHELLS and depth < 3:
        # bash -c, -lc, -ec, -xc ...: judge the command string inside.
        for i, a in enumerate(args):
            if _cluster(a, "[A-Za-z]*c") or a == "-c":
                if i + 1 < len(args):
                    inner = segments(args[i + 1], depth + 1)
                    return inner + [Segment(verb, tuple(redirected), tuple(redirected), raw)]
                break
    operands, writes, _, excludes = _options(verb, args)
    script_given = "@script" in excludes
    excludes = [e for e in excludes if e != "@script"]
    writes += redirected
    searches: list[str] = []
    if verb in _WRITE_ALL:
        writes += operands
    elif verb == "ln" and not any(a in ("-s", "--symbolic") or _cluster(a, "s") for a in args):
        writes += operands  # a hard link makes its source writable under the new name
    elif verb in _WRITE_LAST and operands and not any(a in ("-t", "--target-directory")
                                                      or a.startswith("--target-directory=")
                                                      for a in args):
        writes.append(operands[-1])
    elif verb in ("sed", "perl") and any(_cluster(a, "i") or a == "--in-place"
                                         or a.startswith("--in-place=") for a in args):
        writes += operands if (script_given or verb == "perl") else operands[1:]
    elif verb in ("awk", "gawk") and "@inplace" in writes:
        writes.remove("@inplace")
        writes += operands if script_given else operands[1:]
    elif verb == "dd":
        writes += [w.split("=", 1)[1] for w in args if w.startswith("of=")]
    elif verb == "tar" and (args[:1] and not args[0].startswith("-") and "x" in args[0]
                            or any(_cluster(a, "x") or a in ("--extract", "--get") for a in args)):
        if not any(a == "-C" or a.startswith("--directory") for a in args):
            writes.append(".")
    elif (verb == "wget" and not any(a in ("-O", "-P") or a.startswith(("--output-document",
                                                                         "--directory-prefix"))
                                     for a in args)
          or verb == "curl" and any(_cluster(a, "O") or a == "--remote-name" for a in args)):
        writes.append(".")  # downloads into the current folder
    elif verb == "git" and operands[:1] and operands[0] in ("rm", "mv", "checkout", "restore", "clean"):
        writes += operands[1:]
    elif verb == "find":
        roots = []
        for a in args:
            if a.startswith(("-", "(", "!")):
                break
            roots.append(a)
        roots = roots or ["."]
        if {"-delete", "-fprint", "-fls"} & set(args):
            writes += roots
        for i, a in enumerate(args):
            if a in ("-exec", "-execdir", "-ok", "-okdir"):
                # The command find runs on each file: judged with the roots standing for `{}`.
                end = next((j for j in range(i + 1, len(args)) if args[j] in (";", "+", "\\;")),
                           len(args))
                run = [w for w in args[i + 1:end] if w != "{}"] + roots
                for part in _segment(run, [], depth + 1):
                    writes += list(part.writes)
                searches += roots
    if verb in ("grep", "egrep", "fgrep", "zgrep") and any(
            _cluster(a, "[rR]") or a in ("--recursive", "--dereference-recursive") for a in args) \
            or verb in ("rgrep", "rg", "ag", "ack", "ugrep", "ug") \
            or verb == "git" and operands[:1] == ["grep"]:
        rest = operands[1:] if verb == "git" else operands
        roots = rest if script_given else rest[1:]
        searches += roots or ["."]
    if xargs and piped and (verb in _WRITE_ALL or verb in _WRITE_LAST or writes):
        writes += list(piped)  # `ls gates | xargs rm`: the listing names what is written
    if not verb and not writes:
        return []
    return [Segment(verb, tuple(operands + redirected), tuple(writes), raw, tuple(searches),
                    tuple(excludes))]


def segments(command: str, depth: int = 0) -> list[Segment]:
    """Split a shell command into simple commands and what each one reads and writes."""
    out: list[Segment] = []
    cur: list[str] = []
    redirected: list[str] = []
    piped: tuple[str, ...] = ()
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
            segs = _segment(cur, redirected, depth, piped)
            out += segs
            piped = segs[-1].operands if w == "|" and segs else ()
            cur, redirected = [], []
        i += 1
    out += _segment(cur, redirected, depth, piped)
    return out


def _operator_command(seg: Segment, facts: Facts) -> str | None:
    """Why this simple command is the operator's to run, or None. Words are also split on blanks
    (`env -S "nika-brain gate approve"`, an alias's text), options between the two words are
    skipped, and a follower built at run time (`$v`, a backtick) counts as the decision."""
    words = [x.lower() for w in seg.words for x in (w.split() or [w])]
    if seg.verb in ("alias", "function") and any(w in OPERATOR_ONLY for w in words):
        return f"`{seg.verb}` naming an operator command"
    for i, w in enumerate(words):
        base = os.path.basename(w)
        for script, decisions in _SCRIPTS.items():
            if base.startswith(script) and any(x in decisions for x in words[i + 1:]):
                return f"`{script}` {' '.join(x for x in words[i + 1:] if x in decisions)}"
        if w in OPERATOR_ONLY and i + 1 < len(words):
            followers = OPERATOR_ONLY[w]
            j = i + 1
            while j < len(words) - 1 and words[j].startswith("-"):
                j += 1
            nxt = words[j]
            if followers is None or nxt in followers or "$" in nxt or "`" in nxt:
                return f"`{w} {nxt}`"
    if seg.verb == "gh" and words[1:3] == ["pr", "review"] and any(
            w in ("--approve", "-a", "--request-changes", "-r") for w in words):
        return "`gh pr review --approve|--request-changes`"
    if "lock" in words and any(x in words for x in ("release", "renew", "override")):
        owner = next((seg.words[j + 1] for j, w in enumerate(words[:-1]) if w == "--owner"), None)
        owner = owner or next((w.split("=", 1)[1] for w in seg.words if w.startswith("--owner=")), None)
        if owner and owner != facts.claim:
            return f"releasing or renewing the lock of {owner} (not this session's claim)"
    return None


_ASSIGNING = {"printf", "read", "export", "declare", "typeset", "local", "readonly", "unset", "mapfile",
              "readarray", "getopts", "eval", "let", "set", "alias", "source", "."}
_APPEND = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[[^]]*\])?\+?=")


def _forged(seg: Segment) -> str | None:
    """Environment or git options that would let an agent pass for the operator or skip a check."""
    words = list(seg.words)
    flat = [x for w in words for x in (w.split() or [w])]
    for x in flat:
        m = _APPEND.match(x)  # NIKA_CLAIM=x, NIKA_CLAIM+=x, a[0]=x, also inside `env -S "..."`
        if m and m.group(1) in IDENTITY_VARS:
            return f"setting {m.group(1)}"
    if seg.verb in _ASSIGNING or any(os.path.basename(w) in _ASSIGNING for w in words[:1]):
        named = [x for x in flat if x.lstrip("+-") in IDENTITY_VARS or any(
            v in x for v in IDENTITY_VARS)]
        if named:
            return f"`{seg.verb}` on {named[0]} (the session's identity is not the agent's to change)"
    for i, w in enumerate(words):
        m = _ASSIGN.match(w)
        if m and m.group(1) in IDENTITY_VARS:
            return f"setting {m.group(1)}"
        if w in ("-u", "--unset") and i > 0 and i + 1 < len(words) and words[i + 1] in IDENTITY_VARS:
            return f"unsetting {words[i + 1]}"
        if w.startswith("--unset=") and w.split("=", 1)[1] in IDENTITY_VARS:
            return f"unsetting {w.split('=', 1)[1]}"
        if w == "unset" and any(x in IDENTITY_VARS for x in words[i + 1:]):
            return "unsetting " + ", ".join(x for x in words[i + 1:] if x in IDENTITY_VARS)
    low = [w.lower() for w in words]
    if seg.verb == "git":
        if any("core.hookspath" in w for w in low):
            return "changing core.hooksPath (it switches the git hooks off)"
        for i, w in enumerate(low[:-1]):
            if w == "-c" and ("$" in low[i + 1] or "`" in low[i + 1] or "path" in low[i + 1]):
                return "a git `-c` setting built at run time or naming a path (it may switch hooks off)"
        if any(len(w) >= 5 and "--no-verify".startswith(w) for w in low):  # git takes --no-veri
            return "`--no-verify` (it skips git's hooks, among them the pre-commit lock check)"
        if "commit" in low:
            valued = {"-m", "-f", "-c", "-C", "--message", "-F", "--author", "--date", "-t",
                      "--template", "--fixup", "--squash", "--cleanup", "-S", "--trailer"}
            after = iter(low[low.index("commit") + 1:])
            for w in after:
                if w in valued:
                    next(after, None)
                elif re.match(r"^-[a-z]+$", w) and "n" in w:
                    return "`git commit -n` (it skips the pre-commit lock check)"
    if any(w in ("--no-tests", "--force-human") for w in low) and (
            "merge" in low or any(os.path.basename(w).startswith("theme-branch-merge") for w in low)):
        return "merging without the tests (`--no-tests`, `--force-human`)"
    return None


def _walk_finds(root: str, facts: Facts, excludes: tuple[str, ...]) -> str | None:
    """The first secret file (or other kernel's folder) under `root` that the search does not
    exclude; bounded, never follows links."""
    import fnmatch
    ex = [e.strip("/").rstrip("/*") or e for e in excludes]

    def excluded(name: str) -> bool:
        return any(fnmatch.fnmatch(name, e) or fnmatch.fnmatch(name.lower(), e.lower()) for e in ex)

    seen = 0
    if os.path.isfile(root):
        return root if is_secret(root) and not excluded(os.path.basename(root)) else None
    for folder, dirs, files in os.walk(root):
        seen += len(dirs) + len(files)
        if seen > _MAX_WALK:
            return None
        dirs[:] = [d for d in dirs if d != ".git" and not excluded(d)]
        t = facts.locate(folder)
        other = _other_kernel(t.rel, facts, reading=True)
        if other:
            return folder
        if _in_operator_dir(t.path, facts):
            return folder
        for f in files:
            path = os.path.join(folder, f)
            if is_secret(path) and not excluded(f):
                return path
        if is_secret(folder + "/x"):  # a secret folder (.ssh, secrets/) not excluded
            return folder
    return None


MAX_COMMAND_CHARS = 64 * 1024   # the hook's work per call is bounded: past these, refuse, never time out
MAX_WORDS = 4000


def _too_big(command: str) -> str | None:
    if len(command) > MAX_COMMAND_CHARS:
        return (f"this command is {len(command)} characters long; nika-brain checks at most "
                f"{MAX_COMMAND_CHARS} per call. Split it into smaller commands (or write a script "
                "file and run it).")
    if command.count(" ") + command.count("\t") + command.count("\n") >= MAX_WORDS and \
            len(_words(command)) > MAX_WORDS:
        return (f"this command has more than {MAX_WORDS} words (operands); nika-brain checks at most "
                f"{MAX_WORDS} per call. Split it into smaller commands.")
    return None


def _check_bash(command: str, cwd: str, facts: Facts) -> str | None:
    big = _too_big(command)
    if big:
        return big
    here = cwd
    stack: list[str] = []
    full: list[Facts] = []

    def more() -> Facts:
        if not full:
            full.append(facts.expand() if facts.expand else facts)
        return full[0]

    for seg in segments(command):
        if facts.agent:
            op = _operator_command(seg, facts)
            if op:
                return (f"{op} is the operator's decision (a human gate, a breaker reset, another "
                        "owner's lock), not an agent's: report GATE_PENDING or BLOCKED_ON and wait; "
                        "the operator runs it in their own terminal.")
            forged = _forged(seg)
            if forged:
                return (f"this command is refused in an agent session: {forged}. Work as yourself, "
                        "with the session's own claim; a human decides overrides.")
        if seg.verb in ("cd", "pushd"):
            stack.append(here)
            here = _abs(seg.operands[0], here, facts.home) if seg.operands else facts.home
            continue
        if seg.verb == "popd":
            here = stack.pop() if stack else here
            continue
        for word in seg.writes:
            path = _abs(word, here, facts.home)
            t = facts.locate(path)
            if _in_operator_dir(path, facts):
                return "this command writes by hand: " + _OPERATOR_REASON.format(path=path)
            guarded = _guarded(t.rel)
            if guarded:
                return f"this command writes by hand: {guarded}"
            if t.rel is not None and _segments(t.rel):
                why = _check_write(t, more())
                if why:
                    return f"this command writes {word}: {why}"
        for word in seg.operands:
            path = _abs(word, here, facts.home)
            t = facts.locate(path)
            if _in_operator_dir(path, facts) or _in_operator_dir(t.path, facts):
                return _OPERATOR_REASON.format(path=path)
            named = seg.verb not in _SECRET_OK or word.startswith("$(")  # "$(<.env)" reads it
            if named and (mentions_secret(word) or is_secret(path) or is_secret(t.path)):
                return (f"this command reads or copies {word}, which looks like a secret; its "
                        "content must not enter the conversation.")
            other = _other_kernel(t.rel, facts, reading=word not in seg.writes)
            if other:
                return _kernel_reason(t.rel or path, other, facts)
        for root in seg.searches:
            path = _abs(root, here, facts.home)
            found = _walk_finds(path, facts, seg.excludes)
            if found:
                t = facts.locate(found)
                what = (f"another kernel's folder ({t.rel})" if _other_kernel(t.rel, facts, reading=True)
                        else f"{t.rel or found}, which looks like a secret")
                return (f"this search goes through {root} recursively and would read {what}. "
                        "Search a narrower folder, or exclude it (grep --exclude/--exclude-dir, "
                        "rg -g '!name').")
    return None


def decide(tool_name: str, tool_input: dict, cwd: str, facts: Facts) -> str | None:
    """The reason to deny this tool call, or None to allow it."""
    kind = kind_of(tool_name)
    if not isinstance(tool_input, dict):
        return None
    if kind == "write":
        raw = tool_input.get(WRITE_TOOLS[canonical_tool(tool_name)])
        if not isinstance(raw, str) or not raw:
            return None  # Claude Code rejects the call itself; nothing names a file to protect
        return _check_write(facts.locate(_abs(raw, cwd, facts.home)), facts)
    if kind == "read":
        return _check_read(tool_name, tool_input, cwd, facts)
    if kind == "bash":
        command = tool_input.get("command")
        return _check_bash(command, cwd, facts) if isinstance(command, str) else None
    return None
