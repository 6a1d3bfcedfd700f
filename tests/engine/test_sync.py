"""One brain on several machines through a git remote (issue 22, item 1): `nika-brain sync` run for real
by clones of one brain sharing a bare remote — as machines, nothing shared but the remote."""
from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.kit.brain import git_out, new_brain


def nb(root: Path, *args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "nika_brain", *args], cwd=root, capture_output=True,
                          text=True, timeout=300)
    if check is not None:
        assert proc.returncode == check, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def machines(tmp_path: Path, n: int = 2) -> list[Path]:
    """A bare remote and n machines: the first made by `init` and pushed, the others cloned and adopted."""
    remote = tmp_path / "remote.git"
    git_out(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    first = tmp_path / "m1"
    new_brain(first)
    git_out(first, "remote", "add", "origin", str(remote))
    nb(first, "sync")
    out = [first]
    for i in range(2, n + 1):
        m = tmp_path / f"m{i}"
        git_out(tmp_path, "clone", "-q", str(remote), str(m))
        new_brain(m)   # adopts the clone: its own hooks and merge driver (.git/config is per clone)
        out.append(m)
    return out


def open_claim(root: Path, workflow: str, scope: str) -> str:
    proc = nb(root, "claim", "open", "--workflow", workflow, "--step", "1", "--scope", scope, "--json")
    import json
    return json.loads(proc.stdout)["id"]


def test_a_claim_opened_on_one_machine_is_seen_on_the_other_after_sync(tmp_path, git_env):
    a, b = machines(tmp_path)
    cid = open_claim(a, "alpha", "src/a/")
    assert "pushed" in nb(a, "sync").stdout
    got = nb(b, "sync", "--json")
    assert '"pulled": ' in got.stdout and '"pulled": 0' not in got.stdout
    assert (b / "claims" / f"{cid}.yml").exists()
    assert cid in (b / "BRAIN-INDEX.md").read_text()          # regenerated from the merged records
    assert git_out(b, "status", "--porcelain") == ""


def test_a_push_race_lands_both_machines_changes_and_never_merges_the_index_by_hand(tmp_path, git_env):
    a, b = machines(tmp_path)
    ca = open_claim(a, "alpha", "src/a/")
    cb = open_claim(b, "beta", "src/b/")
    nb(a, "sync")
    second = nb(b, "sync", "--json")   # its index differs from a's: the driver keeps ours, then regenerates
    assert '"pulled": 0' not in second.stdout
    nb(a, "sync")
    for m in (a, b):
        assert (m / "claims" / f"{ca}.yml").exists() and (m / "claims" / f"{cb}.yml").exists()
        index = (m / "BRAIN-INDEX.md").read_text()
        assert ca in index and cb in index and "<<<<<<<" not in index
    assert git_out(a, "rev-parse", "HEAD") == git_out(b, "rev-parse", "HEAD")


def test_concurrent_syncs_of_three_machines_lose_nothing(tmp_path, git_env):
    ms = machines(tmp_path, 3)
    opened: list[str] = []
    for rnd in range(2):
        for i, m in enumerate(ms):
            opened.append(open_claim(m, f"w{i}r{rnd}", f"src/m{i}/r{rnd}/"))
        with ThreadPoolExecutor(len(ms)) as pool:   # three real processes pushing at once
            results = list(pool.map(lambda m: nb(m, "sync", check=None), ms))
        assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    for m in ms:
        nb(m, "sync")
    for m in ms:
        present = {p.stem for p in (m / "claims").glob("*.yml")}
        assert set(opened) <= present, (m, set(opened) - present)


def test_two_machines_writing_one_file_are_refused_with_the_path_and_nothing_is_half_merged(tmp_path, git_env):
    a, b = machines(tmp_path)
    for m, text in ((a, "from a\n"), (b, "from b\n")):
        (m / "brain" / "notes.md").write_text(text)
        git_out(m, "add", "brain/notes.md")
        git_out(m, "commit", "-q", "-m", "notes")
    nb(a, "sync")
    refused = nb(b, "sync", check=4)
    assert "brain/notes.md" in refused.stderr and refused.stderr.count("\n") == 1
    assert "Traceback" not in refused.stderr
    assert git_out(b, "status", "--porcelain") == ""                      # the merge was undone
    assert (b / "brain" / "notes.md").read_text() == "from b\n"


def test_bad_sync_settings_and_a_missing_remote_are_one_line(tmp_path, git_env):
    a = tmp_path / "solo"
    new_brain(a)
    missing = nb(a, "sync", check=1)
    assert "no git remote 'origin'" in missing.stderr and "Traceback" not in missing.stderr
    cfg = a / "nika-brain.yml"
    cfg.write_text(cfg.read_text() + "sync: {remote: origin, interval: -3}\n")
    bad = nb(a, "sync", check=1)
    assert "sync.interval" in bad.stderr and "Traceback" not in bad.stderr


def test_a_brain_made_before_sync_gets_its_merge_drivers_committed_once(tmp_path, git_env):
    remote = tmp_path / "remote.git"
    git_out(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    old = tmp_path / "old"
    new_brain(old)
    (old / ".gitattributes").unlink()
    git_out(old, "commit", "-q", "-am", "a brain from before sync")
    git_out(old, "remote", "add", "origin", str(remote))
    nb(old, "sync")
    assert "merge=union" in git_out(old, "show", "HEAD:.gitattributes")
    assert git_out(old, "status", "--porcelain") == ""
    head = git_out(old, "rev-parse", "HEAD")
    nb(old, "sync")
    assert git_out(old, "rev-parse", "HEAD") == head          # nothing new: no commit, nothing pushed


def test_an_untracked_generated_index_does_not_block_the_first_pull(tmp_path, git_env):
    # a brain whose remote did not track BRAIN-INDEX.md yet: the clone generates its own (untracked),
    # the first machine's next sync commits its index, and git would refuse to overwrite the clone's
    remote = tmp_path / "remote.git"
    git_out(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    a, b = tmp_path / "m1", tmp_path / "m2"
    new_brain(a)
    git_out(a, "rm", "--cached", "-q", "BRAIN-INDEX.md")
    git_out(a, "commit", "-q", "--no-verify", "-m", "the index not tracked (its pre-commit hook would add it)")
    git_out(a, "remote", "add", "origin", str(remote))
    git_out(a, "push", "-q", "origin", "HEAD:refs/heads/main")
    git_out(tmp_path, "clone", "-q", str(remote), str(b))
    new_brain(b)
    assert (b / "BRAIN-INDEX.md").exists() and git_out(b, "status", "--porcelain", "BRAIN-INDEX.md")
    cid = open_claim(a, "alpha", "src/a/")
    nb(a, "sync")
    assert "BRAIN-INDEX.md" in git_out(a, "ls-files", "BRAIN-INDEX.md")
    got = nb(b, "sync", "--json")     # succeeds at once: the index is generated, not anyone's work
    assert '"pulled": 0' not in got.stdout
    assert cid in (b / "BRAIN-INDEX.md").read_text() and git_out(b, "status", "--porcelain") == ""
