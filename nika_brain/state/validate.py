"""`nika-brain validate`: every brain file checked against its kind's schema, one line per problem.

The kind of a file comes from where it sits in the brain (see `kind_of`); its loader is the same one
the tools use, so "validate passes" means "the tools will read it". On top of the schemas, a few cheap
cross-checks catch references that would only fail later at run time: a claim's or a workflow step's
zone must exist in brain/KERNEL.md and its agent must have a card.

This module is on the git pre-commit path: it imports the loaders of the kinds it meets, nothing heavy.
"""
from __future__ import annotations

import importlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from nika_brain.brain import CONFIG_NAME, KIND_FOLDERS, STATE_FOLDERS
from nika_brain.errors import BrainError
from nika_brain.support import fsio
from nika_brain.support.schema import name as schema_name
from nika_brain.support.yamlsafe import load_doc

# Folders of *.yml files of one kind, in LAYOUT order: the files others refer to come first.
STATE_DIRS = {d: k for d, k in KIND_FOLDERS.items() if d in STATE_FOLDERS}
_YAML_DIRS = {d: k for d, k in KIND_FOLDERS.items() if k not in ("card", "kernel")}
_WALK = tuple(d for d in KIND_FOLDERS if d != "kernels")
KNOWN = ("nika-brain.yml, brain/KERNEL.md, agents/*.md, kernels/*/kernel.yml and *.yml in "
         + ", ".join(f"{d}/" for d in _YAML_DIRS))


def _misnamed(path: Path) -> Any:
    raise BrainError("nika-brain ignores this file: brain YAML files end in .yml", file=str(path))


# kind -> (module, function): a loader's module is imported when a file of its kind is loaded, so a
# commit of claims and runs (the orchestrator's state commits) pays for those loaders only.
LOADERS: dict[str, tuple[str, str]] = {
    "config": ("nika_brain.brain", "load_config"),
    "zones": ("nika_brain.state.zones", "load_zones_path"),
    "card": ("nika_brain.state.agents", "load_card_path"),
    "workflow": ("nika_brain.state.workflows", "load_workflow"),
    "claim": ("nika_brain.state.claims", "load_path"),
    "lock": ("nika_brain.state.locks", "load_lock"),
    "gate": ("nika_brain.state.gates", "load_path"),
    "breaker": ("nika_brain.state.breakers", "load_path"),
    "run": ("nika_brain.state.runs", "load_path"),
    "grant": ("nika_brain.state.grants", "load_path"),
    "kernel": ("nika_brain.state.kernels", "load_path"),
    "misnamed": (__name__, "_misnamed"),
}


def loader(kind: str) -> Callable[[Path], Any]:
    """The loader of a kind of brain file (a KeyError for a kind that is none)."""
    module, function = LOADERS[kind]
    return getattr(importlib.import_module(module), function)


def kind_of(rel: str) -> str | None:
    """The kind of a brain-relative posix path, or None when it is not a brain file."""
    if rel == CONFIG_NAME:
        return "config"
    if rel == "brain/KERNEL.md":
        return "zones"
    parts = rel.split("/")
    if len(parts) == 2 and not parts[1].startswith("."):
        folder, name = parts
        if folder in _YAML_DIRS:
            if name.endswith(".yml"):
                return _YAML_DIRS[folder]
            return "misnamed" if name.endswith(".yaml") else None
        if folder == "agents" and name.endswith(".md"):
            return "card"
    if len(parts) == 3 and parts[0] == "kernels" and parts[2] == "kernel.yml" and not parts[1].startswith("."):
        return "kernel"
    return None


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    key: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:" if self.line else f"{self.file}:"
        key = f" {self.key}:" if self.key else ""
        return f"{where}{key} {self.message}"


@dataclass
class Report:
    files: int = 0
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # reported, not failing: temp files of writers

    @property
    def ok(self) -> bool:
        return not self.problems


def load(kind: str, path: Path) -> Any:
    """The object a brain file of `kind` holds; a BrainError always names the file."""
    try:
        return loader(kind)(path)
    except BrainError as exc:
        if not exc.file:  # a helper deep in a loader may not know which file it was reading
            exc.file = str(path)
        raise


def _problem(exc: BrainError, display: str) -> Problem:
    # Loader messages are one line by construction; keep it that way whatever a parser says.
    message = " ".join(str(exc.message).split()) or "invalid"
    return Problem(display, exc.line, exc.key, message)


def locate_root(start: Path | str) -> Path | None:
    """Nearest folder at or above `start` holding nika-brain.yml, without loading it (it may be bad)."""
    try:
        here = Path(start).resolve()
        if here.is_file():
            here = here.parent
        for folder in (here, *here.parents):
            if (folder / CONFIG_NAME).is_file():
                return folder
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return None
    return None


class _Checker:
    """Loads files of one validation run and cross-checks their references."""

    def __init__(self, root: Path):
        self.root = root
        self.report = Report()
        self.loaded: list[tuple[str, str, Path, Any]] = []   # (kind, display, path, object)

    def check(self, kind: str, path: Path, display: str) -> None:
        self.report.files += 1
        try:
            obj = load(kind, path)
        except BrainError as exc:
            self.report.problems.append(_problem(exc, display))
            return
        self.loaded.append((kind, display, path, obj))

    # -- references ---------------------------------------------------------------------------
    def _zone_names(self) -> set[str] | None:
        for kind, _, _, obj in self.loaded:
            if kind == "zones":
                return {z.name for z in obj}
        kernel_md = self.root / "brain" / "KERNEL.md"
        if not kernel_md.is_file():
            return None
        try:
            return {z.name for z in loader("zones")(kernel_md)}
        except BrainError:
            return None  # its own problem is reported when KERNEL.md itself is validated

    def _card_exists(self, name: str, staged_cards: set[str]) -> bool:
        if schema_name(name):  # not a card name at all (and maybe too long for a file name)
            return False
        return name in staged_cards or (self.root / "agents" / f"{name}.md").is_file()

    def _gate_forged(self, g: Any) -> str | None:
        """A CLI decision without the operator's valid signature (the orchestrator treats it as
        pending). Pull-request decisions are checked against GitHub by the orchestrator, not here
        (no network in validation)."""
        if g.pending or g.via == "github-pr":
            return None
        from nika_brain.state import authority
        pub = authority.key_paths(self.root)[1]
        if not pub.is_file():
            return (f"not an authentic decision: {g.status}, and this machine has no operator key "
                    f"for this brain ({pub}) to check its signature; the orchestrator treats it as "
                    "pending")
        from nika_brain.state.gates import authentic
        why = authentic(_RootOnly(self.root), g)  # type: ignore[arg-type]  # only .root is read
        return f"not an authentic decision: {why}" if why else None

    def cross_check(self) -> None:
        zone_names: set[str] | None = None
        zones_read = False   # brain/KERNEL.md is read at the first zone named, not for a commit naming none
        staged_cards = {obj.name for kind, _, _, obj in self.loaded if kind == "card"}
        for kind, display, path, obj in self.loaded:
            refs: list[tuple[tuple, str, str]] = []   # (key path, "zone"|"agent", value)
            if kind == "claim":
                if obj.zone:
                    refs.append((("zone",), "zone", obj.zone))
                if obj.agent:
                    refs.append((("agent",), "agent", obj.agent))
            elif kind == "workflow":
                if obj.agent:
                    refs.append((("agent",), "agent", obj.agent))
                for i, step in enumerate(obj.chain):
                    if step.zone:
                        refs.append((("chain", i, "zone"), "zone", step.zone))
                    if step.agent:
                        refs.append((("chain", i, "agent"), "agent", step.agent))
            found = []
            if kind == "gate":
                why = self._gate_forged(obj)
                if why:
                    found.append(Problem(display, _line(path, ("status",)), "status", why))
            elif kind == "grant":
                from nika_brain.state.grants import authentic as grant_authentic
                why = grant_authentic(_RootOnly(self.root), obj)  # type: ignore[arg-type]
                if why:
                    found.append(Problem(display, _line(path, ("owner",)), "signature",
                                         f"not an authentic grant: {why}"))
            for keypath, what, value in refs:
                if what == "zone":
                    if not zones_read:
                        zone_names, zones_read = self._zone_names(), True
                    if zone_names is None or value in zone_names:
                        continue
                    known = ", ".join(sorted(zone_names)) or "none"
                    msg = f"unknown zone {value!r} (brain/KERNEL.md declares: {known})"
                elif self._card_exists(value, staged_cards):
                    continue
                else:
                    msg = f"no agent card agents/{value}.md"
                found.append(Problem(display, _line(path, keypath), ".".join(map(str, keypath)), msg))
            self.report.problems += sorted(found, key=lambda p: p.line or 0)


class _RootOnly:
    """What authority needs of a brain (its root), for a brain whose config may be broken."""

    def __init__(self, root: Path):
        self.root = root


def _line(path: Path, keypath: tuple) -> int | None:
    try:
        return load_doc(path).line(*keypath)
    except BrainError:
        return None


def _walk_brain(root: Path) -> Iterable[tuple[str, Path]]:
    """(kind, path) of every brain file by location, in a stable order."""
    for rel, kind in ((CONFIG_NAME, "config"), ("brain/KERNEL.md", "zones")):
        if (root / rel).is_file():
            yield kind, root / rel
    for folder in _WALK:
        d = root / folder
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            found = kind_of(f"{folder}/{p.name}")
            if found and not p.is_dir():
                yield found, p
    kdir = root / "kernels"
    if kdir.is_dir():
        for p in sorted(kdir.iterdir()):
            if (p / "kernel.yml").is_file() and kind_of(f"kernels/{p.name}/kernel.yml"):
                yield "kernel", p / "kernel.yml"


def temp_notes(root: Path) -> list[str]:
    """One line per writer temp file in a state folder (git ignores them; listing sweeps them)."""
    out = []
    for folder in (*_WALK, "journal"):
        try:
            names = sorted(os.listdir(root / folder))
        except OSError:
            continue
        for n in names:
            if fsio.temp_pid(n) is not None:
                out.append(f"{folder}/{n}: temp file of writer pid {fsio.temp_pid(n)} "
                           f"(ignored by git, swept once its writer is gone)")
    return out


def _rel(root: Path, path: Path) -> str | None:
    try:
        return Path(os.path.normpath(path)).relative_to(root).as_posix()
    except ValueError:
        return None


def validate(root: Path | str, paths: Iterable[Path | str] | None = None) -> Report:
    """Validate the whole brain at `root`, or only `paths` (files or folders) inside it."""
    root = Path(root).resolve()
    checker = _Checker(root)
    if paths is None:
        for kind, p in _walk_brain(root):
            checker.check(kind, p, _rel(root, p) or str(p))
        checker.report.notes += temp_notes(root)
    else:
        for given in paths:
            try:
                _check_given(checker, root, Path(given), str(given))
            except (OSError, ValueError) as exc:  # a name too long, a NUL byte...
                reason = getattr(exc, "strerror", None) or "not a usable path"
                checker.report.files += 1
                checker.report.problems.append(Problem(str(given)[:120], None, None, reason))
    checker.cross_check()
    return checker.report


def _check_given(checker: _Checker, root: Path, given: Path, display: str) -> None:
    path = given if given.is_absolute() else Path.cwd() / given
    path = Path(os.path.normpath(path))
    rel = _rel(root, path)
    if rel is None:
        checker.report.files += 1
        checker.report.problems.append(Problem(display, None, None, f"outside the brain at {root}"))
        return
    if path.is_dir():
        if rel == ".":
            for walked, p in _walk_brain(root):
                checker.check(walked, p, _rel(root, p) or str(p))
            return
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if d not in (".git", ".nika"))
            for fname in sorted(filenames):
                p = Path(dirpath) / fname
                r = _rel(root, p) or ""
                kind = kind_of(r)
                if kind:
                    checker.check(kind, p, r)
        return
    kind = kind_of(rel)
    if not path.exists():
        checker.report.files += 1
        checker.report.problems.append(Problem(rel, None, None, "no such file"))
    elif kind is None:
        checker.report.files += 1
        checker.report.problems.append(Problem(rel, None, None, f"not a brain file (nika-brain validates {KNOWN})"))
    else:
        checker.check(kind, path, rel)


def validate_blobs(root: Path | str, items: Iterable[tuple[str, bytes]]) -> Report:
    """Validate file contents that are not (or not yet) on disk, e.g. the staged blobs of a commit.

    `items` are (brain-relative path, content). Each is written under a temporary folder at its own
    relative path, so that loaders which check a file's name against its content still can.
    Cross-checks look at the other items first, then at the working tree under `root`.
    """
    root = Path(root).resolve()
    checker = _Checker(root)
    with tempfile.TemporaryDirectory(prefix="nika-validate-") as tmp:
        base = Path(tmp)
        for rel, data in items:
            kind = kind_of(rel)
            if kind is None:
                continue
            p = base / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            checker.check(kind, p, rel)
        checker.cross_check()
    return checker.report
