"""Campaign, the newer commands (issue 25 §5): a red team's cases that gave tracebacks, hangs or a
silent "ok", through the real `python -m nika_brain` process. Each must end in one clear line on
stderr and a failing exit code, within a bound far above an honest run (a hang fails the test), and
leave nothing behind."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nika_brain.bus.embedded import EmbeddedBus
from nika_brain.errors import BrainError
from tests.kit.brain import put_kernel

BOUND = 60   # seconds: a hang on a FIFO or /dev/zero fails here, long after any honest answer
LATIN1 = b"caf\xe9"   # a Latin-1 file name: not UTF-8, handed to Python as a lone surrogate


def run(brain, *args, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    argv = [os.fsencode(a) if isinstance(a, str) else a for a in args]
    return subprocess.run([os.fsencode(sys.executable), b"-m", b"nika_brain", *argv], cwd=brain.root,
                          capture_output=True, timeout=BOUND, stdin=stdin)


def one_line_failure(proc: subprocess.CompletedProcess, *words: str) -> str:
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode not in (0, None) and b"Traceback" not in proc.stderr, err
    assert len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


# ---- invalid UTF-8 on the command line ---------------------------------------------------------

SURROGATE_CASES = [
    [b"triage", LATIN1],
    [b"kernel", b"spawn", LATIN1, b"--runtime", b"headless"],
    [b"registry", b"add", b"ops", b"--level", b"strategy", b"--title", LATIN1],
    [b"gate", b"open", LATIN1, b"continue?"],
    [b"gate", b"open", b"g1", LATIN1],
    [b"claim", b"open", b"--workflow", b"w", b"--step", b"1", b"--scope", b"src/", b"--story-angle", LATIN1],
    [b"kernel", b"enqueue", b"alpha", LATIN1],
    [b"kernel", b"readjust", b"alpha", LATIN1],
    [b"rag", b"query", LATIN1, b"--kernel", b"alpha"],
    [b"lock", b"acquire", b"src/" + LATIN1, b"--owner", b"sess-a"],
    [b"lock", b"acquire", b"src/" + LATIN1, b"--owner", b"sess-a", b"--no-pid"],
    [b"bus", b"publish", LATIN1, b"{}"],
    [b"bus", b"publish", b"c", b'{"a": "' + LATIN1 + b'"}'],
]


@pytest.mark.parametrize("args", SURROGATE_CASES, ids=lambda a: b" ".join(a[:2]).decode("ascii", "replace"))
def test_invalid_utf8_arguments_are_one_line(brain, args):
    put_kernel(brain.root, "alpha", "IT operations")
    before = sorted(p.relative_to(brain.root) for p in brain.root.rglob("*") if ".git" not in p.parts)
    one_line_failure(run(brain, *args), "not valid UTF-8")
    after = sorted(p.relative_to(brain.root) for p in brain.root.rglob("*") if ".git" not in p.parts)
    assert [p for p in after if p not in before and p.parts[0] != ".nika"] == []


# ---- bus publish ---------------------------------------------------------------------------------

@pytest.mark.parametrize("channel, message, words", [
    ("c", '{"a": "\\udc00"}', ["lone surrogate"]),
    ("c", "[" * 10_000 + "]" * 10_000, ["nested too deeply"]),
    ("c", '{"a": ' + "[" * 10_000 + "]" * 10_000 + "}", ["nested too deeply"]),
    ("../../x", "{}", ["looks like a path"]),
    ("/etc/x", "{}", ["looks like a path"]),
    ("..", "{}", ["looks like a path"]),
])
def test_bus_publish_refuses_what_it_cannot_store(brain, channel, message, words):
    one_line_failure(run(brain, "bus", "publish", channel, message), *words)
    assert run(brain, "bus", "publish", "c", '{"ok": 1}').returncode == 0


def test_the_bus_refuses_a_path_like_channel_in_process(tmp_path):
    bus = EmbeddedBus(tmp_path / "bus.sqlite3")
    for channel in ("../../x", "a/b", "..", "a\\b"):
        with pytest.raises(BrainError, match="looks like a path"):
            bus.publish(channel, {"a": 1})
    assert bus.publish("nika:federation:directives", {"a": 1})


# ---- no hang on a FIFO or an endless device ------------------------------------------------------

@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("source", ["fifo", "/dev/zero"])
@pytest.mark.parametrize("command", [["triage", "calibrate", "--labelled"],
                                     ["kernel", "spawn", "IT operations", "--runtime", "headless", "--examples"]])
def test_input_files_that_never_end_are_refused_not_read(brain, fifo, source, command):
    path = str(fifo) if source == "fifo" else source
    one_line_failure(run(brain, *command, path), "not a regular file")
    assert not brain.kernels_dir.exists() or not any(brain.kernels_dir.iterdir())


# ---- accepted when they should not be ------------------------------------------------------------

@pytest.mark.parametrize("status", ["dead", "killed", "failed", "handed-over"])
@pytest.mark.parametrize("verb", [["kernel", "readjust", "alpha", "prioritise backups"],
                                  ["kernel", "enqueue", "alpha", "restore the backup"]])
def test_directives_and_tasks_for_a_kernel_that_is_not_live_are_refused(brain, status, verb):
    put_kernel(brain.root, "alpha", "IT operations", status=status)
    one_line_failure(run(brain, *verb), f"kernel alpha is {status}")
    assert not (brain.kernels_dir / "alpha" / "directives.jsonl").exists()


@pytest.mark.parametrize("args, words", [
    (["--id", "ALPHA"], ["kernel alpha exists already", "only by case"]),
    (["--id", "Alpha"], ["only by case"]),
    (["--id", ""], ["--id is empty"]),
    (["--id", "  "], ["--id is empty"]),
    (["--card", "nope"], ["no agent card agents/nope.md"]),
])
def test_spawn_refuses_a_bad_id_or_card_before_writing(brain, args, words):
    put_kernel(brain.root, "alpha", "IT operations")
    one_line_failure(run(brain, "kernel", "spawn", "Lab work: benchmarks", "--runtime", "headless", *args),
                     *words)
    assert sorted(p.name for p in brain.kernels_dir.iterdir()) == ["alpha"]


def test_registry_link_to_an_unknown_session_or_kernel_is_refused(brain):
    from nika_brain.state import sessions
    put_kernel(brain.root, "alpha", "IT operations")
    one_line_failure(run(brain, "registry", "link", "sess-ghost", "--kernel", "alpha"), "no such session")
    sessions.bind(brain, "sess-1", kernel=None, claim=None)
    one_line_failure(run(brain, "registry", "link", "sess-1", "--kernel", "ghost"), "no such kernel")
    ok = run(brain, "registry", "link", "sess-1", "--kernel", "alpha")
    assert ok.returncode == 0, ok.stderr


def test_a_proposal_file_without_its_gate_field_is_listed_and_decided_without_a_traceback(brain, cli):
    made = cli("kernel", "propose", "Lab work: benchmarks")
    assert made.returncode == 0, made.stderr
    (path,) = (brain.root / "proposals").glob("*.yml")
    path.write_text("".join(x for x in path.read_text().splitlines(True) if not x.startswith("gate:")))
    listed = cli("kernel", "proposals")
    assert listed.returncode == 0 and path.stem in listed.stdout and "Traceback" not in listed.stderr
    rejected = cli("kernel", "reject", path.stem)
    assert rejected.returncode == 0 and "Traceback" not in rejected.stderr, rejected.stderr
    assert "rejected" in cli("kernel", "proposals").stdout
