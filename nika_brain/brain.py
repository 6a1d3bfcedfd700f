"""The brain repository: where it is, its folders, and its config file (nika-brain.yml)."""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Mapping, TypeVar, get_args

from nika_brain.errors import BrainError, NoBrain
from nika_brain.support import fsio
from nika_brain.support.schema import F, fields, str_list
from nika_brain.support.yamlsafe import load_doc

T = TypeVar("T")
CONFIG_NAME = "nika-brain.yml"
STATE_DIR = ".nika"
# .nika/guarded/: what the operator's processes trust and no agent writes (the goals index, the inbox's
# nonces): write-denied in every agent's Claude Code sandbox, refused by the hook, absent from a kernel's.
GUARDED_DIR = "guarded"


@dataclass(frozen=True)
class Folder:
    """One folder of the brain layout. Every fact about the layout comes from LAYOUT below: which
    folders hold state that only nika-brain writes (guarded by the PreToolUse policy, the Claude Code
    deny rules and the sandbox; never covered by a path lock; committed by the orchestrator), which
    feed BRAIN-INDEX.md, and which kind of file each holds (the state layer maps kinds to loaders)."""
    path: str                  # brain-relative, no trailing slash
    kind: str | None = None    # the file kind of its *.yml (or *.md) files, validated by state.validate
    state: bool = False        # written only by nika-brain
    index: bool = False        # an input of BRAIN-INDEX.md
    kept: bool = False         # created empty (with .gitkeep) by `nika-brain init`
    tracked: bool = True       # in git (False: runtime data, git-ignored)
    what: str = ""


LAYOUT: tuple[Folder, ...] = (
    Folder("agents", "card", what="agent cards (Markdown + YAML front matter)"),
    Folder("brain", None, what="brain/KERNEL.md: zones and their protection level"),
    Folder("workflows", "workflow", index=True, what="declared chains of steps"),
    Folder("claims", "claim", state=True, index=True, kept=True, what="one YAML per step execution"),
    Folder("locks", "lock", state=True, index=True, kept=True, what="one YAML per held scope and owner"),
    Folder("gates", "gate", state=True, index=True, kept=True, what="one YAML per human gate"),
    Folder("breakers", "breaker", state=True, index=True, what="circuit breakers per scope"),
    Folder("runs", "run", state=True, index=True, what="the orchestrator's cursor through a workflow run"),
    Folder("journal", None, state=True, what="journal/signals.jsonl: BSI signals"),
    Folder("grants", "grant", state=True, index=True, what="vault grants: who may read whose records"),
    Folder("kernels", "kernel", index=True, what="one folder per kernel: kernel.yml, memory/, .claude/"),
    Folder("registry", None, state=True, index=True,
           what="session_registry: entities (strategy -> atomic), sessions, handovers (federation)"),
    Folder("proposals", None, state=True, index=True,
           what="spawn proposals written by the federation's triggers, each behind a human gate"),
    Folder("corrections", None, state=True,
           what="triage corrections: one YAML per prompt the operator re-routed (`triage correct`)"),
    Folder("doctrines", None, what="doctrines: YAML invariants per kernel (the doctrine-conflict trigger)"),
    Folder("scripts", None, what="the seed's shell entry points"),
    Folder("hooks", None, what="git hook and Claude Code hook templates"),
    Folder(".nika", None, state=True, tracked=False,
           what="runtime state: mutexes, caches, worktrees, embedded bus and stores"),
)
INDEX_FILE = "BRAIN-INDEX.md"
STATE_FOLDERS: tuple[str, ...] = tuple(f.path for f in LAYOUT if f.state)
TRACKED_STATE_FOLDERS: tuple[str, ...] = tuple(f.path for f in LAYOUT if f.state and f.tracked)
INDEX_INPUTS: tuple[str, ...] = tuple(f.path for f in LAYOUT if f.index)
KIND_FOLDERS: dict[str, str] = {f.path: f.kind for f in LAYOUT if f.kind}


def is_state_path(rel: str) -> bool:
    """True for a brain-relative posix path that lies in a state folder, or is the generated index."""
    head = rel.split("/", 1)[0]
    return head in STATE_FOLDERS or rel == INDEX_FILE


GateBackendName = Literal["cli", "github"]
BusName = Literal["embedded", "redis"]


@dataclass(frozen=True)
class Config:
    version: int = 1
    base_branch: str = "main"
    worktrees_dir: str = ".nika/worktrees"
    lock_ttl: float = 1800.0          # seconds a lock lives without renewal
    lock_poll: float = 0.2            # seconds between tries while waiting for a lock
    fsync: bool = True                # fsync state files (kill -9 safety needs only rename)
    breaker_threshold: int = 3        # consecutive fails on one scope that trip the breaker
    gate_backend: GateBackendName = "cli"
    github_repo: str | None = None    # owner/name for the pull-request gate
    github_api: str = "https://api.github.com"
    bus: BusName = "embedded"
    redis_url: str = "redis://127.0.0.1:6379/0"
    satellite_command: tuple[str, ...] = ()   # swarm mode; empty = Claude Code headless
    satellite_timeout: float = 3600.0  # seconds a swarm satellite may run before its claim fails
    index_template: str | None = None  # a brain may override the BRAIN-INDEX.md template
    default_agent: str = "satellite-boot"
    context_window: int | None = None  # tokens; what Claude Code reports wins over this
    sandbox: str = "auto"             # Claude Code's OS sandbox: auto | required | off
    # The federation's own settings (triage, vault, runtimes...), validated by nika_brain.federation.
    federation: Mapping[str, Any] = field(default_factory=dict)
    # One brain on several machines: remote, interval, fresh (validated by engine/sync.py).
    sync: Mapping[str, Any] = field(default_factory=dict)


def _positive(v: float) -> str | None:
    return None if v > 0 else "must be positive"


# Types and checks only: the defaults are Config's own (a key left out keeps the field's default).
_CONFIG_SPEC = {
    "version": F(int, choices=(1,)),
    "base_branch": F(str),
    "worktrees_dir": F(str),
    "lock_ttl": F(float, check=_positive),
    "lock_poll": F(float, check=_positive),
    "fsync": F(bool),
    "breaker_threshold": F(int, check=lambda v: None if v >= 1 else "must be at least 1"),
    "gate_backend": F(str, choices=get_args(GateBackendName)),
    "github_repo": F(str),
    "github_api": F(str),
    "bus": F(str, choices=get_args(BusName)),
    "redis_url": F(str),
    "satellite_command": F(list, check=str_list),
    "satellite_timeout": F(float, check=_positive),
    "index_template": F(str),
    "default_agent": F(str),
    "context_window": F(int, check=lambda v: None if v >= 1000 else "must be at least 1000 tokens"),
    "sandbox": F(str, choices=("auto", "required", "off")),
    "federation": F(dict),
    "sync": F(dict),
}
_CONVERT = {"lock_ttl": float, "lock_poll": float, "satellite_timeout": float, "satellite_command": tuple,
            "federation": dict, "sync": dict}


def load_config(path: Path) -> Config:
    doc = load_doc(path)
    data = {} if doc.data is None else doc.data
    values = fields(doc, data, (), _CONFIG_SPEC)
    given = {k: _CONVERT.get(k, lambda v: v)(v) for k, v in values.items()
             if isinstance(data, dict) and data.get(k) is not None}
    return Config(**given)


def _main_worktree(root: Path) -> Path:
    """A linked worktree's `.git` is a file pointing into the main repo; state lives in the main one."""
    dotgit = root / ".git"
    if dotgit.is_file():
        with contextlib.suppress(OSError, ValueError):
            text = dotgit.read_text(encoding="utf-8").strip()
            if text.startswith("gitdir:"):
                gitdir = Path(text.split(":", 1)[1].strip())
                if not gitdir.is_absolute():
                    gitdir = (root / gitdir).resolve()
                common = gitdir.parent.parent  # <main>/.git/worktrees/<name>
                if common.name == ".git" and (common.parent / CONFIG_NAME).is_file():
                    return common.parent
    return root


@dataclass(frozen=True)
class Brain:
    root: Path
    config: Config = field(default_factory=Config)

    @classmethod
    def at(cls, root: Path | str) -> "Brain":
        root = Path(root).resolve()
        cfg = root / CONFIG_NAME
        if not cfg.is_file():
            raise NoBrain(f"not a brain: {root} has no {CONFIG_NAME} (run `nika-brain init`)")
        return cls(root, load_config(cfg))

    @classmethod
    def find(cls, start: Path | str | None = None) -> "Brain":
        env = os.environ.get("NIKA_BRAIN_DIR")
        if env and start is None:
            return cls.at(_main_worktree(Path(env).resolve()))
        here = Path(start or os.getcwd()).resolve()
        for folder in (here, *here.parents):
            if (folder / CONFIG_NAME).is_file():
                return cls.at(_main_worktree(folder))
        raise NoBrain(f"no brain found at or above {here} (no {CONFIG_NAME}; run `nika-brain init`)")

    # Folders of the brain layout (LAYOUT above; docs/ARCHITECTURE.md).
    @property
    def agents_dir(self) -> Path: return self.root / "agents"
    @property
    def workflows_dir(self) -> Path: return self.root / "workflows"
    @property
    def claims_dir(self) -> Path: return self.root / "claims"
    @property
    def locks_dir(self) -> Path: return self.root / "locks"
    @property
    def gates_dir(self) -> Path: return self.root / "gates"
    @property
    def kernels_dir(self) -> Path: return self.root / "kernels"
    @property
    def journal_dir(self) -> Path: return self.root / "journal"
    @property
    def breakers_dir(self) -> Path: return self.root / "breakers"
    @property
    def runs_dir(self) -> Path: return self.root / "runs"
    @property
    def grants_dir(self) -> Path: return self.root / "grants"
    @property
    def kernel_md(self) -> Path: return self.root / "brain" / "KERNEL.md"
    @property
    def index_path(self) -> Path: return self.root / INDEX_FILE
    @property
    def state_dir(self) -> Path: return self.root / STATE_DIR
    @property
    def guarded_dir(self) -> Path: return self.root / STATE_DIR / GUARDED_DIR
    @property
    def worktrees_dir(self) -> Path: return self.root / self.config.worktrees_dir

    def rel(self, path: Path | str) -> str | None:
        """Brain-relative posix path of `path`, or None when it lies outside the brain."""
        p = Path(path)
        if not p.is_absolute():
            p = Path(os.getcwd()) / p
        p = Path(os.path.normpath(p))
        try:
            return p.relative_to(self.root).as_posix()
        except ValueError:
            return None

    def mutex(self, name: str):
        """Inter-process mutex guarding read-modify-write of one kind of state."""
        return fsio.mutex(self.state_dir / "mutex" / f"{name}.lock")

    def write(self, path: Path, text: str) -> None:
        fsio.atomic_write(path, text, fsync=self.config.fsync)

    def load_all(self, folder: Path, loader: Callable[[Path], T]) -> list[T]:
        """Load every state file of a folder; one that vanished between listing and reading (a lock
        released, a temp file renamed) is skipped, while one that is there but broken raises."""
        out = []
        for path in self.iter_yaml(folder):
            try:
                out.append(loader(path))
            except BrainError:
                if path.exists():
                    raise
        return out

    def iter_yaml(self, folder: Path) -> Iterator[Path]:
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            return iter(())
        temps = [n for n in names if n.endswith(".tmp") and n.startswith(".")]
        if temps:  # left by killed writers: sweep those whose writer is gone (fsio.sweep_temp)
            fsio.sweep_temp(folder, temps)
        return iter(sorted(folder / n for n in names if n.endswith(".yml") and not n.startswith(".")))
