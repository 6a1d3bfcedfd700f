"""Seeded generators of malformed input for the campaign suite: CLI arguments, hook stdin, bus messages
and state files. The same seed gives the same corpus; NIKA_CAMPAIGN=full multiplies its size."""
from __future__ import annotations

import json
import os
import random
from typing import Any

SCALE = 10 if os.environ.get("NIKA_CAMPAIGN") == "full" else 1
PER_KIND = 1000 * SCALE
SEED = int(os.environ.get("NIKA_CAMPAIGN_SEED", "20261130"))

# Numbers at every edge, text that is empty, huge, odd Unicode (never NUL: argv cannot hold one).
NUMBERS = ["0", "-0", "1", "-1", "-5", "0.0001", "1e-320", "nan", "NaN", "-nan", "inf", "-inf", "1e309",
           "-1e309", "99999999999999999999", "9" * 400, "2147483648", "4294967296", "18446744073709551616",
           "0x10", "1_000", " 1", "1 ", "", "²", "١٢", "1e5", "3.", ".5", "+7", "--1", "1e", "e1"]
TEXTS = ["", " ", "-", "--", ".", "..", "../..", "/", "//", "~", "*", "?", "[", "]", "{}", "\t", "\n", "a\nb",
         "é", "ß", "İ", "\u200b", "\u202e", "\ufeff", "🧠", "𝔞", "²", "a" * 300, "b" * 5000, "x/" * 600,
         "src/../../etc", "/etc/passwd", "C:\\x", "\\\\server\\s", "%s%n", "$(id)", "`id`", "'", '"', "\\",
         "-h", "--help", "sess-" + "9" * 200, "NUL-free \x01\x02\x7f", "\udcff"[:0] + "ok",
         # bytes that are not UTF-8 (a Latin-1 file name), as Python hands them over: lone surrogates
         "caf\udce9", "src/\udcff\udcfe", "\udce9t\udce9"]

LOCK_CMDS = [["lock", "acquire"], ["lock", "release"], ["lock", "renew"], ["lock", "status"],
             ["lock", "list"]]
CLAIM_CMDS = [["claim", "open"], ["claim", "close"], ["claim", "show"], ["claim", "list"]]
OTHER_CMDS = [["gate", "list"], ["gate", "open"], ["gate", "approve"], ["validate"], ["index", "--check"],
              ["workflow-launch"], ["workflow", "resume"], ["bus", "tail"]]
OPTIONS = ["--owner", "--ttl", "--wait", "--pid", "--scope", "--step", "--workflow", "--type", "--status",
           "--summary", "--level", "--theme", "--parent", "--tests-passed", "--tests-failed", "--json",
           "--shared", "--no-pid", "--strict", "--count", "--after"]
# Commands that may wait or watch: they get a short bound in the generated arguments.
NO_WAIT = {"--wait": "0", "--follow": None}


def _value(rng: random.Random) -> str:
    pool = NUMBERS if rng.random() < 0.5 else TEXTS
    return rng.choice(pool)


def cli_args(n: int = PER_KIND, seed: int = SEED) -> list[list[str]]:
    """n argument vectors for the lock/claim/gate/validate/workflow commands."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        cmd = list(rng.choice(LOCK_CMDS * 3 + CLAIM_CMDS * 2 + OTHER_CMDS))
        args = cmd + [_value(rng) for _ in range(rng.randrange(0, 3))]
        for _ in range(rng.randrange(0, 4)):
            opt = rng.choice(OPTIONS)
            args += [opt] if opt in ("--json", "--shared", "--no-pid", "--strict") else [opt, _value(rng)]
        if cmd[0] == "lock" and "--wait" in args:
            args[args.index("--wait") + 1] = rng.choice(["0", "-1", "nan", "1e309", "0.0"])
        out.append(args)
    return out


EVENTS = ["PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart", "Stop", "PreCompact",
          "SessionEnd", "Notification", "SubagentStop"]
TOOLS = ["Edit", "Write", "MultiEdit", "NotebookEdit", "Read", "Bash", "Glob", "Grep", "Task", "WebFetch",
         "", 7]


def _junk(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 3 or r < 0.35:
        return rng.choice([None, True, False, 0, -1, 1.5, 10**30, float("1e308"), "", "x" * 3000,
                           rng.choice(TEXTS), rng.choice(NUMBERS)])
    if r < 0.65:
        return [_junk(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    return {rng.choice(["a", "file_path", "command", "cwd", "session_id", ""]): _junk(rng, depth + 1)
            for _ in range(rng.randrange(0, 4))}


def hook_stdins(root: str, n: int = PER_KIND, seed: int = SEED) -> list[tuple[str, bytes]]:
    """(event, stdin bytes) for every event: broken JSON, wrong types, odd paths, huge values."""
    rng = random.Random(seed + 1)
    out = []
    for i in range(n):
        event = EVENTS[i % len(EVENTS)]
        r = rng.random()
        if r < 0.15:
            data = rng.choice([b"", b" ", b"{", b"[]", b"null", b"42", b'"x"', b"{\"a\":", b"\xff\xfe",
                               b"{}" * 3, b"\x00{}", b"{" * 5000 + b"}" * 5000])
        else:
            payload: dict[str, Any] = {"session_id": rng.choice(["s-1", "", "../x", 5, None, "x" * 400]),
                                       "cwd": rng.choice([root, root + "/src", "/", "", "relative", 3, None,
                                                          root + "/" + "d" * 300]),
                                       "hook_event_name": rng.choice([event, event, event.lower(),
                                                                      "Bogus", 1]),
                                       "transcript_path": rng.choice([None, "", "/nonexistent", root, 9])}
            tool = rng.choice(TOOLS)
            payload["tool_name"] = tool
            payload["tool_input"] = rng.choice([
                {"file_path": rng.choice([root + "/src/a.py", root + "/" + rng.choice(TEXTS),
                                          rng.choice(TEXTS), "/etc/passwd", 12, None, [root]]),
                 "content": _junk(rng)},
                {"command": rng.choice(["ls", "rm -rf /", "cat locks/x.yml > locks/y.yml", rng.choice(TEXTS),
                                        "echo " + "a" * 5000, 3, None])},
                {"edits": _junk(rng), "notebook_path": _junk(rng)},
                _junk(rng), None, "text", []])
            if rng.random() < 0.3:
                key = rng.choice(["prompt", "tool_response", "source", "message", "stop_hook_active"])
                payload[key] = _junk(rng)
            if rng.random() < 0.1:
                del payload["hook_event_name"]
            data = json.dumps(payload).encode()
        out.append((event, data))
    return out


def bus_messages(n: int = PER_KIND, seed: int = SEED) -> list[tuple[Any, Any]]:
    """(channel, message) pairs: bad channel names and message bodies JSON may or may not carry."""
    rng = random.Random(seed + 2)
    channels = ["nika:goals", "", " ", "a" * 300, "bad\nname", "nika:" + "é", 5, None, "ok-channel", "x:y:z",
                "../etc", "*"]
    out = []
    for _ in range(n):
        body = rng.choice([_junk(rng), {"type": rng.choice(TEXTS)}, {"k": float("nan")}, {"k": float("inf")},
                           {"deep": json.loads("[" * 200 + "]" * 200)}, {"big": "z" * 200_000},
                           {1: "int key"}, {"set": {1, 2}}, {"bytes": b"\xff"}, "not a dict", None])
        out.append((rng.choice(channels), body))
    return out
