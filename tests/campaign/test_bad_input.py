"""Campaign, bad input: a seeded corpus of >= 1,000 malformed inputs per kind through the real entry
points — the state-file loaders (what `validate` and every command use), the CLI's `main()`, the hook's
`main()`, the bus — with 0 tracebacks, 0 hangs (a per-case time bound) and the documented exit codes.
A seeded sample of each kind also runs through the real `python -m nika_brain` process.

NIKA_CAMPAIGN=full (or `python tests/campaign/run.py --full`) multiplies the corpus by ten.
"""
from __future__ import annotations

import contextlib
import io
import json
import random
import signal
import subprocess
import sys

import pytest

from nika_brain.__main__ import main as nika_main
from nika_brain.bus.embedded import EmbeddedBus
from nika_brain.errors import BrainError
from nika_brain.state import claims, locks
from nika_brain.state.validate import load
from nika_brain.support.yamlsafe import dumps
from tests.state.test_malformed_corpus import BASES, TEXT_BREAKERS, WRONG_VALUES, _load_yaml_base, _wrap

from .corpus import PER_KIND, SEED, bus_messages, cli_args, hook_stdins

CASE_SECONDS = 10.0   # per case: far above any honest run, far below a hang
EXIT_CODES = {0, 1, 2, 3, 4, 5, 6}   # documented in nika_brain/errors.py (2: usage, from the CLI parser)


class Hang(Exception):
    pass


@contextlib.contextmanager
def bounded(what: str):
    def alarm(signum, frame):
        raise Hang(what)
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ---- state files of every kind -----------------------------------------------------------------------

def _fresh(value):
    return json.loads(json.dumps(value))   # never share a node: a mutant must not contain itself


def _mutants(kind: str, n: int) -> list[bytes]:
    rng = random.Random(f"{SEED}-{kind}")
    base = BASES[kind][1] or _load_yaml_base(kind)
    out = []
    for _ in range(n):
        data = json.loads(json.dumps(base, default=str))
        for _ in range(rng.randrange(1, 4)):   # 1-3 structural mutations, anywhere in the tree
            node, path = data, []
            while isinstance(node, (dict, list)) and node and rng.random() < 0.6:
                key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
                if not isinstance(node[key], (dict, list)):
                    break
                node, path = node[key], path + [key]
            if isinstance(node, dict) and node:
                key = rng.choice(list(node))
                r = rng.random()
                if r < 0.2:
                    del node[key]
                elif r < 0.3:
                    node["k" + str(rng.randrange(99))] = _fresh(rng.choice(WRONG_VALUES))
                else:
                    edge = ["²", "1\u0661", -10**20, 10**20, 1e308, "nan"]
                    node[key] = _fresh(rng.choice(WRONG_VALUES + edge))
            elif isinstance(node, list) and node:
                node[rng.randrange(len(node))] = _fresh(rng.choice(WRONG_VALUES))
        text = _wrap(kind, dumps(data)).encode("utf-8")
        r = rng.random()
        if r < 0.15:
            text = text[: rng.randrange(len(text) + 1)]
        elif r < 0.3:
            b = bytearray(text)
            for _ in range(rng.randrange(1, 6)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            text = bytes(b)
        elif r < 0.4:
            text += rng.choice(TEXT_BREAKERS)[1].encode()
        out.append(text)
    return out


@pytest.mark.parametrize("kind", sorted(BASES))
def test_state_files_of_every_kind(tmp_path, kind):
    rel = BASES[kind][0]
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    crashes, results = [], {"ok": 0, "refused": 0}
    for i, data in enumerate(_mutants(kind, PER_KIND)):
        path.write_bytes(data)
        try:
            with bounded(f"{kind} #{i}"):
                load(kind, path)
            results["ok"] += 1
        except BrainError as exc:
            if "\n" in str(exc):
                crashes.append((i, "message on several lines", str(exc)[:200]))
            results["refused"] += 1
        except Exception as exc:  # noqa: BLE001 - what the campaign hunts for (Hang included)
            crashes.append((i, type(exc).__name__, str(exc)[:200]))
    assert crashes == []
    assert results["refused"] >= PER_KIND // 4, results   # the corpus really is malformed


# ---- CLI arguments ---------------------------------------------------------------------------------------

def _cli_in_process(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), bounded(" ".join(args)[:80]):
        code = nika_main(args)
    return code, out.getvalue(), err.getvalue()


def test_cli_arguments(brain, monkeypatch):
    monkeypatch.chdir(brain.root)
    monkeypatch.setenv("NIKA_BRAIN_DIR", str(brain.root))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    claims.open_claim(brain, workflow="w", step=1, satellite_type="code", scope="src/")
    crashes, codes = [], {}
    for args in cli_args():
        try:
            code, out, err = _cli_in_process(args)
        except SystemExit as exc:   # click's own usage errors exit 2
            code, err = exc.code if isinstance(exc.code, int) else 1, ""
        except Exception as exc:  # noqa: BLE001
            crashes.append((args, f"{type(exc).__name__}: {exc}"[:200]))
            continue
        codes[code] = codes.get(code, 0) + 1
        if code not in EXIT_CODES or "Traceback" in err:
            crashes.append((args, code, err[:200]))
        elif code == 1 and err.startswith("nika-brain: ") and err.count("\n") != 1:
            crashes.append((args, "several lines", err[:300]))
    assert crashes == [], crashes[:5]
    assert codes.get(0, 0) > 0 and sum(v for k, v in codes.items() if k) > len(cli_args()) // 2, codes
    locks.list_locks(brain)   # every lock file anyone wrote is still readable


def test_a_sample_of_cli_arguments_through_the_real_process(cli):
    sample = random.Random(SEED).sample(cli_args(), 8)
    for args in sample:
        proc = cli(*args, timeout=60)
        assert proc.returncode in EXIT_CODES, (args, proc.returncode, proc.stderr)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)


# ---- hook stdin, every event ----------------------------------------------------------------------

def _hook_in_process(event: str, data: bytes) -> tuple[int, str, str]:
    from nika_brain.hooks.claude import main as hook_main
    stdin = io.TextIOWrapper(io.BytesIO(data))
    out, err = io.StringIO(), io.StringIO()
    old_in = sys.stdin
    sys.stdin = stdin
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), bounded(event):
            code = hook_main([event])
    finally:
        sys.stdin = old_in
    return code, out.getvalue(), err.getvalue()


def test_hook_stdin_for_every_event(brain, monkeypatch):
    monkeypatch.setenv("NIKA_BRAIN_DIR", str(brain.root))
    for name in ("NIKA_CLAIM", "CLAUDECODE"):
        monkeypatch.delenv(name, raising=False)
    crashes = []
    for event, data in hook_stdins(str(brain.root)):
        try:
            code, out, err = _hook_in_process(event, data)
        except Exception as exc:  # noqa: BLE001
            crashes.append((event, data[:120], f"{type(exc).__name__}: {exc}"[:200]))
            continue
        if code not in (0, 1, 2) or "internal error" in err or "Traceback" in err:
            crashes.append((event, data[:120], code, err[:200]))
        elif out and not out.lstrip().startswith("{"):
            crashes.append((event, data[:120], "stdout is not one JSON object", out[:200]))
        elif out:
            json.loads(out)
        if code == 0 and not out and err:
            crashes.append((event, data[:120], "exit 0 with words on stderr", err[:200]))
    assert crashes == [], crashes[:5]


def test_a_sample_of_hook_stdin_through_the_real_process(brain):
    sample = random.Random(SEED).sample(hook_stdins(str(brain.root)), 9)
    for event, data in sample:
        proc = subprocess.run([sys.executable, "-m", "nika_brain", "hook", event], input=data,
                              capture_output=True, timeout=60, cwd="/",
                              env={"PATH": "/usr/bin:/bin", "NIKA_BRAIN_DIR": str(brain.root),
                                   "PYTHONPATH": sys.path[0] if sys.path[0] else "."})
        assert proc.returncode in (0, 1, 2), (event, data[:80], proc.stderr)
        assert b"Traceback" not in proc.stderr and b"internal error" not in proc.stderr, proc.stderr


# ---- bus messages ----------------------------------------------------------------------------------

def test_bus_messages(tmp_path):
    bus = EmbeddedBus(tmp_path / "bus.sqlite3")
    crashes, stored = [], 0
    for channel, body in bus_messages():
        try:
            with bounded(str(channel)[:40]):
                bus.publish(channel, body)
            stored += 1
        except BrainError as exc:
            if "\n" in str(exc):
                crashes.append((channel, "several lines", str(exc)[:200]))
        except Exception as exc:  # noqa: BLE001
            crashes.append((str(channel)[:40], repr(body)[:80], f"{type(exc).__name__}: {exc}"[:200]))
    assert crashes == [], crashes[:5]
    # What was accepted reads back as the JSON objects that were sent.
    for _id, data in bus.read("ok-channel", count=10_000):
        assert isinstance(data, dict)
    assert stored > 0
