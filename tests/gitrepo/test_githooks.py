"""Git hooks, driven by real `git commit` / `merge` / `checkout` / `rebase` in real repositories."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from nika_brain.errors import BrainError
from nika_brain.gitrepo import githooks
from tests.kit.brain import commit, git, out, put_claim, put_gate, put_lock, write

FUTURE = "2999-01-01T00:00:00Z"


def hook_files(brain) -> dict[str, tuple[bytes, int]]:
    folder = githooks.hooks_dir(brain.root)
    return {p.name: (p.read_bytes(), p.stat().st_mode) for p in sorted(folder.iterdir())
            if not p.name.endswith(".sample")}


def head(brain) -> str:
    return out(brain.root, "rev-parse", "HEAD")


def committed(brain, rel: str) -> str:
    return out(brain.root, "show", f"HEAD:{rel}")


# ---- install / uninstall -----------------------------------------------------------------------

def test_init_installed_every_hook_with_the_marker(ibrain):
    files = hook_files(ibrain)
    assert set(files) == set(githooks.HOOKS)
    for name, (data, mode) in files.items():
        assert githooks.MARKER.encode() in data
        assert f"-m nika_brain githook {name}".encode() in data
        assert mode & stat.S_IXUSR
    assert githooks.status(ibrain.root) == {name: "installed" for name in githooks.HOOKS}


def test_installing_twice_is_a_no_op(ibrain):
    before = hook_files(ibrain)
    assert githooks.install(ibrain.root) == []
    assert hook_files(ibrain) == before


def test_an_existing_hook_is_chained_and_restored_exactly(brain):
    folder = githooks.hooks_dir(brain.root)
    original = b"#!/bin/sh\necho chained-ran >> \"$(git rev-parse --git-dir)/chained.log\"\n"
    (folder / "pre-commit").write_bytes(original)
    os.chmod(folder / "pre-commit", 0o750)
    assert githooks.install(brain.root) == list(githooks.HOOKS)
    assert (folder / "pre-commit.nika-chained").read_bytes() == original
    assert githooks.status(brain.root)["pre-commit"] == "installed+chained"
    assert githooks.install(brain.root) == []  # still a no-op with a chained hook

    write(brain.root, "notes.txt", "hello\n")
    assert commit(brain.root, "notes.txt").returncode == 0
    assert (brain.root / ".git" / "chained.log").read_text() == "chained-ran\n"

    assert githooks.uninstall(brain.root) == list(githooks.HOOKS)
    assert (folder / "pre-commit").read_bytes() == original
    assert stat.S_IMODE((folder / "pre-commit").stat().st_mode) == 0o750
    assert not (folder / "pre-commit.nika-chained").exists()
    assert not (folder / "post-merge").exists()  # nothing was there before: nothing is left
    assert githooks.uninstall(brain.root) == []


def test_a_failing_chained_hook_stops_the_commit_before_ours(brain):
    folder = githooks.hooks_dir(brain.root)
    (folder / "pre-commit").write_text("#!/bin/sh\necho 'house rule: no' >&2\nexit 7\n")
    os.chmod(folder / "pre-commit", 0o755)
    githooks.install(brain.root)
    write(brain.root, "claims/bad.yml", "id: [\n")  # ours would complain about this file
    before = head(brain)
    proc = commit(brain.root, "claims/bad.yml")
    assert proc.returncode != 0
    assert "house rule: no" in proc.stderr
    assert "claims/bad.yml" not in proc.stderr  # our hook never ran
    assert head(brain) == before


def test_install_refuses_when_a_foreign_hook_and_a_chained_one_both_exist(brain):
    folder = githooks.hooks_dir(brain.root)
    for name in ("pre-commit", "pre-commit.nika-chained"):
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(BrainError, match="both .* exist"):
        githooks.install(brain.root)


def test_core_hooks_path_is_respected(brain):
    git(brain.root, "config", "core.hooksPath", "githooks")
    githooks.install(brain.root)
    assert sorted(p.name for p in (brain.root / "githooks").iterdir()) == sorted(githooks.HOOKS)
    assert not (brain.root / ".git" / "hooks" / "pre-commit").exists()
    write(brain.root, "claims/bad.yml", "id: [\n")
    proc = commit(brain.root, "claims/bad.yml")
    assert proc.returncode == 1 and "claims/bad.yml:" in proc.stderr


def test_cli_hooks_install_status_uninstall(brain, cli):
    proc = cli("hooks", "install")
    assert proc.returncode == 0 and proc.stdout.startswith("installed: pre-commit")
    assert cli("hooks", "install").stdout == "git hooks already installed\n"
    assert "pre-commit\tinstalled" in cli("hooks", "status").stdout
    assert cli("hooks", "uninstall").returncode == 0
    assert "pre-commit\tabsent" in cli("hooks", "status").stdout


def test_the_hook_path_does_not_import_the_cli_framework(ibrain):
    code = ("import sys; from nika_brain.__main__ import main; rc = main(['githook', 'post-merge']); "
            "print(rc, 'typer' in sys.modules, 'click' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ibrain.root, capture_output=True, text=True)
    assert proc.stdout.split() == ["0", "False", "False"], proc.stderr


def test_a_state_commit_loads_only_the_loaders_it_meets_and_no_pyyaml(ibrain):
    """The orchestrator's state commits stage claims (and runs): the hook validates them, checks the
    zones they name in brain/KERNEL.md (`paths: ["."]`, read without PyYAML) and stages the index,
    without importing the gate, grant, kernel or workflow loaders, PyYAML or a template engine."""
    from nika_brain.engine import index
    put_claim(ibrain.root, "sess-s-step-1", opened="2026-03-17T10:00:00Z")
    index.regenerate(ibrain)   # as the orchestrator does before it commits: the hook's render is remembered
    git(ibrain.root, "add", "claims", "BRAIN-INDEX.md")
    code = ("import sys; from nika_brain.__main__ import main; rc = main(['githook', 'pre-commit']); "
            "print(rc, sorted(m for m in sys.modules if m in ('yaml', 'jinja2') or m.startswith('nika_brain.state.')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ibrain.root, capture_output=True, text=True)
    rc, loaded = proc.stdout.split(" ", 1)
    assert rc == "0", proc.stderr
    assert "'nika_brain.state.claims'" in loaded and "'nika_brain.state.zones'" in loaded   # it did check
    for name in ("yaml", "jinja2", "gates", "grants", "kernels", "workflows", "breakers", "authority"):
        assert f"'{name}'" not in loaded and f"state.{name}'" not in loaded, loaded
    # A bad claim in the same kind of commit is still refused.
    write(ibrain.root, "claims/sess-bad-step-1.yml", "id: [\n")
    git(ibrain.root, "add", "claims")
    assert commit(ibrain.root, "claims").returncode != 0


def test_an_unknown_githook_name_is_refused(ibrain):
    proc = subprocess.run([sys.executable, "-m", "nika_brain", "githook", "pre-push"], cwd=ibrain.root,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "expected one of" in proc.stderr


# ---- pre-commit: validation ----------------------------------------------------------------------

def test_pre_commit_refuses_an_invalid_staged_brain_file(ibrain):
    write(ibrain.root, "claims/c1.yml", "id: c1\nworkflow: w\ntheme: w\nstep: 1\nsatellite_type: poetry\n")
    before = head(ibrain)
    proc = commit(ibrain.root, "claims/c1.yml")
    assert proc.returncode == 1
    assert "claims/c1.yml:5: satellite_type: must be one of code, brain-write, test, deploy, search; " \
           "got 'poetry'" in proc.stderr
    assert "--no-verify" in proc.stderr and "Traceback" not in proc.stderr
    assert head(ibrain) == before


def test_pre_commit_checks_the_staged_content_not_the_working_tree(ibrain):
    card = ibrain.root / "agents" / "satellite-boot.md"
    good = card.read_text()
    card.write_text(good.replace("context_tier: hot", "context_tier: lukewarm"))
    git(ibrain.root, "add", "agents/satellite-boot.md")
    card.write_text(good)  # fixed on disk, but the broken version is what is staged
    proc = commit(ibrain.root)
    assert proc.returncode == 1 and "agents/satellite-boot.md:4: context_tier: must be one of" in proc.stderr

    git(ibrain.root, "reset", "-q")
    card.write_text(good.replace("Scope.", "Scope!"))
    git(ibrain.root, "add", "agents/satellite-boot.md")
    card.write_text("garbage, not even front matter")  # broken on disk, fine in the index
    assert commit(ibrain.root).returncode == 0
    assert "Scope!" in committed(ibrain, "agents/satellite-boot.md")


def test_pre_commit_cross_checks_zones_and_cards(ibrain):
    write(ibrain.root, "workflows/w.yml", "name: w\nbranch: theme/w\nchain:\n"
          "  - step: 1\n    type: code\n    scope: src/\n    zone: nowhere\n    agent: ghost\n")
    proc = commit(ibrain.root, "workflows/w.yml")
    assert proc.returncode == 1
    assert "workflows/w.yml:7: chain.0.zone: unknown zone 'nowhere' (brain/KERNEL.md declares: " \
           "kernel, project, state)" in proc.stderr
    assert "workflows/w.yml:8: chain.0.agent: no agent card agents/ghost.md" in proc.stderr


def test_a_card_staged_with_the_workflow_that_uses_it_is_known(ibrain):
    card = (ibrain.root / "agents" / "satellite-boot.md").read_text()
    write(ibrain.root, "agents/helper.md", card.replace("name: satellite-boot", "name: helper"))
    write(ibrain.root, "workflows/w.yml", {"name": "w", "branch": "theme/w", "chain": [
        {"step": 1, "type": "code", "scope": "src/", "zone": "project", "agent": "helper"}]})
    assert commit(ibrain.root, "agents/helper.md", "workflows/w.yml").returncode == 0


def test_deleting_brain_files_is_not_validated(ibrain):
    git(ibrain.root, "rm", "-q", "workflows/example.yml")
    assert commit(ibrain.root).returncode == 0


# ---- pre-commit: locks ---------------------------------------------------------------------------

@pytest.fixture
def locked(ibrain):
    """src/ held exclusively by another claim (committed), and a pending change to src/app.py."""
    put_lock(ibrain.root, "src/", "sess-other-step-1", token=5, expires=FUTURE)
    assert commit(ibrain.root, "locks", message="lock").returncode == 0
    write(ibrain.root, "src/app.py", "print('hi')\n")
    git(ibrain.root, "add", "src/app.py")
    return ibrain


def test_a_commit_into_another_claims_exclusive_lock_is_refused(locked):
    before = head(locked)
    proc = commit(locked.root)
    assert proc.returncode == 1
    assert "src/app.py: locked exclusively by sess-other-step-1 (scope src/, token 5" in proc.stderr
    assert "NIKA_LOCK_OVERRIDE=1 git commit" in proc.stderr and "--no-verify" in proc.stderr
    assert "a human without a claim" in proc.stderr
    assert head(locked) == before


def test_another_claim_is_refused_too(locked):
    proc = commit(locked.root, env={"NIKA_CLAIM": "sess-mine-step-2"})
    assert proc.returncode == 1 and "you are claim sess-mine-step-2" in proc.stderr


def test_the_lock_owner_may_commit(locked):
    assert commit(locked.root, env={"NIKA_CLAIM": "sess-other-step-1"}).returncode == 0


def test_an_agent_naming_a_door_not_its_own_commits_as_no_claim(locked, tmp_path):
    """An agent shell (no operator key) setting `$NIKA_CLAIM` to the lock's owner and `$NIKA_DOOR` to a
    socket that does not exist, or to the owner's real door (which answers only another process's
    tree): the commit is made as no claim, and the owner's lock refuses it."""
    from tests.federation.test_claim_door import door_of_another_session
    from tests.kit.fixtures import agent_env
    before = head(locked)
    agent = {**agent_env(tmp_path), "NIKA_CLAIM": "sess-other-step-1"}
    with door_of_another_session(locked, "sess-other-step-1") as sock:
        for where in (str(tmp_path / "gone" / "door.sock"), str(sock)):
            refused = commit(locked.root, env={**agent, "NIKA_DOOR": where})
            assert refused.returncode == 1, (where, refused.stderr)
            assert "src/app.py: locked exclusively by sess-other-step-1" in refused.stderr, (where, refused.stderr)
            assert head(locked) == before


def test_the_explicit_override_commits(locked):
    assert commit(locked.root, env={"NIKA_LOCK_OVERRIDE": "1"}).returncode == 0
    assert committed(locked, "src/app.py") == "print('hi')"


def test_an_expired_lock_does_not_block(locked):
    assert commit(locked.root, env={"NIKA_NOW": "3000-01-01T00:00:00Z"}).returncode == 0


def test_a_shared_lock_does_not_block(ibrain):
    put_lock(ibrain.root, "src/", "sess-reader", mode="shared", expires=FUTURE)
    write(ibrain.root, "src/app.py", "x = 1\n")
    assert commit(ibrain.root, "locks", "src/app.py").returncode == 0


def test_paths_outside_the_lock_are_free(locked):
    git(locked.root, "reset", "-q")
    write(locked.root, "docs/readme.md", "doc\n")
    assert commit(locked.root, "docs/readme.md").returncode == 0


def test_state_files_are_never_blocked_by_a_lock(ibrain):
    put_lock(ibrain.root, ".", "sess-everything", expires=FUTURE)
    assert commit(ibrain.root, "locks").returncode == 0
    put_claim(ibrain.root, "sess-20260317-1000-w-step-1")
    put_gate(ibrain.root, "g1")
    assert commit(ibrain.root, "claims", "gates").returncode == 0
    write(ibrain.root, "README.md", "x\n")
    assert commit(ibrain.root, "README.md").returncode == 1  # '.' covers everything else


def test_a_whole_brain_lock_taken_by_the_tools_guards_commits(ibrain):
    from nika_brain.state import locks
    locks.acquire(ibrain, ".", "sess-everything", pid=None, ttl=10 ** 9)
    write(ibrain.root, "README.md", "x\n")
    proc = commit(ibrain.root, "README.md")
    assert proc.returncode == 1 and "README.md: locked exclusively by sess-everything (scope ." in proc.stderr


def test_an_unreadable_lock_file_fails_closed(locked):
    write(locked.root, "locks/broken.yml", "scope: [\n")  # on disk, not staged
    proc = commit(locked.root, env={"NIKA_CLAIM": "sess-other-step-1"})
    assert proc.returncode == 1
    assert "cannot check locks" in proc.stderr and "locks/broken.yml" in proc.stderr
    assert commit(locked.root, env={"NIKA_LOCK_OVERRIDE": "1"}).returncode == 0


def test_no_verify_skips_everything(locked):
    assert commit(locked.root, extra=("--no-verify",)).returncode == 0


# ---- pre-commit: the index follows the state -------------------------------------------------------

def test_staging_a_state_file_regenerates_and_stages_the_index(ibrain):
    put_claim(ibrain.root, "sess-20260317-1000-example-step-1", opened="2026-03-17T10:00:00Z")
    assert commit(ibrain.root, "claims").returncode == 0
    assert "| `sess-20260317-1000-example-step-1` | example | 1 | src/ |" in committed(ibrain, "BRAIN-INDEX.md")
    assert out(ibrain.root, "status", "--porcelain") == ""


def test_a_partial_commit_keeps_the_real_index_in_step(ibrain):
    put_claim(ibrain.root, "sess-20260317-1000-example-step-1", opened="2026-03-17T10:00:00Z")
    write(ibrain.root, "other.txt", "staged but not committed\n")
    git(ibrain.root, "add", "claims", "other.txt")
    proc = git(ibrain.root, "commit", "-q", "-m", "only the claim", "--", "claims", check=False)
    assert proc.returncode == 0, proc.stderr
    assert "sess-20260317-1000-example-step-1" in committed(ibrain, "BRAIN-INDEX.md")
    assert out(ibrain.root, "status", "--porcelain").splitlines() == ["A  other.txt"]


def test_a_commit_without_state_leaves_the_index_alone(ibrain):
    put_claim(ibrain.root, "sess-20260317-1000-example-step-1")  # on disk only
    write(ibrain.root, "src/app.py", "x = 1\n")
    before = ibrain.index_path.read_bytes()
    assert commit(ibrain.root, "src/app.py").returncode == 0
    assert ibrain.index_path.read_bytes() == before
    assert out(ibrain.root, "show", "--name-only", "--format=", "HEAD") == "src/app.py"


def test_an_unloadable_unstaged_state_file_blocks_the_index_and_the_commit(ibrain):
    put_claim(ibrain.root, "sess-20260317-1000-example-step-1")
    write(ibrain.root, "claims/zz-broken.yml", "id: [\n")  # not staged, but the index reads it
    proc = commit(ibrain.root, "claims/sess-20260317-1000-example-step-1.yml")
    assert proc.returncode == 1 and "claims/zz-broken.yml:" in proc.stderr


# ---- post-merge / post-checkout / post-rewrite -----------------------------------------------------

def _claim_without_hooks(brain, cid: str, message: str) -> None:
    put_claim(brain.root, cid, opened="2026-03-17T10:00:00Z")
    assert commit(brain.root, "claims", message=message, extra=("--no-verify",)).returncode == 0


def test_post_checkout_and_post_merge_regenerate_the_index(ibrain):
    git(ibrain.root, "checkout", "-q", "-b", "side")
    _claim_without_hooks(ibrain, "sess-side-step-1", "claim on side")
    assert "sess-side-step-1" not in ibrain.index_path.read_text()  # --no-verify: index not updated
    git(ibrain.root, "checkout", "-q", "main")
    git(ibrain.root, "checkout", "-q", "side")                        # post-checkout
    assert "sess-side-step-1" in ibrain.index_path.read_text()
    git(ibrain.root, "checkout", "-q", "main")
    assert "sess-side-step-1" not in ibrain.index_path.read_text()
    git(ibrain.root, "merge", "-q", "--no-ff", "-m", "merge side", "side")  # post-merge
    assert "sess-side-step-1" in ibrain.index_path.read_text()


def test_post_rewrite_regenerates_the_index(ibrain):
    _claim_without_hooks(ibrain, "sess-a-step-1", "first")
    git(ibrain.root, "checkout", "-q", "HEAD~0")  # refresh so the index shows sess-a
    put_claim(ibrain.root, "sess-b-step-1", opened="2026-03-17T11:00:00Z")
    git(ibrain.root, "add", "claims")
    assert git(ibrain.root, "commit", "-q", "--amend", "--no-verify", "--no-edit", check=False).returncode == 0
    assert "sess-b-step-1" in ibrain.index_path.read_text()


def test_a_linked_worktree_is_not_regenerated(ibrain, tmp_path):
    _claim_without_hooks(ibrain, "sess-wt-step-1", "claim")
    wt = tmp_path / "wt"
    git(ibrain.root, "worktree", "add", "-q", "-b", "theme/x", str(wt))
    # The committed index predates the claim; regenerating would make the worktree dirty.
    assert out(wt, "status", "--porcelain") == ""
    assert "sess-wt-step-1" not in (wt / "BRAIN-INDEX.md").read_text()


def test_a_linked_worktree_checkout_does_not_read_the_brain(ibrain, tmp_path):
    """The theme worktree the orchestrator adds for each run: its post-checkout ends before reading the
    main worktree's config (nothing is regenerated there), so a config it cannot load is not its business;
    the main worktree's own hooks still say it."""
    wt = tmp_path / "wt"
    write(ibrain.root, "nika-brain.yml", "version: 99\n")
    proc = git(ibrain.root, "worktree", "add", "-q", "-b", "theme/y", str(wt), check=False)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    proc = git(ibrain.root, "checkout", "-q", "-b", "side", check=False)
    assert proc.returncode == 0 and "BRAIN-INDEX.md not regenerated" in proc.stderr


def test_post_hooks_never_fail_git(ibrain):
    git(ibrain.root, "checkout", "-q", "-b", "side")
    write(ibrain.root, "claims/broken.yml", "id: [\n")
    assert commit(ibrain.root, "claims", extra=("--no-verify",)).returncode == 0
    git(ibrain.root, "checkout", "-q", "main")
    proc = git(ibrain.root, "merge", "-q", "--no-ff", "-m", "merge", "side", check=False)
    assert proc.returncode == 0
    assert "BRAIN-INDEX.md not regenerated: claims/broken.yml" in proc.stderr
