"""Issue 10's defects, one test each (the campaign proper: test_bad_input.py, test_faults.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from nika_brain.engine import orchestrator, service
from nika_brain.errors import BrainError, Invalid
from nika_brain.state import breakers, claims, gates, locks, validate, workflows
from nika_brain.support import fsio
from nika_brain.support.yamlsafe import loads
from tests.kit.brain import git_out as git
from tests.kit.orch import nb, orch_brain

ONE = """name: one
branch: theme/one
chain:
  - step: {step}
    type: search
    scope: src/greeting/
"""


# ---- 1. step ids: one type, one check; no lock without a written claim -----------------------------

@pytest.mark.parametrize("bad", ['"\u00b2"', '"1\u0661"', '"../x"', '""', "-1", "true", '"' + "a" * 65 + '"'])
def test_a_bad_step_id_fails_validate_and_the_loader_alike(tmp_path, git_env, bad):
    brain = orch_brain(tmp_path / "b", {"one": ONE.format(step=bad)})
    report = validate.validate(brain.root)
    assert [p.file for p in report.problems] == ["workflows/one.yml"], report.problems
    assert "step" in report.problems[0].key
    with pytest.raises(BrainError):
        workflows.load_workflow(brain.root / "workflows" / "one.yml")
    proc = nb(brain, "workflow-launch", "one")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert not list((brain.root / "locks").glob("*.yml")) if (brain.root / "locks").exists() else True


def test_step_ids_are_text_in_step_claim_gate_and_run(tmp_path, git_env):
    brain = orch_brain(tmp_path / "b", {"one": ONE.format(step=7)})
    out = service.launch(brain, "one")
    c = claims.load_claim(brain, out.claim)
    wf = workflows.find_workflow(brain, "one")
    assert wf.chain[0].id == c.step == "7"
    assert "step: 7\n" in claims.claim_path(brain, c.id).read_text()   # written as YAML had it
    g = gates.open_gate(brain, "g-7", "ok?", workflow="one", step=7)
    assert g.step == "7" and gates.load_gate(brain, "g-7").step == "7"
    with pytest.raises(Invalid):
        gates.open_gate(brain, "g-8", "ok?", step="\u00b2")


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), Invalid("claim write failed")])
def test_a_failing_claim_open_releases_the_locks_it_took(tmp_path, git_env, monkeypatch, failure):
    brain = orch_brain(tmp_path / "b", {"one": ONE.format(step=1)})

    def broken(*a, **kw):
        raise failure
    monkeypatch.setattr(claims, "open_claim", broken)
    with pytest.raises(type(failure)):
        service.launch(brain, "one")
    assert locks.list_locks(brain) == []
    assert claims.list_claims(brain) == []


# ---- 2. bad arguments: one line, exit 1 ----------------------------------------------------------

BAD_ARGS = [
    ["lock", "acquire", "src/", "--owner", "o", "--ttl", "nan"],
    ["lock", "acquire", "src/", "--owner", "o", "--ttl", "1e309"],
    ["lock", "acquire", "src/", "--owner", "o", "--ttl", "99999999999999999999"],
    ["lock", "acquire", "src/", "--owner", "o", "--ttl", "-5"],
    ["lock", "acquire", "src/", "--owner", "o", "--wait", "inf"],
    ["lock", "acquire", "src/", "--owner", "o", "--pid", "99999999999"],
    ["lock", "acquire", "src/", "--owner", "o" * 300],
    ["lock", "acquire", "s" * 2000, "--owner", "o"],
    ["lock", "renew", "src/", "--owner", "o", "--ttl", "nan"],
    ["claim", "open", "--workflow", "w", "--step", "\u00b2", "--scope", "src/"],
    ["validate", "x" * 300],
]


@pytest.mark.parametrize("args", BAD_ARGS, ids=[" ".join(a)[:50] for a in BAD_ARGS])
def test_bad_arguments_give_one_line_and_exit_1(cli, brain, args):
    proc = cli(*args)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    said = proc.stdout + proc.stderr   # validate reports problems on stdout, errors go to stderr
    assert said.count("\n") == 1 and "Traceback" not in said, said
    assert proc.stderr.startswith("nika-brain: ") or args[0] == "validate"
    assert locks.list_locks(brain) == [] and claims.list_claims(brain) == []


def test_a_300_character_agent_in_a_claim_is_a_validate_problem_not_a_crash(cli, brain):
    c = claims.open_claim(brain, workflow="w", step=1, satellite_type="code", scope="src/")
    path = claims.claim_path(brain, c.id)
    path.write_text(path.read_text().replace("agent: null", "agent: " + "a" * 300))
    proc = cli("validate")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"claims/{c.id}.yml" in proc.stdout and "agent" in proc.stdout


# ---- 3. temp files of killed writers -------------------------------------------------------------

def test_temp_files_are_ignored_never_committed_swept_and_reported(brain):
    claims.open_claim(brain, workflow="w", step=1, satellite_type="code", scope="src/")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    stale = brain.claims_dir / f".x.yml.{dead.stdout.strip()}.3.tmp"
    fresh = brain.claims_dir / f".y.yml.{dead.stdout.strip()}.4.tmp"
    live = brain.claims_dir / f".z.yml.{os.getppid()}.5.tmp"
    for p in (stale, fresh, live):
        p.write_text("half")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    os.utime(live, (old, old))
    assert any("temp file" in n for n in validate.validate(brain.root).notes)
    (brain.root / ".gitignore").write_text(".nika/\n")   # an older brain: the pathspec still excludes
    assert orchestrator.commit_state(brain, "state")
    committed = git(brain.root, "ls-files", "claims")
    assert ".tmp" not in committed and committed.endswith(".yml")
    claims.list_claims(brain)   # listing the folder sweeps what a dead writer left over a minute ago
    assert not stale.exists() and fresh.exists() and live.exists()


def test_init_ignores_temp_files(tmp_path, git_env):
    from nika_brain.engine.init import init
    init(tmp_path / "b", hooks=False)
    assert ".*.tmp" in (tmp_path / "b" / ".gitignore").read_text().splitlines()
    assert fsio.temp_pid(".a.yml.123.4.tmp") == 123 and fsio.temp_pid("a.yml") is None


# ---- 4. fencing tokens never go back -------------------------------------------------------------

def test_fencing_tokens_continue_above_git_history_after_the_state_folder_is_wiped(brain):
    for i in range(3):
        locks.acquire(brain, f"src/{i}/", "sess-a", pid=None)
    high = max(lk.token for lk in locks.list_locks(brain))
    orchestrator.commit_state(brain, "locks")
    locks.release_all(brain, "sess-a")
    orchestrator.commit_state(brain, "released")
    import shutil
    shutil.rmtree(brain.state_dir)
    assert locks.acquire(brain, "src/x/", "sess-b", pid=None).token > high


def test_fencing_tokens_never_go_back_when_no_lock_was_ever_committed(brain):
    import shutil
    tokens = []
    for i in range(8):
        tokens.append(locks.acquire(brain, f"src/{i}/", "sess-a", pid=None).token)
        locks.release(brain, f"src/{i}/", "sess-a")
    shutil.rmtree(brain.state_dir)
    assert locks.acquire(brain, "src/x/", "sess-b", pid=None).token > max(tokens) == 8


def test_fencing_tokens_stay_above_a_local_counter_higher_than_git_history(brain):
    import shutil
    locks.acquire(brain, "src/a/", "sess-a", pid=None)
    locks.acquire(brain, "src/b/", "sess-a", pid=None)        # token 2, committed
    orchestrator.commit_state(brain, "locks")
    for i in range(51):                                      # the local counter goes on to 53
        locks.acquire(brain, f"src/c{i}/", "sess-c", pid=None)
        locks.release(brain, f"src/c{i}/", "sess-c")
    assert int((brain.state_dir / "fencing").read_text()) == 53
    shutil.rmtree(brain.state_dir)
    assert locks.acquire(brain, "src/x/", "sess-b", pid=None).token == 54


@pytest.mark.parametrize("content", ["-5", "99999999999999999999999999", "+7", "1e3", "٣"])
def test_a_counter_that_is_not_a_small_non_negative_number_fails_closed(cli, brain, content):
    locks.acquire(brain, "src/a/", "sess-a", pid=None)
    (brain.state_dir / "fencing").write_text(content)
    proc = cli("lock", "acquire", "src/b/", "--owner", "sess-b", "--no-pid")
    assert proc.returncode == 1 and "fencing counter" in proc.stderr and "corrupt" in proc.stderr
    assert "Traceback" not in proc.stderr and not (brain.locks_dir / "src-b").exists()
    assert [lk.scope for lk in locks.list_locks(brain)] == ["src/a/"]
    # deleting it, as the message says, resumes above every token issued
    (brain.state_dir / "fencing").unlink()
    assert cli("lock", "acquire", "src/b/", "--owner", "sess-b", "--no-pid").returncode == 0
    assert max(lk.token for lk in locks.list_locks(brain)) == 2


# ---- 5. re-acquire keeps liveness evidence --------------------------------------------------------

def test_reacquire_without_a_pid_keeps_the_holders_process(brain):
    first = locks.acquire(brain, "src/", "sess-a", pid=os.getpid())
    again = locks.acquire(brain, "src/", "sess-a", pid=None)
    assert again.holder == first.holder and again.holder.pid == os.getpid()
    assert again.token == first.token


# ---- 8. listings with an invalid record -----------------------------------------------------------

@pytest.mark.parametrize("kind", ["gate", "claim", "lock"])
def test_one_invalid_record_does_not_hide_the_others(cli, brain, kind):
    if kind == "gate":
        gates.open_gate(brain, "good", "fine?")
        folder, name = brain.gates_dir, "good"
    elif kind == "claim":
        name = claims.open_claim(brain, workflow="w", step=1, satellite_type="code", scope="src/").id
        folder = brain.claims_dir
    else:
        locks.acquire(brain, "src/good/", "sess-good", pid=None)
        folder, name = brain.locks_dir, "src/good/"
    (folder / "zz-broken.yml").write_text("id: [\n")
    proc = cli(kind, "list")
    assert proc.returncode == 0 and name in proc.stdout
    assert "zz-broken.yml" in proc.stderr and proc.stderr.count("\n") == 1
    strict = cli(kind, "list", "--strict")
    assert strict.returncode == 1 and name in strict.stdout


# ---- 9. gaps found by mutation -------------------------------------------------------------------

def test_test_and_code_steps_close_validated_others_atomic():
    doc = loads("name: t\nbranch: b\nchain:\n" + "".join(
        f"  - step: {i}\n    type: {t}\n    scope: s{i}/\n"
        for i, t in enumerate(claims.SATELLITE_TYPES, 1)), "<t>")
    wf = workflows.build(doc)
    tiers = {s.type: orchestrator.tier_of(s) for s in wf.chain}
    assert tiers == {"code": "validated", "test": "validated", "brain-write": "atomic",
                     "deploy": "atomic", "search": "atomic"}


def test_a_red_test_step_is_not_closed_ok(tmp_path, git_env):
    wf = ("name: tt\nbranch: theme/tt\nchain:\n"
          "  - step: 1\n    type: test\n    scope: src/\n    test: \"false\"\n")
    brain = orch_brain(tmp_path / "b", {"tt": wf})
    cid = service.launch(brain, "tt").claim
    red = nb(brain, "claim", "close", cid, "--status", "ok")
    assert red.returncode == 4 and "tests not green" in red.stderr
    assert claims.load_claim(brain, cid).is_open


def test_claim_ids_use_the_24_hour_clock(brain):
    afternoon = datetime(2031, 5, 6, 15, 7, 9, tzinfo=timezone.utc)
    c = claims.open_claim(brain, workflow="w", step=1, satellite_type="code", scope="src/", now=afternoon)
    assert c.id.startswith("sess-20310506-1507-")


def test_a_success_resets_the_consecutive_failure_count(brain):
    t = datetime(2031, 5, 6, 15, 0, tzinfo=timezone.utc)
    for i in range(2):
        breakers.record(brain, ("src/",), "failed", f"c{i}", now=t + timedelta(minutes=i))
    breakers.record(brain, ("src/",), "ok", "c2", now=t + timedelta(minutes=2))
    assert breakers.load_path(breakers.breaker_path(brain, "src/")).fails == 0
    tripped = breakers.record(brain, ("src/",), "failed", "c3", now=t + timedelta(minutes=3))
    assert tripped == [] and not breakers.tripped_for(brain, ["src/"])


def test_the_cli_under_test_is_this_checkout(cli):
    proc = cli("--help")
    probe = subprocess.run([sys.executable, "-c", "import nika_brain; print(nika_brain.__file__)"],
                           capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0
    assert probe.stdout.strip() == str(Path(__file__).resolve().parents[2] / "nika_brain" / "__init__.py")


# ---- 7. lookups by lock file name ----------------------------------------------------------------------

def test_the_index_finds_exactly_the_overlapping_locks_a_full_scan_finds(brain):
    import random

    from nika_brain.state.scopes import scopes_overlap
    rng = random.Random(7)
    segs = ["src", "a", "b", "lib", "x.py", "*.py", "docs", "a b", "é"]
    made = []
    for i in range(80):
        scope = "/".join(rng.choice(segs) for _ in range(rng.randrange(1, 4))) + rng.choice(["", "/"])
        if rng.random() < 0.03:
            scope = "."
        made.append(locks.acquire(brain, scope, f"sess-{i}", pid=None, mode="shared"))
        if rng.random() < 0.2:
            victim = made.pop(rng.randrange(len(made)))
            locks.release(brain, victim.scope, victim.owner)
    for _ in range(200):
        target = "/".join(rng.choice(segs) for _ in range(rng.randrange(1, 5))) + rng.choice(["", "/"])
        want = sorted((lk.scope, lk.owner) for lk in locks.list_locks(brain)
                      if scopes_overlap(lk.scope, target))
        got = sorted((lk.scope, lk.owner) for lk in locks.overlapping(brain, target))
        assert got == want, target


def test_a_lock_file_written_by_someone_else_is_seen_and_an_unreadable_one_fails_closed(cli, brain):
    locks.acquire(brain, "src/a/", "sess-a", pid=None)
    # Another tool (a merge, a hand edit) adds a lock file: the folder changed, the index is rebuilt.
    held = locks.acquire(brain, "src/b/", "sess-b", pid=None)
    text = held.path.read_text()
    locks.release(brain, "src/b/", "sess-b")
    (brain.locks_dir / "by-hand.yml").write_text(text)
    with pytest.raises(BrainError) as busy:
        locks.acquire(brain, "src/b/x.py", "sess-c", pid=None)
    assert busy.value.exit_code == 3
    # An unreadable lock file: acquire refuses, and the hook denies a write (fail closed).
    (brain.locks_dir / "broken.yml").write_text("scope: [\n")
    with pytest.raises(BrainError) as bad:
        locks.acquire(brain, "docs/", "sess-c", pid=None)
    assert bad.value.exit_code == 1 and "broken.yml" in str(bad.value)
    view_error = None
    try:
        locks.LockView(brain)
    except BrainError as exc:
        view_error = exc
    assert view_error is not None and "broken.yml" in str(view_error)


def test_a_lock_file_broken_in_place_blocks_the_paths_it_may_cover(brain):
    lk = locks.acquire(brain, "src/a/", "sess-a", pid=None)
    view = locks.LockView(brain)
    with open(lk.path, "r+") as fh:   # in place: the folder's mtime does not move
        fh.write("scope: [\n")
    (blocked,) = view.covering("src/a/x.py")
    assert blocked.mode == "exclusive" and "unreadable" in blocked.owner
    assert view.covering("docs/x.md") == []


# ---- 6. lock and claim commands without the CLI framework ---------------------------------------------

REPAIR = ["(the broken claim file is removed)"]
FAST_SEQUENCE = [
    ["lock", "acquire", "src/a/", "--owner", "sess-1", "--no-pid", "--ttl", "60"],
    ["lock", "acquire", "src/a/", "--owner", "sess-1", "--no-pid", "--json"],
    ["lock", "acquire", "src/a/b.py", "--owner", "sess-2", "--no-pid"],
    ["lock", "acquire", "src/", "--owner", "sess-2", "--shared", "--no-pid"],
    ["lock", "status", "src/"],
    ["lock", "status", "docs/", "--json"],
    ["lock", "renew", "src/a/", "--owner", "sess-1", "--ttl", "120"],
    ["lock", "renew", "src/a/", "--owner", "sess-1", "--ttl", "nan"],
    ["lock", "release", "src/a/", "--owner", "sess-2"],
    ["lock", "release", "src/a/", "--owner", "sess-1"],
    ["lock", "release", "src/a/", "--owner", "sess-1"],
    ["lock", "acquire", "src/x/", "--ttl", "1e309", "--owner", "sess-1"],
    ["lock", "acquire", "src/x/", "--ttl", "soon", "--owner", "sess-1"],
    ["lock", "acquire", "src/x/"],
    ["lock", "acquire", "src/x/", "--bogus"],
    ["lock", "acquire", "/etc/", "--owner", "sess-1"],
    ["lock", "list"],
    ["lock", "list", "--json"],
    ["claim", "list"],
    ["claim", "list", "--status", "open", "--json"],
    ["claim", "list", "--strict"],
    ["claim", "show", "sess-20310506-0708-w-step-1"],
    ["claim", "show", "sess-20310506-0708-w-step-1", "--json"],
    ["claim", "show", "sess-nope"],
    ["claim", "show", "../../etc/passwd"],
    ["claim", "open", "--workflow", "w2", "--step", "3", "--scope", "docs/", "--scope", "lib/"],
    ["claim", "open", "--workflow", "w3", "--step", "1", "--scope", "/etc/", "--json"],
    ["claim", "open", "--workflow", "w3", "--step", "1", "--type", "search", "--story-angle", "a b",
     "--scope", "notes/", "--json"],
    ["claim", "open", "--workflow", "w3"],
    ["index"],                                     # the broken claim stops the index: named, exit 1
    REPAIR,
    ["index", "--check"],
    ["index"],
    ["index", "--check"],
    ["index", "--stdout"],
    ["index", "--bogus"],
    ["claim", "close", "sess-20310506-0708-w-step-1", "--status", "ok"],
    ["claim", "close", "sess-nope", "--status", "ok"],
    ["claim", "close", "sess-nope"],
    ["claim", "list", "--status", "closed"],
]


REAL_TOO = [["claim", "list", "--strict"], ["lock", "acquire", "src/x/", "--bogus"]]  # after the sequence


def test_the_fast_lock_and_claim_path_answers_like_the_typer_path(tmp_path, git_env):
    """Each command is its own process (forkrun.py: forked from a process that imported what the
    commands import, so the 88 commands do not pay 88 interpreter starts); the last two also run as
    a real `python -m nika_brain` and must say the same as their forked run."""
    import json
    import re
    from concurrent.futures import ThreadPoolExecutor

    from tests.kit.brain import make_brain

    def normal(text: str, brain) -> str:
        text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "<time>", text)
        text = re.sub(r"sess-\d{8}-\d{4,6}", "sess-<stamp>", text)  # ids of claims opened now
        return text.replace(str(brain.root), "<root>")

    def sequence(path: str, env: dict) -> tuple[list, list]:
        brain = make_brain(tmp_path / path)
        claims.open_claim(brain, workflow="w", step=1, satellite_type="search", scope="notes/",
                          now=datetime(2031, 5, 6, 7, 8, tzinfo=timezone.utc))
        (brain.claims_dir / "broken.yml").write_text("id: [half\n")  # listed as invalid, on stderr
        seq = [{"unlink": str(brain.claims_dir / "broken.yml")} if args is REPAIR else args
               for args in FAST_SEQUENCE + REAL_TOO]
        (tmp_path / f"{path}.json").write_text(json.dumps(seq))
        full = {**os.environ, **env}
        p = subprocess.run([sys.executable, str(Path(__file__).with_name("forkrun.py")),
                            tmp_path / f"{path}.json", tmp_path / f"{path}.out"],
                           cwd=brain.root, capture_output=True, text=True, env=full, timeout=600)
        assert p.returncode == 0, p.stderr
        out = [(args, code, normal(o + "|" + e, brain))
               for args, code, o, e in json.loads((tmp_path / f"{path}.out").read_text())]
        real = []
        for args in REAL_TOO:
            r = subprocess.run([sys.executable, "-m", "nika_brain", *args], cwd=brain.root,
                               capture_output=True, text=True, env=full, timeout=300)
            real.append((args, r.returncode, normal(r.stdout + "|" + r.stderr, brain)))
        return out, real

    # The two paths in two brains side by side (their processes are independent): half the wall time.
    with ThreadPoolExecutor(2) as pool:
        fast_run = pool.submit(sequence, "fast", {})
        typer_run = pool.submit(sequence, "typer", {"NIKA_NO_FAST_CLI": "1"})
        said = {"fast": fast_run.result(), "typer": typer_run.result()}
    for side, (forked, real) in said.items():
        assert len(forked) == len(FAST_SEQUENCE) - 1 + len(REAL_TOO)
        assert forked[-len(REAL_TOO):] == real, side   # a forked command says what a fresh process says
    for fast, slow in zip(said["fast"][0], said["typer"][0]):
        assert fast == slow
    assert {code for _, code, _ in said["fast"][0]} >= {0, 1, 2, 3}
    listed = dict((tuple(a), t) for a, _, t in said["fast"][0])
    assert "invalid" in listed[("claim", "list")] and "sess-<stamp>-w2-step-3" in listed[("index", "--stdout")]


@pytest.mark.parametrize("args", [["lock", "acquire", "src/", "--owner", "sess-1", "--no-pid"],
                                  ["lock", "list"], ["claim", "list"], ["index"]])
def test_the_fast_path_does_not_import_typer(brain, args):
    code = ("import sys; from nika_brain.__main__ import main; "
            f"rc = main({args!r}); "
            "assert rc == 0 and 'typer' not in sys.modules and 'click' not in sys.modules")
    p = subprocess.run([sys.executable, "-c", code], cwd=brain.root, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
