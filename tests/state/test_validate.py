"""`nika-brain validate`: kinds by location, `file:line: key: message`, cross-checks, exit codes."""
from __future__ import annotations

import pytest

from nika_brain.errors import BrainError
from nika_brain.state.validate import Problem, kind_of, validate, validate_blobs
from tests.kit.brain import put_breaker, put_claim, put_gate, put_kernel, put_lock, put_run, put_workflow, write


def test_kinds_by_location():
    expect = {
        "nika-brain.yml": "config", "brain/KERNEL.md": "zones", "agents/a.md": "card",
        "workflows/w.yml": "workflow", "claims/c.yml": "claim", "locks/l.yml": "lock",
        "gates/g.yml": "gate", "breakers/b.yml": "breaker", "runs/r.yml": "run",
        "kernels/k/kernel.yml": "kernel", "claims/c.yaml": "misnamed", "workflows/w.yaml": "misnamed",
        "claims/.gitkeep": None, "claims/notes.txt": None, "claims/sub/c.yml": None, "src/app.py": None,
        "brain/notes.md": None, "agents/sub/a.md": None, "kernels/k/memory/x.yml": None, "README.md": None,
    }
    assert {rel: kind_of(rel) for rel in expect} == expect


def test_a_fresh_brain_is_valid(ibrain, cli):
    proc = cli("validate", cwd=ibrain.root)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ok: 7 files\n", "")


def test_problems_are_one_line_each_with_file_line_key(ibrain, cli):
    root = ibrain.root
    put_claim(root, "c-good")
    write(root, "claims/c-bad.yml", "id: c-bad\nworkflow: w\ntheme: w\nstep: 1\nsatellite_type: code\n"
          "scope: src/\nstatus: pending\nopened: '2026-03-17T10:00:00Z'\n")
    write(root, "locks/l.yml", "scope: src/\nowner: x\ntoken: one\n")
    write(root, "gates/g.yml", "id: g\nmessage: m\nstatus: pending\ncreated: 2026-03-17T10:00:00Z\nextra: 1\n")
    write(root, "runs/r.yml", "workflow: r\nstatus: running\nstarted: yesterday\n")
    write(root, "breakers/b.yml", "scope: src/\n")
    write(root, "workflows/w.yml", "name: w\nbranch: theme/w\nchain:\n  - step: 1\n    type: code\n"
          "    scope: src/\n    on_done: trigger:9\n")
    write(root, "agents/odd.md", "no front matter\n")
    put_kernel(root, "k1", "goal")
    write(root, "kernels/k2/kernel.yml", "id: other\ngoal: g\n")
    proc = cli("validate", cwd=root)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "agents/odd.md:1: expected YAML front matter starting with '---'",
        "workflows/w.yml:7: chain.0.on_done: trigger to step '9', which does not exist",
        "claims/c-bad.yml:7: status: must be one of open, closed; got 'pending'",
        "locks/l.yml:3: token: expected an integer, got str",
        "gates/g.yml:5: extra: unknown key (expected one of: id, message, status, created, workflow, "
        "step, claim, reason, decided_at, decided_by, via, pr, note, signature)",
        "breakers/b.yml:1: fails: missing required key",
        "runs/r.yml:3: started: started: not an ISO time: 'yesterday'",
        "kernels/k2/kernel.yml:1: id: id does not match the folder name (k2)",
    ]
    assert proc.stderr == ""


def test_paths_files_and_folders(ibrain, cli):
    root = ibrain.root
    put_claim(root, "c1")
    put_claim(root, "c2")
    write(root, "claims/c3.yml", "id: c3\n")
    assert cli("validate", "claims/c1.yml", cwd=root).stdout == "ok: 1 files\n"
    proc = cli("validate", "claims", cwd=root)
    assert proc.returncode == 1
    assert proc.stdout == "claims/c3.yml:1: workflow: missing required key\n"
    proc = cli("validate", "c1.yml", "c3.yml", cwd=root / "claims")  # relative to the cwd
    assert proc.stdout == "claims/c3.yml:1: workflow: missing required key\n"
    assert cli("validate", ".", cwd=root).returncode == 1  # the root itself: the whole brain


def test_unknown_missing_and_outside_paths_are_problems(ibrain, cli, tmp_path):
    root = ibrain.root
    write(root, "src/app.py", "x = 1\n")
    outside = tmp_path / "elsewhere.yml"
    outside.write_text("a: 1\n")
    proc = cli("validate", "src/app.py", "claims/nope.yml", str(outside), "workflows/example.yml", cwd=root)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("src/app.py: not a brain file (nika-brain validates nika-brain.yml, ")
    assert lines[1] == "claims/nope.yml: no such file"
    assert lines[2] == f"{outside}: outside the brain at {root}"
    assert len(lines) == 3


def test_a_misnamed_state_file_is_reported(ibrain, cli):
    write(ibrain.root, "claims/c1.yaml", "id: c1\n")
    proc = cli("validate", cwd=ibrain.root)
    assert proc.stdout == "claims/c1.yaml: nika-brain ignores this file: brain YAML files end in .yml\n"


def test_cross_checks_zones_and_agent_cards(ibrain, cli):
    root = ibrain.root
    put_claim(root, "c1", zone="vault", agent="ghost")
    write(root, "workflows/w.yml", "name: w\nbranch: theme/w\nagent: nobody\nchain:\n"
          "  - step: 1\n    type: code\n    scope: src/\n    zone: project\n    agent: satellite-boot\n"
          "  - step: 2\n    type: code\n    scope: src/\n    zone: attic\n")
    proc = cli("validate", cwd=root)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "workflows/w.yml:3: agent: no agent card agents/nobody.md",
        "workflows/w.yml:13: chain.1.zone: unknown zone 'attic' (brain/KERNEL.md declares: kernel, project, state)",
        "claims/c1.yml:7: agent: no agent card agents/ghost.md",
        "claims/c1.yml:10: zone: unknown zone 'vault' (brain/KERNEL.md declares: kernel, project, state)",
    ]


def test_zone_cross_checks_need_a_kernel_md(brain, cli):
    put_claim(brain.root, "c1", zone="anything")
    assert cli("validate").stdout == "ok: 2 files\n"


def test_a_broken_config_is_reported_like_any_file(brain, cli):
    (brain.root / "nika-brain.yml").write_text("version: 1\nbus: carrier-pigeon\n")
    put_claim(brain.root, "c1")
    proc = cli("validate", cwd=brain.root / "claims")  # found from a subfolder
    assert proc.returncode == 1
    assert proc.stdout == "nika-brain.yml:2: bus: must be one of embedded, redis; got 'carrier-pigeon'\n"


def test_validate_outside_any_brain_fails_cleanly(tmp_path, cli):
    empty = tmp_path / "nothing"
    empty.mkdir()
    proc = cli("validate", cwd=empty)
    assert proc.returncode == 1
    assert proc.stderr.startswith("nika-brain: no brain found at or above") and "Traceback" not in proc.stderr


def test_every_valid_kind_passes(ibrain):
    root = ibrain.root
    put_claim(root, "c1")
    put_lock(root, "src/", "c1")
    put_gate(root, "g1")
    put_breaker(root, "src/")
    put_workflow(root, "w", 2)
    put_run(root, "w", cursor="1")
    put_kernel(root, "k1", "goal")
    report = validate(root)
    assert report.problems == [] and report.files == 14


def test_validate_blobs_names_the_relative_path_and_uses_the_other_blobs():
    good_card = ("---\nname: helper\ntype: agent\ncontext_tier: warm\nstatus: active\nbrain:\n  scope: x\n"
                 "  owner: human\n  writer: human\n  lifecycle: permanent\n  ipc: {}\n---\nbody\n")
    wf = "name: w\nbranch: b\nchain:\n  - {step: 1, type: code, scope: src/, agent: helper}\n"
    report = validate_blobs("/nonexistent-root", [("agents/helper.md", good_card.encode()),
                                                  ("workflows/w.yml", wf.encode()),
                                                  ("claims/x.yml", b"\xff\xfe"),
                                                  ("src/ignored.py", b"not a brain file")])
    assert report.files == 3
    assert report.problems == [Problem("claims/x.yml", None, None, "not valid UTF-8 (byte 0)")]


def test_problem_formats():
    assert str(Problem("a.yml", 3, "k", "bad")) == "a.yml:3: k: bad"
    assert str(Problem("a.yml", None, "k", "bad")) == "a.yml: k: bad"
    assert str(Problem("a.yml", 2, None, "bad")) == "a.yml:2: bad"
    assert str(Problem("a.yml", None, None, "bad")) == "a.yml: bad"


def test_a_step_scope_in_a_state_folder_or_outside_the_repository_is_a_validation_error(ibrain, cli):
    root = ibrain.root
    for name, scope in (("in-claims", "claims/"), ("in-gates", "gates/g1.yml"), ("index", "BRAIN-INDEX.md"),
                        ("outside", "../elsewhere/"), ("fine", "src/ok/")):
        doc = {"name": name, "branch": f"theme/{name}",
               "chain": [{"step": 1, "type": "code", "scope": scope, "zone": "project"}]}
        write(root, f"workflows/{name}.yml", doc)
    proc = cli("validate", "workflows/", cwd=root)
    assert proc.returncode == 1
    bad = {line.split(":", 1)[0] for line in proc.stdout.splitlines() if "chain.0.scope" in line}
    assert bad == {f"workflows/{n}.yml" for n in ("in-claims", "in-gates", "index", "outside")}
    assert "only nika-brain writes" in proc.stdout and "inside the brain" in proc.stdout


def test_zones_and_cards_read_again_are_the_records_of_the_current_text(tmp_path):
    """A launch reads KERNEL.md and its step's card at every step: the same text gives the record built
    before, a changed text is read anew, a broken one raises each time (never remembered)."""
    from nika_brain.state import agents, zones
    kernel = tmp_path / "KERNEL.md"
    kernel.write_text('---\nzones:\n  - name: project\n    level: open\n    paths: ["."]\n---\n# z\n')
    first = zones.load_zones_path(kernel)
    assert [z.name for z in first] == ["project"] and zones.load_zones_path(kernel) == first
    zones.load_zones_path(kernel).append("not kept")   # each caller gets its own list
    assert len(zones.load_zones_path(kernel)) == 1
    kernel.write_text('---\nzones:\n  - name: infra\n    level: protected\n    paths: [infra/]\n---\n')
    assert [z.name for z in zones.load_zones_path(kernel)] == ["infra"]
    kernel.write_text('---\nzones: [\n---\n')
    for _ in range(2):
        with pytest.raises(BrainError):
            zones.load_zones_path(kernel)
    card = tmp_path / "c1.md"
    text = ("---\nname: c1\ntype: protocol\ncontext_tier: warm\nstatus: active\nbrain:\n  scope: project\n"
            "  owner: human\n  writer: human\n  lifecycle: permanent\n  ipc:\n    zone_access: [project]\n---\n# c1\n")
    card.write_text(text)
    assert agents.load_card_path(card).zone_access == ("project",)
    card.write_text(text.replace("[project]", "[project, kernel]"))
    assert agents.load_card_path(card).zone_access == ("project", "kernel")
    card.write_text(text.replace("name: c1", "name: other"))
    for _ in range(2):
        with pytest.raises(BrainError, match="does not match the file name"):
            agents.load_card_path(card)
