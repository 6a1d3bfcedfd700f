"""`nika-brain init`: the brain template, adopting a repository, idempotence, the script wrappers."""
from __future__ import annotations

import os
import stat
import subprocess

import pytest

from nika_brain.brain import Brain, load_config
from nika_brain.engine import index
from nika_brain.engine.init import TEMPLATE_ROOT, init, secret_ignores, template_files
from nika_brain.errors import BrainError
from nika_brain.gitrepo import githooks
from nika_brain.state import agents, zones
from nika_brain.state.validate import validate
from nika_brain.state.workflows import load_workflow
from tests.kit.brain import PYTHON_NIKA, git, out, snapshot, write

LAYOUT = ["nika-brain.yml", "BRAIN-INDEX.md", ".gitignore", ".gitattributes", "brain/KERNEL.md",
          "agents/kernel-orchestrator.md", "agents/brain-hypervisor.md", "agents/orchestrator-scribe.md",
          "agents/satellite-boot.md", "workflows/example.yml", "claims/.gitkeep", "locks/.gitkeep",
          "gates/.gitkeep", "hooks/README.md", "hooks/git/pre-commit", "hooks/git/post-merge",
          "hooks/git/post-checkout", "hooks/git/post-rewrite", "scripts/preflight-check.sh",
          "scripts/file-lock.sh", "scripts/human-gate-ack.sh", "scripts/workflow-launch.sh",
          "scripts/theme-branch-open.sh", "scripts/theme-branch-merge.sh", "scripts/brain-index-regen.sh",
          "operator.pub"]  # the operator key pinned by init (authority.py)


def test_init_makes_a_brain_in_a_new_folder(tmp_path, git_env):
    root = tmp_path / "new" / "brain"
    report = init(root)
    assert report.repo_created and report.index_written and report.hooks == list(githooks.HOOKS)
    for rel in LAYOUT:
        assert (root / rel).is_file(), rel
    for rel in [r for r in LAYOUT if r.startswith(("scripts/", "hooks/git/"))]:
        assert os.stat(root / rel).st_mode & stat.S_IXUSR, rel
    # One commit holding exactly the template, and nothing left over.
    assert out(root, "rev-list", "--count", "HEAD") == "1"
    assert sorted(out(root, "ls-files").splitlines()) == sorted(LAYOUT)
    assert out(root, "status", "--porcelain") == ""
    assert out(root, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    brain = Brain.at(root)
    assert index.is_current(brain)
    assert validate(root).problems == []
    assert (root / ".gitignore").read_text() == "".join(f"{x}\n" for x in (".nika/", ".*.tmp", "/.claude/",
                                                                           *secret_ignores()))


def test_running_init_twice_changes_nothing(tmp_path, git_env):
    root = tmp_path / "brain"
    init(root)
    before = snapshot(root)
    report = init(root)
    assert not report.changed
    assert snapshot(root) == before


def test_the_cli_says_when_there_is_nothing_to_do(tmp_path, cli):
    root = tmp_path / "b"
    first = cli("init", str(root), "--no-hooks", cwd=tmp_path)
    assert first.returncode == 0 and "committed the template" in first.stdout
    second = cli("init", str(root), "--no-hooks", cwd=tmp_path)
    assert second.returncode == 0 and second.stdout == f"{root} is already a brain: nothing to do\n"


def test_no_hooks_installs_none(tmp_path, git_env):
    root = tmp_path / "brain"
    report = init(root, hooks=False)
    assert report.hooks == []
    assert set(githooks.status(root).values()) == {"absent"}


def test_adopting_a_repository_with_history_keeps_its_files_and_stages_nothing(tmp_path, git_env):
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "trunk")
    write(root, "app.py", "print('app')\n")
    write(root, ".gitignore", "*.pyc")  # no final newline
    custom = "---\nname: kernel-orchestrator\nmine: true\n---\nmy own card\n"
    write(root, "agents/kernel-orchestrator.md", custom)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "existing project")
    head = out(root, "rev-parse", "HEAD")

    report = init(root, hooks=False)
    assert not report.repo_created and report.committed is None
    assert out(root, "rev-parse", "HEAD") == head
    assert out(root, "diff", "--cached", "--name-only") == ""
    assert (root / "agents/kernel-orchestrator.md").read_text() == custom   # never overwritten
    assert "agents/kernel-orchestrator.md" not in report.created
    assert (root / ".gitignore").read_text() == "".join(f"{x}\n" for x in ("*.pyc", ".nika/", ".*.tmp", "/.claude/",
                                                                           *secret_ignores()))
    assert report.gitignore == "updated"
    # The branch it found becomes the base branch of theme branches.
    assert load_config(root / "nika-brain.yml").base_branch == "trunk"
    assert init(root, hooks=False).changed is False


def test_an_existing_config_is_kept_and_a_bad_one_stops_init_before_any_write(tmp_path, git_env):
    root = tmp_path / "repo"
    write(root, "nika-brain.yml", "version: 1\nlock_ttl: -5\n")
    before = snapshot(root)
    with pytest.raises(BrainError) as exc:
        init(root)
    assert str(exc.value).endswith("nika-brain.yml:2: lock_ttl: must be positive")
    assert snapshot(root) == before and not (root / ".git").exists()

    write(root, "nika-brain.yml", "version: 1\nlock_ttl: 60\n")
    init(root)
    assert (root / "nika-brain.yml").read_text() == "version: 1\nlock_ttl: 60\n"


def test_init_refuses_a_file(tmp_path, git_env):
    (tmp_path / "f").write_text("x")
    with pytest.raises(BrainError, match="not a folder"):
        init(tmp_path / "f")


def test_init_in_a_subfolder_of_another_repository_makes_its_own(tmp_path, git_env):
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    report = init(outer / "brain", hooks=False)
    assert report.repo_created
    assert out(outer / "brain", "rev-parse", "--show-toplevel") == str(outer / "brain")


def test_the_template_files_all_validate_and_the_package_ships_them():
    files = template_files()
    assert "nika-brain.yml" in files and "workflows/example.yml" in files
    assert not any("__pycache__" in f for f in files)
    load_config(TEMPLATE_ROOT / "nika-brain.yml")


def test_the_config_template_shows_every_setting_with_its_default():
    from dataclasses import fields as dc_fields

    from nika_brain.brain import Config
    text = (TEMPLATE_ROOT / "nika-brain.yml").read_text()
    for f in dc_fields(Config):
        if f.name != "version":
            assert f"# {f.name}:" in text, f.name
    assert load_config(TEMPLATE_ROOT / "nika-brain.yml") == Config()


def test_the_agent_cards_follow_the_seed_format(tmp_path, git_env):
    init(tmp_path / "b", hooks=False)
    cards = {c.name: c for c in agents.list_cards(Brain.at(tmp_path / "b"))}
    assert set(cards) == {"kernel-orchestrator", "brain-hypervisor", "orchestrator-scribe", "satellite-boot"}
    ko = cards["kernel-orchestrator"]
    assert (ko.type, ko.context_tier, ko.status) == ("agent", "warm", "active")
    assert (ko.scope, ko.owner, ko.writer, ko.lifecycle) == ("kernel", "human", "human", "permanent")
    assert ko.triggers == ("workflow", "satellite", "orchestration")
    assert ko.protocol == "bsi-v3"
    assert ko.receives_from == ("brain-hypervisor", "human")
    assert ko.sends_to == ("brain-hypervisor", "orchestrator-scribe", "human")
    assert ko.zone_access == ("kernel", "project")
    assert ko.signals == ("STEP_DONE", "GATE_PENDING", "BLOCKED_ON", "DONE", "CIRCUIT_BREAK", "ABORT", "ESCALATE")
    sat = cards["satellite-boot"]
    assert sat.zone_access == ("project",)
    for words in ("nika-brain claim close", "Tiered close", "Exit triggers", "Scope", "Claim"):
        assert words in sat.body, words
    # Every card's peers and zones exist.
    zone_names = {z.name for z in zones.load_zones(Brain.at(tmp_path / "b"))}
    for c in cards.values():
        assert set(c.zone_access) <= zone_names, c.name
        assert set(c.receives_from + c.sends_to) <= set(cards) | {"human"}, c.name


def test_kernel_md_zones_protect_the_state_and_the_kernel(tmp_path, git_env):
    init(tmp_path / "b", hooks=False)
    zs = zones.load_zones(Brain.at(tmp_path / "b"))
    assert [(z.name, z.level) for z in zs] == [("state", "tool-only"), ("kernel", "protected"), ("project", "open")]
    expect = {"claims/x.yml": "state", "locks/a.yml": "state", "gates/g.yml": "state", "runs/w.yml": "state",
              "breakers/b.yml": "state", "journal/signals.jsonl": "state", "BRAIN-INDEX.md": "state",
              "agents/x.md": "kernel", "brain/KERNEL.md": "kernel", "workflows/w.yml": "kernel",
              "nika-brain.yml": "kernel", "scripts/a.sh": "kernel", "hooks/README.md": "kernel",
              "kernels/k/kernel.yml": "kernel", "src/app.py": "project", "README.md": "project"}
    for path, zone in expect.items():
        assert zones.zone_of(zs, path).name == zone, path


def test_the_example_workflow_shows_the_seed_features(tmp_path, git_env):
    init(tmp_path / "b", hooks=False)
    wf = load_workflow(tmp_path / "b" / "workflows" / "example.yml")
    assert [s.type for s in wf.chain] == ["code", "test", "brain-write"]
    assert wf.chain[0].on_partial.kind == "gate" and wf.chain[0].on_partial.message
    assert wf.chain[1].test
    last = wf.chain[2]
    assert (last.on_partial, str(last.on_done), str(last.on_fail)) == (None, "trigger:next", "signal:BLOCKED_ON")


# ---- the shell entry points ---------------------------------------------------------------------

RECORDER = '#!/bin/sh\nprintf "%s|" "$@" > "$RECORD"\nprintf "%s" "$NIKA_BRAIN_DIR" >> "$RECORD"\n'


@pytest.mark.parametrize("script, args, expect", [
    ("preflight-check.sh", ["src/", "project"], ["preflight", "check", "src/", "project"]),
    ("preflight-check.sh", ["reset", "src/"], ["preflight", "reset", "src/"]),
    ("file-lock.sh", ["acquire", "src/"], ["lock", "acquire", "src/"]),
    ("file-lock.sh", ["release", "src/"], ["lock", "release", "src/"]),
    ("file-lock.sh", ["renew", "src/"], ["lock", "renew", "src/"]),
    ("file-lock.sh", ["status", "src/"], ["lock", "status", "src/"]),
    ("human-gate-ack.sh", ["gate", "g1", "two words"], ["gate", "open", "g1", "two words"]),
    ("human-gate-ack.sh", ["approve", "g1"], ["gate", "approve", "g1"]),
    ("human-gate-ack.sh", ["reject", "g1"], ["gate", "reject", "g1"]),
    ("workflow-launch.sh", ["workflows/example.yml", "--mode", "swarm"],
     ["workflow-launch", "workflows/example.yml", "--mode", "swarm"]),
    ("theme-branch-open.sh", ["theme/x"], ["branch", "open", "theme/x"]),
    ("theme-branch-merge.sh", ["theme/x"], ["branch", "merge", "theme/x"]),
    ("brain-index-regen.sh", [], ["index"]),
])
def test_scripts_keep_the_seed_interfaces(tmp_path, git_env, script, args, expect):
    root = tmp_path / "b"
    init(root, hooks=False)
    recorder = tmp_path / "recorder.sh"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    record = tmp_path / "record"
    env = dict(os.environ, NIKA_BRAIN=str(recorder), RECORD=str(record))
    proc = subprocess.run(["sh", str(root / "scripts" / script), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    *argv, brain_dir = record.read_text().split("|")
    assert argv == expect
    assert brain_dir == str(root)  # found from the script's own location, whatever the cwd


@pytest.mark.parametrize("script", ["file-lock.sh", "human-gate-ack.sh"])
def test_scripts_refuse_an_unknown_verb(tmp_path, git_env, script):
    init(tmp_path / "b", hooks=False)
    proc = subprocess.run(["sh", str(tmp_path / "b" / "scripts" / script), "frobnicate", "x"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "usage:" in proc.stderr


def test_lock_and_gate_scripts_drive_the_real_tool(tmp_path, git_env):
    root = tmp_path / "b"
    init(root, hooks=False)
    env = dict(os.environ, NIKA_BRAIN=PYTHON_NIKA, NIKA_CLAIM="sess-20260317-1000-example-step-1")

    def sh(script: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", str(root / "scripts" / script), *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True)

    assert sh("file-lock.sh", "acquire", "src/greeting/").returncode == 0
    status = sh("file-lock.sh", "status", "src/greeting/")
    assert status.returncode == 3 and "held by sess-20260317-1000-example-step-1" in status.stdout
    assert sh("file-lock.sh", "release", "src/greeting/").returncode == 0
    assert sh("human-gate-ack.sh", "gate", "g-1", "continue with step 2?").returncode == 0
    assert sh("human-gate-ack.sh", "approve", "g-1").returncode == 0
    assert "status: approved" in (root / "gates" / "g-1.yml").read_text()
