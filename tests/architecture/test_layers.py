"""The package's folders are its layers: every import points down (docs/ARCHITECTURE.md)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nika_brain"

# Lower rank = lower layer. A module may import its own folder's modules and any lower rank.
RANKS = {
    "errors": 0, "support": 1, "brain": 2, "state": 3,
    "bus": 4, "gitrepo": 4, "github": 4, "claude": 4,
    "engine": 5, "federation": 6, "hooks": 7, "console": 7, "cli": 8, "__main__": 9,
}


def _unit(module: str) -> str:
    """'nika_brain.state.locks' -> 'state'; 'nika_brain' -> '' (the package root: version only)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path, module: str):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("nika_brain"):
                continue
            if target == "nika_brain":
                for alias in node.names:
                    yield node.lineno, f"nika_brain.{alias.name}"
            else:
                yield node.lineno, target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("nika_brain"):
                    yield node.lineno, alias.name


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield path, ".".join(parts)


def test_every_folder_has_a_rank():
    units = {_unit(m) for _, m in _modules()} - {""}
    assert units <= set(RANKS), sorted(units - set(RANKS))


def test_imports_point_only_down():
    upward = []
    for path, module in _modules():
        mine = _unit(module)
        for line, target in _imports(path, module):
            theirs = _unit(target)
            if theirs in ("", "__version__") or theirs == mine or mine == "":
                continue
            if RANKS[theirs] >= RANKS[mine]:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {mine} -> {target}")
    assert not upward, "\n".join(upward)


# The federation's rooms (nika_brain/federation/__init__.py): a room imports its own modules, the loose
# shared modules (rank 0) and lower rooms only.
ROOMS = {
    "options": 0, "embedding": 0,
    "resident": -1,    # the client of the daemon's socket (the embedder, the hint and ask use it)
    "vault": 1, "triage": 2, "stealing": 3,
    "overview": 4,     # the federation section of the index and of `kernel observe` (reads stealing)
    "kernels": 5, "spawning": 6, "lineage": 7,
    "doors": 6,        # the kernels' sockets to the vault and the bus (reads kernels.health)
    "asking": 8,       # `nika-brain ask`: triage, then deliver through the verbs
    "daemon": 9,       # runs everything (services: supervisor, stealing, triggers, embedder...)
}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "federation" else None


def test_every_federation_room_has_a_rank():
    rooms = {_room(m) for _, m in _modules()} - {None}
    assert rooms <= set(ROOMS), sorted(rooms - set(ROOMS))


def test_federation_rooms_import_only_lower_rooms():
    upward = []
    for module, targets in sorted(_graph().items()):
        mine = _room(module)
        for target in sorted(targets):
            theirs = _room(target)
            if mine is None or theirs is None or theirs == mine:
                continue
            if ROOMS[theirs] >= ROOMS[mine]:
                upward.append(f"{module} -> {target}")
    assert not upward, "\n".join(upward)


def _graph() -> dict[str, set[str]]:
    """module -> the modules it imports (function-level imports included). `from pkg import name` points
    at pkg.name when that is a module. A package's __init__ importing its own children is a re-export,
    not a dependency, and is left out."""
    modules = {m: path for path, m in _modules()}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for _, target in _imports(path, module):
            graph[module].add(target) if target in modules else None
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nika_brain"):
                for alias in node.names:
                    child = f"{node.module}.{alias.name}"
                    if child in modules:
                        graph[module].discard(node.module)
                        graph[module].add(child)
        if path.name == "__init__.py":
            graph[module] = {t for t in graph[module] if not t.startswith(module + ".")}
        graph[module].discard(module)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_policy_and_the_git_hook_guard_every_state_folder_of_the_layout(tmp_path):
    from nika_brain.brain import LAYOUT, STATE_FOLDERS, is_state_path
    from nika_brain.claude.policy import _guarded
    from nika_brain.claude.settings import kernel_deny_rules

    rules = kernel_deny_rules(tmp_path, "k1")
    assert set(STATE_FOLDERS) >= {"claims", "locks", "gates", "breakers", "runs", "journal", ".nika"}
    for folder in STATE_FOLDERS:
        # The PreToolUse policy refuses hand edits there. Deliberately no Claude Code Edit(...) deny
        # rule: Claude Code turns Edit rules into sandbox denyWrite mounts, which made the agent's own
        # `nika-brain claim close` fail (EROFS) with the real CLI (tests/claudecli).
        assert _guarded(f"{folder}/x.yml"), folder
        assert f"Edit(/{(tmp_path / folder).as_posix()}/**)" not in rules, folder
        assert is_state_path(f"{folder}/x.yml")
    assert not is_state_path("src/claims/x.py")
    assert [f.path for f in LAYOUT if f.kept] == ["claims", "locks", "gates"]


def test_every_federation_room_is_a_row_of_the_architecture_table():
    """docs/ARCHITECTURE.md's federation table names every room and loose module, at its rank."""
    doc = (PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = doc.split("### The federation", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].lstrip("-").isdigit():
            for name in cells[1].replace("(loose)", "").split(","):
                rows[name.strip().strip("`").rstrip("/")] = int(cells[0])
    assert rows == ROOMS, {k: (rows.get(k), ROOMS.get(k)) for k in set(rows) | set(ROOMS)
                           if rows.get(k) != ROOMS.get(k)}
