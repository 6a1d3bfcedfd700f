"""The benches keep operator keys out of the operator's real folder (issue 25): each runs inside
bench/isolation.py's `own_operator_home`, a passwd home of its own that is removed when it ends.

Here the test's own passwd home (the autouse `operator_home` fixture) stands for the real one."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

# A bench's setup, as the bench runs it: bench_index builds its brain with a `nika-brain init` process,
# bench_precommit calls init in process. Prints the bench home's keys seen while it ran.
SETUP = """
import json, sys
from pathlib import Path
sys.path.insert(0, {bench!r})
import bench_index, bench_precommit, isolation
from nika_brain.state import authority
where = Path(sys.argv[1])
def setup():
    bench_index.build(where / "index-brain", 3, 1)
    bench_precommit.seed(where / "precommit-brain", 2, hooks=False)
    return sorted(p.name for p in authority.private_dir().glob("*.key")), str(authority.private_dir())
if sys.argv[2] == "isolated":
    with isolation.own_operator_home():
        keys, folder = setup()
else:
    keys, folder = setup()
print(json.dumps({{"keys": keys, "folder": folder}}))
"""


def run_setup(tmp_path: Path, how: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SETUP.format(bench=str(BENCH)), str(tmp_path / how), how],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def keys_under(home: Path) -> list[str]:
    return sorted(p.name for p in (home / ".config" / "nika-brain" / "private").glob("*.key"))


def test_a_bench_setup_writes_no_key_into_the_operators_folder_and_removes_its_own(tmp_path, operator_home,
                                                                                 git_env):
    got = run_setup(tmp_path, "isolated")
    assert len(got["keys"]) == 2, got  # both brains got their operator key, in the bench's home
    assert str(operator_home) not in got["folder"]
    assert not Path(got["folder"]).exists()  # removed when the bench ended
    assert keys_under(operator_home) == []


def test_the_same_setup_without_the_isolation_would_write_into_the_operators_folder(tmp_path, operator_home,
                                                                                  git_env):
    got = run_setup(tmp_path, "bare")
    assert len(keys_under(operator_home)) == 2 and got["keys"] == keys_under(operator_home)


def test_every_bench_runs_its_main_inside_its_own_operator_home():
    scripts = sorted(BENCH.glob("bench_*.py")) + [BENCH / "mutants.py"]
    assert len(scripts) > 10
    bare = []
    for path in scripts:
        tree = ast.parse(path.read_text())
        mains = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
        ok = len(mains) == 1 and len(mains[0].body) == 1 and isinstance(mains[0].body[0], ast.With) and \
            "own_operator_home()" in ast.unparse(mains[0].body[0].items[0])
        if not ok:
            bare.append(path.name)
    assert bare == []
