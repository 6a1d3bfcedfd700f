"""`nika-brain init <dir>`: make (or adopt) a git repository and lay the brain template into it.

The template (nika_brain/templates/brain/) is copied only where a file is missing, so a user's file is
never overwritten and running init twice changes nothing. A repository with no commit yet gets one
commit of the template, so that theme branches have a base; a repository with history is left for
its owner to commit (nothing is staged).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from nika_brain.brain import CONFIG_NAME, LAYOUT, Brain, load_config
from nika_brain.errors import BrainError
from nika_brain.gitrepo import git

TEMPLATE_ROOT = Path(__file__).parent.parent / "templates" / "brain"
EMPTY_DIRS = tuple(f.path for f in LAYOUT if f.kept)
EXECUTABLE_DIRS = ("scripts", "hooks/git")
IGNORE_LINE = ".nika/"
TEMP_IGNORE = ".*.tmp"
# The brain's Claude Code settings name this machine's interpreter and brain folder by absolute path
# and are rewritten by `nika-brain claude install` (and by every launch that finds them missing):
# per-machine files, so ignored rather than committed (issue 25 §4).
CLAUDE_IGNORE = "/.claude/"
IGNORE_LINES = (IGNORE_LINE, TEMP_IGNORE, CLAUDE_IGNORE)
def secret_ignores() -> tuple[str, ...]:
    """Every secret pattern of the one list (claude/secretfiles.py), for the brain's .gitignore: a
    kernel's credentials.env must never reach a commit (an operator's `git add -A`)."""
    from nika_brain.claude.secretfiles import _NOT_SECRET, _ONLY_UNDER, DIRS, NAMES, PATTERNS
    names = sorted(n for n in NAMES if n not in _ONLY_UNDER)
    keep = [f"!*{suffix}" for suffix in _NOT_SECRET if suffix != ".md"]
    return ("credentials.env", *names, *PATTERNS, *(f"{d}/" for d in sorted(DIRS)), *keep)
COMMIT_MESSAGE = "nika-brain init: brain template"


@dataclass
class InitReport:
    root: Path
    repo_created: bool = False
    created: list[str] = field(default_factory=list)     # brain-relative paths written by this run
    gitignore: str | None = None                          # "created" | "updated" | None
    index_written: bool = False
    hooks: list[str] = field(default_factory=list)
    committed: str | None = None                          # sha of the initial commit, when made

    @property
    def changed(self) -> bool:
        return bool(self.repo_created or self.created or self.gitignore or self.index_written
                    or self.hooks or self.committed)


def template_files() -> list[str]:
    """Brain-relative paths of the template, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(TEMPLATE_ROOT):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in filenames:
            if name.endswith((".pyc", ".pyo")):
                continue
            out.append((Path(dirpath) / name).relative_to(TEMPLATE_ROOT).as_posix())
    return sorted(out)


def _is_toplevel(root: Path) -> bool:
    proc = git.run(root, "rev-parse", "--show-toplevel", check=False)
    return proc.returncode == 0 and Path(proc.stdout.strip()).resolve() == root


def _has_commit(root: Path) -> bool:
    return git.run(root, "rev-parse", "--verify", "-q", "HEAD", check=False).returncode == 0


def _create(path: Path, data: bytes, mode: int) -> bool:
    """Write a new file; False (and nothing written) when something is already there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)  # the umask must not strip the executable bit of a script
    return True


def _config_text(branch: str | None) -> bytes:
    text = (TEMPLATE_ROOT / CONFIG_NAME).read_text(encoding="utf-8")
    if branch and branch != "main":
        text = text.replace("# base_branch: main", f"base_branch: {branch}", 1)
    return text.encode("utf-8")


def _ensure_gitignore(root: Path) -> str | None:
    """.nika/ (local state), .*.tmp (temp files a killed writer leaves in a state folder) and /.claude/
    (this machine's Claude Code settings)."""
    path = root / ".gitignore"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        path.write_text("".join(f"{line}\n" for line in IGNORE_LINES + secret_ignores()),
                        encoding="utf-8")
        return "created"
    except (OSError, UnicodeDecodeError) as exc:
        raise BrainError(f"cannot read .gitignore: {exc}", file=str(path)) from exc
    lines = {line.strip() for line in text.splitlines()}
    missing = []
    if not lines & {".nika", ".nika/", "/.nika", "/.nika/"}:
        missing.append(IGNORE_LINE)
    if TEMP_IGNORE not in lines:
        missing.append(TEMP_IGNORE)
    if not lines & {".claude", ".claude/", "/.claude", "/.claude/"}:
        missing.append(CLAUDE_IGNORE)
    missing += [line for line in secret_ignores() if line not in lines]
    if not missing:
        return None
    sep = "" if not text or text.endswith("\n") else "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(sep + "".join(f"{line}\n" for line in missing))
    return "updated"


def init(target: Path | str, *, hooks: bool = True) -> InitReport:
    root = Path(target).resolve()
    if root.exists() and not root.is_dir():
        raise BrainError(f"{root} exists and is not a folder")
    # A brain's own config must be sound before anything is written (bad input changes no state).
    cfg = root / CONFIG_NAME
    if cfg.exists():
        load_config(cfg)
    report = InitReport(root)
    root.mkdir(parents=True, exist_ok=True)

    if not _is_toplevel(root):
        git.run(root, "init", "-q", "-b", "main")
        report.repo_created = True
    branch = git.current_branch(root)

    for rel in template_files():
        src, dest = TEMPLATE_ROOT / rel, root / rel
        if dest.exists() or dest.is_symlink():
            continue
        executable = rel.startswith(tuple(d + "/" for d in EXECUTABLE_DIRS))
        data = _config_text(branch) if rel == CONFIG_NAME else src.read_bytes()
        if _create(dest, data, 0o755 if executable else 0o644):
            report.created.append(rel)
    for d in EMPTY_DIRS:
        folder = root / d
        folder.mkdir(exist_ok=True)
        if not any(folder.iterdir()) and _create(folder / ".gitkeep", b"", 0o644):
            report.created.append(f"{d}/.gitkeep")

    report.gitignore = _ensure_gitignore(root)
    brain = Brain.at(root)
    if not brain.index_path.exists():
        from nika_brain.engine import index
        report.index_written = index.regenerate(brain)
    if hooks:
        from nika_brain.gitrepo import githooks
        report.hooks = githooks.install(root)
        from nika_brain.gitrepo import sync
        sync.configure_merge_driver(root)   # BRAIN-INDEX.md is regenerated after a sync, never merged

    from nika_brain.state import authority
    if not authority.in_agent_session():
        # The operator runs init: the brain's key is made and pinned (operator.pub, committed).
        try:
            authority.create_key(root)
        except BrainError:
            pass  # `nika-brain operator init` says why, when a decision first needs it
    if not _has_commit(root):
        paths = [p for p in template_files() + [f"{d}/.gitkeep" for d in EMPTY_DIRS]
                 + [".gitignore", ".gitattributes", brain.index_path.name, authority.PIN_NAME]
                 if (root / p).exists()]
        git.run(root, "add", "--", *paths)
        git.run(root, "commit", "-q", "-m", COMMIT_MESSAGE, "--", *paths)
        report.committed = git.out(root, "rev-parse", "HEAD")
    return report
