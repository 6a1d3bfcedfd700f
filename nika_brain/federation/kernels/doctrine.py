"""A kernel's doctrine: what its session is told at start, and the policy its hooks enforce.

Where it comes from: the kernel's `doctrine` field (free text, the id of `doctrines/<id>.yml`, or a
brain path to such a file) and every active doctrine of `doctrines/` that lists the kernel (or "*").
A doctrine file's `invariants` may state policy, enforced by the PreToolUse hook:
- `external_writes`: `allowed` (the R&D kernel: writes outside its scope tolerated) | `ask` (a human
  validates each write outside the kernel's folder and scope: Claude Code asks) | `forbidden`;
  any other value is read as `ask` (the doctrine says something the hook cannot read: a human decides);
- `network`: `on` | `off` (off: WebFetch and WebSearch refused, and shell commands that start a
  network client);
- `tools_denied`: a list of tool names refused outright.
Several doctrines: the strictest value of each wins. Free text is told to the session, not enforced
(no policy is read from prose): `kernel spawn` says so.

The snapshot: at each start the doctrine is resolved and written to `.nika/doctrines/<id>/doctrine.json`;
a sandboxed kernel sees that folder, and `doctrines/`, read-only, so its agent cannot loosen what its
hooks enforce (a changed doctrine applies at the next `kernel restart`).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nika_brain.errors import BrainError

WRITES = ("allowed", "ask", "forbidden")          # least strict first
_ALLOWED = {"allowed", "allow", "tolerated", "tolerant", "yes", "true", "on"}
_FORBIDDEN = {"forbidden", "deny", "denied", "no", "false", "off", "never"}
NETWORK_TOOLS = ("WebFetch", "WebSearch")
_NET_CMD = re.compile(r"(?:^|[;&|(`$\s])(?:sudo\s+)?(curl|wget|ssh|scp|sftp|rsync|nc|ncat|netcat|telnet|ftp|"
                      r"git\s+(?:clone|fetch|pull|push|ls-remote))(?=\s|$)")


@dataclass(frozen=True)
class Doctrine:
    text: str = ""                      # what the session is told
    sources: tuple[str, ...] = ()       # where it came from (doctrine ids, "kernel.yml")
    external_writes: str = "allowed"    # one of WRITES
    network: bool = True
    tools_denied: tuple[str, ...] = ()

    @property
    def enforced(self) -> bool:
        return self.external_writes != "allowed" or not self.network or bool(self.tools_denied)

    def policy_line(self) -> str:
        writes = {"allowed": "writes outside your folder and scope are tolerated",
                  "ask": "every write outside your folder and scope waits for a human's approval",
                  "forbidden": "writes outside your folder and scope are refused"}[self.external_writes]
        parts = [writes, "network tools allowed" if self.network else "no network (WebFetch, WebSearch, "
                 "curl, wget, ssh, git fetch/push ... refused)"]
        if self.tools_denied:
            parts.append("tools refused: " + ", ".join(self.tools_denied))
        return "; ".join(parts)

    def to_json(self) -> dict:
        d = asdict(self)
        d["sources"], d["tools_denied"] = list(self.sources), list(self.tools_denied)
        return d


def _writes(value: Any) -> str:
    v = str(value).strip().lower()
    if v in _ALLOWED:
        return "allowed"
    if v in _FORBIDDEN:
        return "forbidden"
    return "ask"


def _network(value: Any) -> bool:
    return str(value).strip().lower() not in _FORBIDDEN


def _from_file(d: dict) -> Doctrine:
    inv = d.get("invariants") if isinstance(d.get("invariants"), dict) else {}
    tools = inv.get("tools_denied", [])
    if isinstance(tools, str):
        tools = [tools]
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        raise BrainError(f"doctrine {d.get('id')}: tools_denied must be a list of tool names")
    said = [str(x) for x in (d.get("title"), d.get("text")) if x]
    return Doctrine(text="\n".join(said), sources=(str(d.get("id")),),
                    external_writes=_writes(inv["external_writes"]) if "external_writes" in inv else "allowed",
                    network=_network(inv["network"]) if "network" in inv else True,
                    tools_denied=tuple(tools))


def _merge(docs: list[Doctrine]) -> Doctrine:
    if not docs:
        return Doctrine()
    return Doctrine(text="\n".join(d.text for d in docs if d.text),
                    sources=tuple(s for d in docs for s in d.sources),
                    external_writes=max((d.external_writes for d in docs), key=WRITES.index),
                    network=all(d.network for d in docs),
                    tools_denied=tuple(sorted({t for d in docs for t in d.tools_denied})))


def load_all(brain: Any) -> list[dict]:
    """Every doctrine file of `doctrines/`, checked: {id (the file name), title, status, kernels,
    invariants}."""
    from nika_brain.support.yamlsafe import load_doc

    folder = brain.root / "doctrines"
    out = []
    for path in brain.iter_yaml(folder):
        doc = load_doc(path)
        d = doc.data
        if not isinstance(d, dict):
            raise doc.error("a doctrine is a mapping {id, title, status, kernels, invariants}")
        if d.get("id") != path.stem:
            raise doc.error(f"id does not match the file name ({path.stem})", "id")
        if not isinstance(d.get("invariants"), dict) or not d["invariants"]:
            raise doc.error("a doctrine needs invariants: {name: value, ...}", "invariants")
        if d.get("status", "active") not in ("active", "inactive"):
            raise doc.error("status must be active or inactive", "status")
        ks = d.get("kernels", [])
        if not isinstance(ks, list) or not all(isinstance(x, str) for x in ks):
            raise doc.error('kernels must be a list of kernel ids (or ["*"])', "kernels")
        out.append(d)
    return out


def resolve(brain: Any, kernel: Any) -> Doctrine:
    """The kernel's doctrine from its record and `doctrines/` (a broken doctrine file raises)."""
    from nika_brain.support.yamlsafe import load_doc
    files = {str(d["id"]): d for d in load_all(brain)} if (brain.root / "doctrines").is_dir() else {}
    picked: list[dict] = [d for d in files.values() if d.get("status", "active") == "active"
                          and (kernel.id in d.get("kernels", []) or "*" in d.get("kernels", []))]
    free = ""
    field = (kernel.doctrine or "").strip()
    if field:
        path = brain.root / field
        if field in files:
            picked.append(files[field])
        elif field.endswith((".yml", ".yaml")) and path.is_file():
            d = load_doc(path).data
            if not isinstance(d, dict):
                raise BrainError(f"doctrine {field}: a doctrine is a mapping {{id, title, invariants}}")
            picked.append({"id": field, **d})
        else:
            free = field
    seen: set[str] = set()
    docs = []
    for d in picked:
        if str(d.get("id")) not in seen:
            seen.add(str(d.get("id")))
            docs.append(_from_file(d))
    if free:
        docs.insert(0, Doctrine(text=free, sources=("kernel.yml",)))
    return _merge(docs)


def snapshot_dir(brain: Any, kernel_id: str) -> Path:
    return brain.state_dir / "doctrines" / kernel_id


def snapshot(brain: Any, kernel: Any) -> Doctrine:
    """Resolve the kernel's doctrine and write what its hooks will enforce (at each start)."""
    from nika_brain.support import fsio
    doc = resolve(brain, kernel)
    folder = snapshot_dir(brain, kernel.id)
    folder.mkdir(parents=True, exist_ok=True)
    fsio.atomic_write(folder / "doctrine.json", json.dumps(doc.to_json(), ensure_ascii=False) + "\n")
    return doc


def for_hook(brain: Any, kernel_id: str) -> Doctrine | None:
    """What the kernel's hooks enforce: its start's snapshot; resolved now when there is none (a
    kernel started before snapshots, a session outside a kernel launch). None: no kernel record;
    a broken doctrine file raises."""
    try:
        raw = json.loads((snapshot_dir(brain, kernel_id) / "doctrine.json").read_text(encoding="utf-8"))
        return Doctrine(text=str(raw.get("text", "")), sources=tuple(raw.get("sources", ())),
                        external_writes=raw.get("external_writes") if raw.get("external_writes") in WRITES
                        else "ask", network=bool(raw.get("network", True)),
                        tools_denied=tuple(raw.get("tools_denied", ())))
    except (OSError, ValueError, AttributeError):
        pass
    from nika_brain.state import kernels
    try:
        kernel = kernels.load_kernel(brain, kernel_id)
    except BrainError:
        return None
    return resolve(brain, kernel)   # a broken doctrine file raises: the hook then refuses


# ---- the hook's check --------------------------------------------------------------------------

def _in_scope(path: str, brain: Any, kernel: Any) -> bool:
    real = os.path.realpath(path)
    own = os.path.realpath(str(brain.kernels_dir / kernel.id))
    if real == own or real.startswith(own + os.sep):
        return True
    root = os.path.realpath(str(brain.root))
    if not real.startswith(root + os.sep):
        return False
    rel = real[len(root) + 1:]
    for s in kernel.scope:
        s = s.strip("/").rstrip("*").rstrip("/")
        if s and (rel == s or rel.startswith(s + "/")):
            return True
    return False


# Shell commands a strict doctrine lets through without a human: those the hook can prove write nothing
# outside the kernel's folder and scope. READERS write nothing but their redirections; WRITERS write
# only the paths they are given (each checked); anything else (an interpreter: python3 -c, node -e,
# perl -e, a script, make, an unknown tool) cannot be read, so a human is asked. The sandbox is the
# wall (the brain is read-only outside the scope of a strict kernel, whatever process writes): this is
# the question asked before, so that a human sees the command.
READERS = frozenset("""ls cat head tail grep egrep fgrep rg wc echo printf pwd stat file du df which
type command date true false test [ diff cmp sort uniq cut tr jq basename dirname realpath readlink
id whoami uname hostname env printenv sleep less more tree md5sum sha1sum sha256sum nl column
""".split())
WRITERS = frozenset("mkdir touch cp mv rm rmdir tee ln chmod truncate".split())
_SAFE_GIT = frozenset("status log diff show blame branch rev-parse ls-files grep".split())
_UNREADABLE = re.compile(r"\$\(|`|<\(|>\(|<<|\beval\b|\bexec\b|\bsource\b|(?:^|[;&|]\s*)\.\s")
_SPLIT = re.compile(r"\|\||&&|[;\n]|(?<!>)\||(?<![>&<])&(?![>&])")
_REDIRECT = re.compile(r"^(?:\d*|&)>>?(?:\|)?(.*)$")


def _shell_outside(cmd: str, cwd: str, brain: Any, kernel: Any) -> str | None:
    """None when `cmd` provably writes nothing outside the kernel's folder and scope, else what the
    hook cannot prove (a path written outside, or the command it cannot read)."""
    import shlex
    if _UNREADABLE.search(cmd):
        return "a command the hook cannot read (substitution, eval, here-document)"
    base = cwd or str(brain.kernels_dir / kernel.id)

    def outside(arg: str) -> bool:
        if arg in ("/dev/null", "/dev/stdout", "/dev/stderr") or arg.startswith("&"):
            return False
        return not _in_scope(os.path.normpath(os.path.join(base, os.path.expanduser(arg))), brain, kernel)

    for part in _SPLIT.split(cmd):
        try:
            words = shlex.split(part)
        except ValueError:
            return "a command the hook cannot read (unbalanced quotes)"
        args: list[str] = []
        it = iter(words)
        for w in it:   # redirections out of the way: each target checked
            m = _REDIRECT.match(w)
            if m and (">" in w):
                target = m.group(1) or next(it, "")
                if outside(target):
                    return f"a redirection to {target}"
                continue
            if w.startswith("<"):
                if w == "<":
                    next(it, None)
                continue
            args.append(w)
        while args and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", args[0]):
            args.pop(0)   # VAR=value before the command
        if not args:
            continue
        prog = os.path.basename(args[0])
        if prog in READERS and not (prog == "env" and len(args) > 1):
            continue
        if prog == "git" and len(args) > 1 and args[1] in _SAFE_GIT:
            continue
        if prog in ("nika-brain",) or (prog.startswith("python") and args[1:3] == ["-m", "nika_brain"]):
            continue   # nika-brain's own commands: its writes are checked by its CLI and the door
        if prog in WRITERS:
            paths = [a for a in args[1:] if not a.startswith("-")]
            bad = [a for a in paths if outside(a)]
            if bad:
                return f"`{prog}` on {bad[0]}"
            continue
        if prog == "sed" and not any(a.startswith("-i") or a == "--in-place" for a in args[1:]):
            continue
        if prog == "find" and not any(a in ("-delete", "-exec", "-execdir", "-ok", "-fprint", "-fprintf",
                                            "-fls") for a in args[1:]):
            continue
        return f"`{prog}`, whose writes the hook cannot read"
    return None


def check(doc: Doctrine, tool: str, tool_input: dict, cwd: str, brain: Any, kernel: Any) -> tuple[str, str] | None:
    """("deny"|"ask", reason) for a tool call the doctrine does not let through as is, else None."""
    from nika_brain.claude.policy import WRITE_TOOLS, canonical_tool
    name = canonical_tool(tool)
    label = ", ".join(doc.sources) or "its doctrine"
    if name in doc.tools_denied or tool in doc.tools_denied:
        return "deny", f"kernel {kernel.id}'s doctrine ({label}) refuses the {name} tool"
    if not doc.network:
        if name in NETWORK_TOOLS:
            return "deny", f"kernel {kernel.id}'s doctrine ({label}) says no network: {name} is refused"
        cmd = tool_input.get("command")
        if name.lower() == "bash" and isinstance(cmd, str) and _NET_CMD.search(cmd):
            return "deny", (f"kernel {kernel.id}'s doctrine ({label}) says no network: "
                            f"`{_NET_CMD.search(cmd).group(1)}` is refused")   # type: ignore[union-attr]
    if doc.external_writes != "allowed" and name in WRITE_TOOLS:
        raw = tool_input.get(WRITE_TOOLS[name])
        if isinstance(raw, str) and raw:
            path = os.path.normpath(os.path.join(cwd or "/", os.path.expanduser(raw)))
            if not _in_scope(path, brain, kernel):
                where = brain.rel(path) or path
                if doc.external_writes == "forbidden":
                    return "deny", (f"kernel {kernel.id}'s doctrine ({label}) forbids writes outside its "
                                    f"folder and scope ({where})")
                return "ask", (f"kernel {kernel.id}'s doctrine ({label}): a write outside its folder "
                               f"and scope ({where}) needs a human's approval")
    cmd = tool_input.get("command")
    if doc.external_writes != "allowed" and name.lower() == "bash" and isinstance(cmd, str) and cmd.strip():
        what = _shell_outside(cmd, cwd, brain, kernel)
        if what is not None:
            return "ask", (f"kernel {kernel.id}'s doctrine ({label}): this shell command may write outside "
                           f"its folder and scope ({what}); a human approves it (its sandbox refuses such "
                           "writes to the brain whatever the answer)")
    return None
