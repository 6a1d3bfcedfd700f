"""A REAL SMALL SATELLITE PROGRAM, standing in for Claude Code in swarm-mode tests. It is not Claude.

The orchestrator runs it as its `satellite_command`, e.g. in nika-brain.yml:

    satellite_command: ["<python>", "<repo>/tests/satellite_program.py", "{claim}", "{brief_file}"]

It does what a satellite must: reads its claim and brief, works inside its scope in the theme
worktree, and reports. What it reports is read from instructions in the step's story angle:

    result=ok|partial|failed   the result to report (default ok)
    self-close                 close its own claim with `python -m nika_brain claim close` instead
                               of printing a JSON result line
    fail                       exit 3 with no JSON result at all (a crashed satellite)
    sleep=SECONDS              sleep before reporting (to overlap with another workflow)
    noop                       write nothing (a satellite that does no work)
    try-gate                   try to approve every pending gate with the CLI, and record the refusal
    signal=NAME / await=NAME   rendezvous with another satellite: create NAME, or wait (60 s at most)
                               for NAME, in the folder $SATELLITE_RENDEZVOUS

Unless `noop`, it writes one file into its first scope (a folder scope gets `<claim>.txt`, a file
scope is overwritten) recording its claim, the instructions seen, NIKA_AGENT, and the outcome of
any gate attempt, so tests can check all of that in the merged result.

Run as `satellite_program.py --as-claude ARGS...` (behind an executable named `claude` on PATH) it
plays the default satellite command instead, `claude -p <brief> --output-format json ...`: it
records the argv it got and answers with Claude Code's headless JSON result object.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

KNOWN = ("result", "self-close", "fail", "sleep", "noop", "try-gate", "signal", "await")
AWAIT_LIMIT = 60.0
_WORD = re.compile(r"(?<![\w-])([a-z][a-z-]*)(?:=([^\s,;]+))?")


def section(brief: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", brief, re.M | re.S)
    return m.group(1).strip() if m else ""


def instructions(angle: str) -> dict[str, str]:
    return {k: (v or "") for k, v in _WORD.findall(angle) if k in KNOWN}


def scopes(brief: str) -> list[str]:
    m = re.search(r"^Scope: (.*)$", brief, re.M)
    return re.findall(r"`([^`]+)`", m.group(1)) if m else []


def nika(*args: str, brain: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nika_brain", *args], cwd=brain, capture_output=True,
                          text=True, timeout=120)


def try_gates(brain: Path) -> list[dict]:
    """An agent must not be able to approve a gate: try, and keep what the CLI answered."""
    listed = nika("gate", "list", "--status", "pending", "--json", brain=brain)
    attempts = []
    for g in json.loads(listed.stdout or "[]"):
        p = nika("gate", "approve", g["id"], brain=brain)
        attempts.append({"gate": g["id"], "exit": p.returncode, "said": p.stderr.strip()})
    return attempts


def rendezvous(path: Path) -> bool:
    deadline = time.monotonic() + AWAIT_LIMIT
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def as_claude(args: list[str]) -> int:
    """The default command's shape: -p <brief> --output-format json ... ; Claude's result object."""
    brief = args[args.index("-p") + 1]
    claim = os.environ["NIKA_CLAIM"]
    worktree = Path(os.environ["NIKA_WORKTREE"])
    scope = scopes(brief)[0]
    target = worktree / scope / f"{claim}.txt" if scope.endswith("/") else worktree / scope
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"argv": args, "cwd": os.getcwd(), "claim": claim,
                                  "nika_agent": os.environ.get("NIKA_AGENT"),
                                  "sandbox": os.environ.get("NIKA_SANDBOX")}, sort_keys=True) + "\n")
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                      "result": f"stand-in claude wrote {scope}", "session_id": "standin"}))
    return 0


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--as-claude"]:
        return as_claude(argv[2:])
    claim = os.environ.get("NIKA_CLAIM", "")
    if len(argv) < 3 or argv[1] != claim:
        print(f"satellite: claim argument {argv[1:2]} does not match NIKA_CLAIM={claim!r}", file=sys.stderr)
        return 2
    brain = Path(os.environ["NIKA_BRAIN_DIR"])
    worktree = Path(os.environ["NIKA_WORKTREE"])
    if Path.cwd().resolve() != worktree.resolve():
        print(f"satellite: started in {Path.cwd()}, not in the theme worktree {worktree}", file=sys.stderr)
        return 2
    brief = Path(argv[2]).read_text(encoding="utf-8")
    if f"Claim: `{claim}`" not in brief:
        print("satellite: the brief is not for my claim", file=sys.stderr)
        return 2
    todo = instructions(section(brief, "Story angle"))
    if "signal" in todo:
        (Path(os.environ["SATELLITE_RENDEZVOUS"]) / todo["signal"]).touch()
    if "await" in todo and not rendezvous(Path(os.environ["SATELLITE_RENDEZVOUS"]) / todo["await"]):
        print(f"satellite: {todo['await']} never came", file=sys.stderr)
        return 3
    if "sleep" in todo:
        time.sleep(float(todo["sleep"]))
    if "fail" in todo:
        print("satellite: failing on purpose (no result)", file=sys.stderr)
        return 3
    status = todo.get("result") or "ok"
    record = {"claim": claim, "instructions": todo, "nika_agent": os.environ.get("NIKA_AGENT")}
    if "try-gate" in todo:
        record["gate_attempts"] = try_gates(brain)
    if "noop" not in todo:
        scope = scopes(brief)[0]
        target = worktree / scope / f"{claim}.txt" if scope.endswith("/") else worktree / scope
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
    summary = f"satellite wrote {scope}" if "noop" not in todo else "satellite did nothing"
    if "self-close" in todo:
        p = nika("claim", "close", claim, "--status", status, "--summary", f"{summary} (self-closed)",
                 brain=brain)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        return p.returncode
    print("satellite: working notes that are not the result")
    print(json.dumps({"status": status, "summary": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
