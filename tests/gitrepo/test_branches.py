"""Theme branches against real git repositories in tmp_path."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from nika_brain.errors import BrainError
from nika_brain.gitrepo import git
from nika_brain.gitrepo.branches import (
    MergeResult,
    merge_theme_branch,
    open_theme_branch,
    remove_theme_worktree,
    theme_worktree_path,
)


@pytest.fixture(autouse=True)
def git_identity(tmp_path, monkeypatch):
    # A fixed identity and no user/system config, so the tests behave the same on every machine.
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.delenv("GIT_WORK_TREE", raising=False)
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "Nika Test")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "nika@example.invalid")


def sh(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def commit_file(repo: Path, name: str, text: str, msg: str | None = None) -> str:
    (repo / name).write_text(text)
    sh(repo, "add", name)
    sh(repo, "commit", "-q", "-m", msg or f"write {name}")
    return sh(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path) -> Path:
    r = tmp_path / "brain"
    r.mkdir()
    sh(r, "init", "-q", "-b", "main")
    commit_file(r, "README.md", "brain\n", "initial")
    return r


@pytest.fixture
def wts(tmp_path) -> Path:
    return tmp_path / "worktrees"


def sha(repo: Path, ref: str) -> str:
    return sh(repo, "rev-parse", ref)


def worktree_paths(repo: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in sh(repo, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]


def no_merge_head_anywhere(repo: Path) -> bool:
    common = git.common_dir(repo)
    return not list(common.glob("MERGE_HEAD")) and not list(common.glob("worktrees/*/MERGE_HEAD"))


# --- open ---------------------------------------------------------------------------------------

def test_open_creates_branch_and_worktree_on_it(repo, wts):
    path = open_theme_branch(repo, "theme/login", "main", wts)
    assert path == theme_worktree_path("theme/login", wts)
    assert path.name == "theme__login"
    assert git.current_branch(path) == "theme/login"
    assert sha(repo, "theme/login") == sha(repo, "main")
    assert str(path) in worktree_paths(repo)


def test_open_twice_is_a_no_op(repo, wts):
    first = open_theme_branch(repo, "theme-a", "main", wts)
    (first / "work.txt").write_text("in progress\n")  # uncommitted work must survive a re-open
    before = (worktree_paths(repo), sha(repo, "theme-a"))
    second = open_theme_branch(repo, "theme-a", "main", wts)
    assert second == first
    assert (worktree_paths(repo), sha(repo, "theme-a")) == before
    assert (second / "work.txt").read_text() == "in progress\n"


def test_open_never_moves_an_existing_branch(repo, wts):
    old = sha(repo, "HEAD")
    sh(repo, "branch", "theme-old")
    commit_file(repo, "later.txt", "later\n")
    path = open_theme_branch(repo, "theme-old", "main", wts)
    assert sha(repo, "theme-old") == old != sha(repo, "main")
    assert sha(path, "HEAD") == old


def test_two_branches_get_two_worktrees_with_separate_indexes(repo, wts):
    a = open_theme_branch(repo, "theme-a", "main", wts)
    b = open_theme_branch(repo, "theme-b", "main", wts)
    assert a != b
    assert (git.current_branch(a), git.current_branch(b)) == ("theme-a", "theme-b")
    (a / "only-a.txt").write_text("a\n")
    sh(a, "add", "only-a.txt")
    assert sh(b, "diff", "--cached", "--name-only") == ""
    assert git.git_dir(a) != git.git_dir(b)


def test_vanished_worktree_folder_is_repaired(repo, wts):
    path = open_theme_branch(repo, "theme-a", "main", wts)
    shutil.rmtree(path)
    again = open_theme_branch(repo, "theme-a", "main", wts)
    assert again == path and again.is_dir()
    assert git.current_branch(again) == "theme-a"


@pytest.mark.parametrize("bad", ["", "-x", "a..b", "with space", "HEAD", "@{-1}", "end.lock"])
def test_invalid_branch_names_are_refused(repo, wts, bad):
    with pytest.raises(BrainError, match="invalid branch name"):
        open_theme_branch(repo, bad, "main", wts)
    assert not wts.exists()


def test_a_name_checked_once_is_not_checked_again_and_a_bad_one_always_is(repo, wts):
    """Accepted names are remembered for the process (git's rules for a literal name do not depend on the
    repository); a refused one is asked of git each time, never remembered as good."""
    from nika_brain.gitrepo import branches
    open_theme_branch(repo, "theme-a", "main", wts)
    assert {"theme-a", "main"} <= branches._VALID_NAMES
    for _ in range(2):
        for bad in ("a..b", "@{-1}", "end.lock"):
            with pytest.raises(BrainError, match="invalid branch name"):
                open_theme_branch(repo, bad, "main", wts)
    assert not {"a..b", "@{-1}", "end.lock"} & branches._VALID_NAMES


def test_missing_base_is_refused(repo, wts):
    with pytest.raises(BrainError, match="base branch 'nope' does not exist"):
        open_theme_branch(repo, "theme-a", "nope", wts)
    assert git.run(repo, "rev-parse", "--verify", "--quiet", "refs/heads/theme-a",
                   check=False).returncode != 0


def test_branch_checked_out_in_main_worktree_is_refused(repo, wts):
    sh(repo, "checkout", "-q", "-b", "theme-a")
    with pytest.raises(BrainError, match="already checked out at"):
        open_theme_branch(repo, "theme-a", "main", wts)


def test_foreign_folder_in_the_way_is_refused(repo, wts):
    target = theme_worktree_path("theme-a", wts)
    target.mkdir(parents=True)
    (target / "precious.txt").write_text("mine\n")
    with pytest.raises(BrainError, match="is not a worktree"):
        open_theme_branch(repo, "theme-a", "main", wts)
    assert (target / "precious.txt").read_text() == "mine\n"


def test_remove_keeps_the_branch(repo, wts):
    path = open_theme_branch(repo, "theme-a", "main", wts)
    assert remove_theme_worktree(repo, "theme-a", wts) is True
    assert not path.exists()
    assert str(path) not in worktree_paths(repo)
    assert sha(repo, "theme-a") == sha(repo, "main")
    assert remove_theme_worktree(repo, "theme-a", wts) is False


def test_remove_refuses_to_lose_uncommitted_work(repo, wts):
    path = open_theme_branch(repo, "theme-a", "main", wts)
    (path / "README.md").write_text("edited\n")
    with pytest.raises(BrainError):
        remove_theme_worktree(repo, "theme-a", wts)
    assert (path / "README.md").read_text() == "edited\n"


# --- merge --------------------------------------------------------------------------------------

def theme_with_commit(repo, wts, branch="theme-a", name="feature.txt", text="feature\n"):
    path = open_theme_branch(repo, branch, "main", wts)
    tip = commit_file(path, name, text)
    return path, tip


def test_green_merge_is_no_ff_and_advances_base(repo, wts):
    _, tip = theme_with_commit(repo, wts)
    old_base = sha(repo, "main")
    result = merge_theme_branch(repo, "theme-a", "main", green=True)
    assert result == MergeResult(True, sha(repo, "main"), (), "merged 'theme-a' into 'main'")
    assert sha(repo, "main") != old_base
    assert sh(repo, "rev-list", "--parents", "-n", "1", "main").split()[1:] == [old_base, tip]
    assert sh(repo, "log", "-1", "--format=%s", "main") == "Merge theme branch 'theme-a' into main"
    # The main worktree was on main and clean, so it now shows the merged file.
    assert (repo / "feature.txt").read_text() == "feature\n"
    assert sh(repo, "status", "--porcelain") == ""


def test_not_green_changes_nothing(repo, wts):
    theme_with_commit(repo, wts)
    old_base = sha(repo, "main")
    result = merge_theme_branch(repo, "theme-a", "main", green=False)
    assert result == MergeResult(False, None, (), "0-failures gate is not green")
    assert sha(repo, "main") == old_base
    assert not (repo / "feature.txt").exists()


def test_conflict_aborts_and_lists_paths(repo, wts):
    theme_with_commit(repo, wts, name="README.md", text="theme version\n")
    old_base = commit_file(repo, "README.md", "main version\n")
    result = merge_theme_branch(repo, "theme-a", "main", green=True, message="custom")
    assert result.merged is False and result.commit is None
    assert result.conflicts == ("README.md",)
    assert "README.md" in result.reason
    assert sha(repo, "main") == old_base
    assert (repo / "README.md").read_text() == "main version\n"
    assert sh(repo, "status", "--porcelain") == ""
    assert no_merge_head_anywhere(repo)


def test_conflict_in_temporary_worktree_leaves_nothing_behind(repo, wts):
    theme_with_commit(repo, wts, name="README.md", text="theme version\n")
    old_base = commit_file(repo, "README.md", "main version\n")
    sh(repo, "checkout", "-q", "-b", "elsewhere")
    before = worktree_paths(repo)
    result = merge_theme_branch(repo, "theme-a", "main", green=True, worktrees_dir=wts)
    assert result.conflicts == ("README.md",) and not result.merged
    assert sha(repo, "main") == old_base
    assert worktree_paths(repo) == before
    assert not list(wts.glob(".merge-*"))
    assert no_merge_head_anywhere(repo)


def test_already_merged_is_idempotent(repo, wts):
    theme_with_commit(repo, wts)
    first = merge_theme_branch(repo, "theme-a", "main", green=True)
    second = merge_theme_branch(repo, "theme-a", "main", green=True)
    assert first.merged and second.merged
    assert second == MergeResult(True, first.commit, (), "already merged")
    assert sha(repo, "main") == first.commit


def test_main_worktree_on_another_branch_is_not_disturbed(repo, wts):
    _, tip = theme_with_commit(repo, wts)
    sh(repo, "checkout", "-q", "-b", "user-work")
    (repo / "README.md").write_text("user edit, not committed\n")
    (repo / "scratch.txt").write_text("untracked\n")
    status_before = sh(repo, "status", "--porcelain")
    head_before = sha(repo, "HEAD")
    old_base = sha(repo, "main")

    result = merge_theme_branch(repo, "theme-a", "main", green=True, worktrees_dir=wts)

    assert result.merged and result.commit == sha(repo, "main")
    assert sh(repo, "rev-list", "--parents", "-n", "1", "main").split()[1:] == [old_base, tip]
    assert git.current_branch(repo) == "user-work"
    assert sha(repo, "HEAD") == head_before
    assert sh(repo, "status", "--porcelain") == status_before
    assert (repo / "README.md").read_text() == "user edit, not committed\n"
    assert not (repo / "feature.txt").exists()
    assert not list(wts.glob(".merge-*"))
    assert len(worktree_paths(repo)) == 2  # main + theme-a, the temporary one is gone


def test_default_temporary_worktree_dir_is_cleaned(repo, wts, tmp_path, monkeypatch):
    theme_with_commit(repo, wts)
    sh(repo, "checkout", "-q", "-b", "user-work")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # make tempfile re-read TMPDIR
    result = merge_theme_branch(repo, "theme-a", "main", green=True)
    assert result.merged
    assert list(scratch.iterdir()) == []


def test_base_checked_out_dirty_is_refused(repo, wts):
    theme_with_commit(repo, wts)
    (repo / "README.md").write_text("dirty\n")
    old_base = sha(repo, "main")
    with pytest.raises(BrainError, match="uncommitted changes"):
        merge_theme_branch(repo, "theme-a", "main", green=True, worktrees_dir=wts)
    assert sha(repo, "main") == old_base
    assert (repo / "README.md").read_text() == "dirty\n"


def test_merge_in_progress_in_main_worktree_is_refused(repo, wts):
    theme_with_commit(repo, wts)
    sh(repo, "checkout", "-q", "-b", "side")
    commit_file(repo, "README.md", "side\n")
    sh(repo, "checkout", "-q", "main")
    commit_file(repo, "README.md", "main\n")
    subprocess.run(["git", "-C", str(repo), "merge", "side"], capture_output=True)
    assert (git.git_dir(repo) / "MERGE_HEAD").exists()
    old_base = sha(repo, "main")
    with pytest.raises(BrainError, match="a merge is in progress"):
        merge_theme_branch(repo, "theme-a", "main", green=True)
    assert sha(repo, "main") == old_base
    assert (git.git_dir(repo) / "MERGE_HEAD").exists()  # the user's merge is theirs to finish


def test_stale_index_lock_is_refused(repo, wts):
    theme_with_commit(repo, wts)
    lock = git.git_dir(repo) / "index.lock"
    lock.write_text("")
    old_base = sha(repo, "main")
    with pytest.raises(BrainError, match="index.lock"):
        merge_theme_branch(repo, "theme-a", "main", green=True)
    assert sha(repo, "main") == old_base and lock.exists()


def test_unknown_theme_branch_is_refused(repo):
    with pytest.raises(BrainError, match="theme branch 'ghost' does not exist"):
        merge_theme_branch(repo, "ghost", "main", green=True)
