"""The package's folders are its layers: every import points down (docs/ARCHITECTURE.md)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nika_brain"

# Lower rank = lower layer. A module may import its own folder's modules and any lower rank.
RANKS = {
    "errors": 0, "support": 1, "brain": 2, "state": 3,
    "bus": 4, "gitrepo": 4, "github": 4, "claude": 4,
    "engine": 5, "federation": 6, "hooks": 7, "cli": 8, "__main__": 9,
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
