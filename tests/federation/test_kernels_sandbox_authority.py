"""Issue 24, the sandbox rows: the red team's attacks on the brain's state and authority, run from a
kernel's shell inside the bubblewrap sandbox nika-brain starts (the stand-in agent runs them, as in
test_kernels_sandbox.py), each asserted to have had no effect on the host.

One invocation runs every attack (one kernel turn: these tests are slow under load); each attack
prints `@@<name> rc=<exit code>` so a failure names the attack.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

from nika_brain.engine.signals import INBOX
from nika_brain.federation.kernels import runtimes
from nika_brain.state import gates, kernels

from .fedkit import fbrain, until  # noqa: F401
from .test_kernels_sandbox import _sh, walled  # noqa: F401

PY = sys.executable


def _inbox_rows(brain) -> int:
    import sqlite3
    db = sqlite3.connect(brain.state_dir / "bus.sqlite3")
    try:
        return db.execute("select count(*) from messages where channel = ?", (INBOX,)).fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        db.close()


def _head(root) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _pin_changed(root) -> bool:
    committed = subprocess.run(["git", "-C", str(root), "show", "HEAD:operator.pub"], capture_output=True,
                               text=True).stdout
    return (root / "operator.pub").read_text() != committed


def test_a_kernels_shell_changes_no_state_it_does_not_own(walled, cli):  # noqa: F811
    brain, _ = walled
    root = brain.root
    gates.open_gate(brain, "g1", "ship it?")
    held = {}   # one lock of another claim per lock attack, so each attack is judged on its own
    for n in range(1, 7):
        assert cli("lock", "acquire", f"src/l{n}/", "--owner", "other-claim", "--no-pid").returncode == 0
        path = next(p for p in brain.locks_dir.glob("*.yml") if p not in held.values())
        held[n] = path
    before = {n: p.read_text() for n, p in held.items()}
    for n in (1, 2):   # history for `git reset --hard HEAD~2` to go back through
        (root / f"history{n}.txt").write_text(f"{n}\n")
        subprocess.run(["git", "-C", str(root), "add", f"history{n}.txt"], check=True)
        subprocess.run(["git", "-C", str(root), "commit", "-qm", f"history {n}", "--no-verify"], check=True)
    git_head = _head(root)
    beta_runtime = runtimes.state_path(brain, "beta").read_text()
    rows = _inbox_rows(brain)
    nb = f"{PY} -m nika_brain"
    forged = json.dumps({"type": "ABORT", "workflow": "w", "reason": "forged"})
    alpha = kernels.kernel_dir(brain, "alpha")
    attacks = {
        "gate approve with a key folder of its own":
            f"XDG_CONFIG_HOME={root}/.nika/cfg HOME=/tmp/fakehome {nb} gate approve g1",
        "lock release as the other claim (l1)": f"NIKA_CLAIM=other-claim {nb} lock release src/l1/",
        "lock acquire --owner other --ttl 1 (l2)":
            f"{nb} lock acquire src/l2/ --owner other-claim --ttl 1 --no-pid",
        "lock renew as the other claim (l3)": f"NIKA_CLAIM=other-claim {nb} lock renew src/l3/ --ttl 1",
        "unlink another claim's lock file (l4)": f"rm {held[4]}",
        "edit another claim's lock file (l5)": f"sed -i s/other-claim/mine/ {held[5]}",
        "hard link to a lock file (l6)": f"ln {held[6]} {alpha}/l.yml && echo x >> {alpha}/l.yml",
        "grant written with python": f"{PY} -c \"open('{root}/grants/beta--alpha.yml', 'w')"
                                     ".write('owner: beta\\nreader: alpha\\n')\"",
        "inbox ABORT through bus publish": f"{nb} bus publish {INBOX} '{forged}'",
        "git reset --hard": f"git -C {root} reset -q --hard HEAD~2",
        "a claim written with python": f"{PY} -c \"open('{root}/claims/evil.yml', 'w').write('id: evil\\n')\"",
        "its own lock (refused in one line)": f"{nb} lock acquire src/mine/ --owner alpha --no-pid 2>&1 | "
                                              "grep -q Traceback && exit 0 || exit 1",
        "git commit over the operator pin": f"echo 00 > {root}/operator.pub && git -C {root} commit -qam x"
                                            " --no-verify",
        "another kernel's runtime.json": f"mkdir -p {root}/kernels/beta && echo '{{}}' > "
                                         f"{root}/kernels/beta/runtime.json",
    }
    script = "; ".join(f"( {cmd} ) >/dev/null 2>&1; echo \"@@{i} rc=$?\"" for i, cmd in
                       enumerate(attacks.values()))
    rc, out = _sh(brain, "alpha", script)
    codes = {int(m[1]): int(m[2]) for m in re.finditer(r"@@(\d+) rc=(\d+)", out)}
    assert len(codes) == len(attacks), out
    names = list(attacks)
    effects = []
    if not gates.load_gate(brain, "g1").pending:
        effects.append("gate approved")
    for n, path in held.items():
        if not path.exists() or path.read_text() != before[n]:
            effects.append(f"l{n}: the other claim's lock changed or vanished")
    if (root / "grants" / "beta--alpha.yml").exists():
        effects.append("grant written")
    if _inbox_rows(brain) != rows:
        effects.append("inbox message posted")
    if _head(root) != git_head:
        effects.append("HEAD moved")
    if (root / "claims" / "evil.yml").exists():
        effects.append("claim written")
    if _pin_changed(root):
        effects.append("operator.pub changed")
    if runtimes.load_state(brain, "beta") != json.loads(beta_runtime):
        effects.append("beta's runtime state changed")
    if codes[names.index("its own lock (refused in one line)")] != 1:
        effects.append("taking a lock inside the sandbox ended in a traceback")
    report = {names[i]: codes[i] for i in codes}
    print(json.dumps(report, indent=1))
    assert not effects, f"{effects}\n{json.dumps(report, indent=1)}"
