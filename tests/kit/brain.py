"""Real brains for tests: git repositories in tmp_path with a fixed identity, and state files with
fixed contents.

Every test that touches git gets a fixed identity and no user or system git config, so it behaves the
same on every machine; variables that would leak a caller's brain, claim, clock or agent session
into a test (NIKA_*, CLAUDECODE) are removed.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from nika_brain.brain import CONFIG_NAME, Brain
from nika_brain.engine.init import init
from nika_brain.state import scopes
from nika_brain.support.yamlsafe import dumps

IDENTITY = {"GIT_AUTHOR_NAME": "Nika Test", "GIT_AUTHOR_EMAIL": "nika@example.invalid",
            "GIT_COMMITTER_NAME": "Nika Test", "GIT_COMMITTER_EMAIL": "nika@example.invalid"}
LEAKY = ("NIKA_BRAIN_DIR", "NIKA_CLAIM", "NIKA_NOW", "NIKA_AGENT", "CLAUDECODE", "GIT_DIR",
         "GIT_WORK_TREE", "GIT_INDEX_FILE")
MINIMAL_CONFIG = "version: 1\nlock_poll: 0.01\n"


def git_out(repo: Path | str, *args: str) -> str:
    """Run git in `repo`; stdout stripped; a failure raises CalledProcessError with git's stderr."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def make_brain(root: Path, config: str = MINIMAL_CONFIG) -> Brain:
    """A fresh brain at `root`: git repo on `main`, nika-brain.yml, state folder ignored, one commit."""
    root.mkdir(parents=True, exist_ok=True)
    git_out(root, "init", "-q", "-b", "main")
    (root / CONFIG_NAME).write_text(config, encoding="utf-8")
    (root / ".gitignore").write_text(".nika/\n.*.tmp\n", encoding="utf-8")
    from nika_brain.state import authority
    authority.create_key(root)  # what `operator init` does: the key, pinned in operator.pub
    git_out(root, "add", CONFIG_NAME, ".gitignore", authority.PIN_NAME)
    git_out(root, "commit", "-q", "-m", "init brain")
    return Brain.at(root)

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
PYTHON_NIKA = f"{sys.executable} -m nika_brain"   # what the scripts run instead of `nika-brain`


def git(repo: Path | str, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=full,
                          check=check)


def out(repo: Path | str, *args: str) -> str:
    return git(repo, *args).stdout.strip()


def commit(repo: Path, *paths: str, message: str = "change", env: dict | None = None,
           extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Stage `paths` and run the real `git commit` (hooks included); never raises on its status."""
    if paths:
        git(repo, "add", "--", *paths)
    return git(repo, "commit", "-q", "-m", message, *extra, env=env, check=False)


def new_brain(root: Path, *, hooks: bool = True) -> Brain:
    init(root, hooks=hooks)
    return Brain.at(root)


def write(root: Path, rel: str, data) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(data if isinstance(data, str) else dumps(data), encoding="utf-8")
    return p


# ---- valid documents of each kind --------------------------------------------------------------

def claim_doc(cid: str, *, workflow: str = "example", step: int | str = 1, scope=("src/",),
              status: str = "open", opened: str = "2026-03-17T10:00:00Z", closed: str | None = None,
              result: str | None = None, zone: str | None = "project", agent: str | None = None,
              satellite_type: str = "code", theme: str | None = None) -> dict:
    d = {"id": cid, "workflow": workflow, "theme": theme or workflow, "step": step,
         "satellite_type": satellite_type, "satellite_level": "domain", "agent": agent,
         "scope": list(scope), "zone": zone, "story_angle": "", "on_done": None, "on_partial": None,
         "on_fail": None, "status": status, "opened": opened, "closed": closed, "parent": None,
         "children": [], "session": None, "touched": [], "result": None}
    if status == "closed":
        d["closed"] = closed or opened
        d["result"] = {"status": result or "ok", "summary": "", "tests": {"passed": None, "failed": None}}
    return d


def lock_doc(scope: str, owner: str, *, token: int = 1, mode: str = "exclusive",
             acquired: str = "2026-03-17T10:00:00Z", expires: str = "2999-01-01T00:00:00Z",
             host: str = "host-a", pid: int | None = None) -> dict:
    holder = {"host": host}
    if pid is not None:
        holder["pid"] = pid
    return {"scope": scopes.normalize_scope(scope), "mode": mode, "owner": owner, "token": token,
            "acquired": acquired, "expires": expires, "holder": holder}


def gate_doc(gid: str, message: str = "continue?", *, status: str = "pending",
             created: str = "2026-03-17T10:00:00Z", workflow: str | None = "example",
             step: int | str | None = 1, reason: str = "human") -> dict:
    d = {"id": gid, "message": message, "status": status, "created": created, "workflow": workflow,
         "step": step, "claim": None, "reason": reason, "decided_at": None, "decided_by": None,
         "via": None, "pr": None, "note": ""}
    if status != "pending":
        d.update(decided_at=created, decided_by="alice", via="cli")
    return d


def breaker_doc(scope: str, *, fails: int = 3, tripped: bool = True, updated: str = "2026-03-17T10:00:00Z",
                gate: str | None = None, last_claim: str | None = None) -> dict:
    return {"scope": scopes.normalize_scope(scope), "fails": fails, "tripped": tripped, "updated": updated,
            "last_claim": last_claim, "gate": gate}


def run_doc(workflow: str, *, status: str = "running", cursor: str | None = None, claim: str | None = None,
            gate: str | None = None, started: str = "2026-03-17T09:00:00Z", history=(), adaptations=()) -> dict:
    return {"workflow": workflow, "status": status, "mode": "assisted", "started": started,
            "cursor": cursor, "claim": claim, "gate": gate, "after_gate": None, "reason": "",
            "context": {}, "history": list(history), "adaptations": list(adaptations), "gates": [],
            "finished": None, "report": None}


def workflow_doc(name: str, steps: int = 3, *, zone: str | None = "project") -> dict:
    chain = []
    for i in range(1, steps + 1):
        s = {"step": i, "type": "code" if i < steps else "test", "scope": f"src/{name}/part{i}/"}
        if zone:
            s["zone"] = zone
        chain.append(s)
    return {"name": name, "branch": f"theme/{name}", "chain": chain}


def kernel_doc(kid: str, goal: str, tags=(), status: str = "active") -> dict:
    return {"id": kid, "goal": goal, "tags": list(tags), "card": "satellite-boot", "parent": None,
            "status": status}


def put_claim(root: Path, cid: str, **kw) -> Path:
    return write(root, f"claims/{cid}.yml", claim_doc(cid, **kw))


def put_lock(root: Path, scope: str, owner: str, **kw) -> Path:
    # The loader does not care about the file name; one file per (scope, owner) as the tools do.
    digest = hashlib.sha1(f"{scope}\0{owner}".encode()).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", scope).strip("_")[:60] or "root"
    return write(root, f"locks/{slug}-{digest}.yml", lock_doc(scope, owner, **kw))


def put_gate(root: Path, gid: str, message: str = "continue?", **kw) -> Path:
    return write(root, f"gates/{gid}.yml", gate_doc(gid, message, **kw))


def put_breaker(root: Path, scope: str, **kw) -> Path:
    digest = hashlib.sha1(scope.encode()).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", scope).strip("_")[:60] or "root"
    return write(root, f"breakers/{slug}-{digest}.yml", breaker_doc(scope, **kw))


def put_run(root: Path, workflow: str, **kw) -> Path:
    return write(root, f"runs/{workflow}.yml", run_doc(workflow, **kw))


def put_workflow(root: Path, name: str, steps: int = 3, **kw) -> Path:
    return write(root, f"workflows/{name}.yml", workflow_doc(name, steps, **kw))


def put_kernel(root: Path, kid: str, goal: str, **kw) -> Path:
    return write(root, f"kernels/{kid}/kernel.yml", kernel_doc(kid, goal, **kw))


def populate_golden(root: Path) -> None:
    """The fixed state the golden index is rendered from: every section has rows, every step state
    of the Mermaid chart appears, and awkward text (pipes, quotes, newlines) shows up in cells."""
    put_workflow(root, "alpha", 5)
    put_workflow(root, "beta", 2)
    put_workflow(root, "gamma", 2)
    put_workflow(root, "delta", 3)
    # alpha: 1 done, 2 partial, 3 failed then retried (running now), 4 skipped, 5 pending.
    put_claim(root, "sess-20260317-0900-alpha-step-1", workflow="alpha", step=1, scope=["src/alpha/part1/"],
              status="closed", opened="2026-03-17T09:00:00Z", closed="2026-03-17T09:30:00Z", result="ok")
    put_claim(root, "sess-20260317-0931-alpha-step-2", workflow="alpha", step=2, scope=["src/alpha/part2/"],
              status="closed", opened="2026-03-17T09:31:00Z", closed="2026-03-17T10:00:00Z", result="partial")
    put_claim(root, "sess-20260317-1001-alpha-step-3", workflow="alpha", step=3, scope=["src/alpha/part3/"],
              status="closed", opened="2026-03-17T10:01:00Z", closed="2026-03-17T10:10:00Z", result="failed")
    put_claim(root, "sess-20260317-1011-alpha-step-3", workflow="alpha", step=3,
              scope=["src/alpha/part3/", "docs/alpha.md"], opened="2026-03-17T10:11:00Z")
    put_claim(root, "sess-20260317-1200-beta-step-1", workflow="beta", step=1, scope=["src/beta/part1/"],
              opened="2026-03-17T12:00:00Z")
    put_claim(root, "sess-20260316-0800-old-step-1", workflow="old", step=1, scope=["lib/"],
              status="closed", opened="2026-03-16T08:00:00Z", closed="2026-03-16T09:00:00Z", result="ok")
    put_run(root, "alpha", cursor="3", claim="sess-20260317-1011-alpha-step-3",
            history=[{"step": "1", "claim": "sess-20260317-0900-alpha-step-1", "result": "ok",
                      "action": "trigger:next", "at": "2026-03-17T09:30:00Z"},
                     {"step": "2", "claim": "sess-20260317-0931-alpha-step-2", "result": "partial",
                      "action": "trigger:next", "at": "2026-03-17T10:00:00Z"},
                     {"step": "3", "claim": "sess-20260317-1001-alpha-step-3", "result": "failed",
                      "action": "trigger:3", "at": "2026-03-17T10:10:00Z"}],
            adaptations=[{"op": "skip", "step": "4", "by": "brain-hypervisor"}])
    put_run(root, "beta", status="gated", cursor="1", gate="beta-step-1-zone",
            started="2026-03-17T11:59:00Z")
    put_run(root, "gamma", status="done", cursor="END", started="2026-03-16T07:00:00Z",
            history=[{"step": "1", "result": "ok"}, {"step": "2", "result": "ok"}])
    # delta: step 1 failed and was routed on, 2 ok, 3 stopped by the circuit breaker.
    put_run(root, "delta", status="breaker", cursor="3", started="2026-03-17T08:00:00Z",
            history=[{"step": 1, "result": "failed", "at": "2026-03-17T08:10:00Z"},
                     {"step": 2, "result": "ok", "at": "2026-03-17T08:20:00Z"},
                     {"step": 3, "result": "failed", "at": "not a time"}])
    put_lock(root, "src/alpha/part3/", "sess-20260317-1011-alpha-step-3", token=7, pid=4242,
             acquired="2026-03-17T10:11:00Z", expires="2026-03-17T10:41:00Z")
    put_lock(root, "src/beta/", "sess-20260317-1200-beta-step-1", token=8,
             acquired="2026-03-17T12:00:00Z", expires="2026-03-17T12:30:00Z")
    put_lock(root, "docs/", "sess-20260317-1200-beta-step-1", token=9, mode="shared",
             acquired="2026-03-17T12:01:00Z", expires="2026-03-17T12:31:00Z")
    put_gate(root, "beta-step-1-zone", 'zone "kernel" | approve\nthe step?', workflow="beta", step=1,
             created="2026-03-17T12:00:00Z", reason="zone")
    put_gate(root, "alpha-step-2-partial", "alpha step 2 partial: continue?", workflow="alpha", step=2,
             created="2026-03-17T10:00:00Z", reason="partial")
    put_gate(root, "alpha-merge", "merge alpha?", status="approved", created="2026-03-17T08:00:00Z")
    put_breaker(root, "src/alpha/part3/", fails=1, tripped=False, updated="2026-03-17T10:10:00Z")
    put_breaker(root, "lib/", fails=3, tripped=True, updated="2026-03-16T09:00:00Z",
                gate="breaker-lib", last_claim="sess-20260316-0800-old-step-1")
    put_kernel(root, "k-api", "Ship the public API", tags=["api", "backend"])
    put_kernel(root, "k-docs", "Keep the docs | guides current", status="paused")


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `root` (git's own bookkeeping included, except volatile index stat data)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if rel == ".git/index":
                continue  # git may refresh stat data in it on any read command
            st = p.lstat()
            out[rel] = (p.read_bytes() if p.is_file() and not p.is_symlink() else os.readlink(p).encode(),
                        st.st_mode)
    return out


if __name__ == "__main__":
    # Rewrite the golden index after a deliberate change of the template or the model:
    #   python -m tests.brainkit   (then review the diff of tests/golden/BRAIN-INDEX.md)
    import tempfile

    from nika_brain.engine import index

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "nika-brain.yml").write_text("version: 1\n", encoding="utf-8")
        populate_golden(root)
        (GOLDEN / "BRAIN-INDEX.md").write_text(index.render(Brain.at(root)), encoding="utf-8")
