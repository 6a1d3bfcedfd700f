"""A STAND-IN AGENT PROGRAM for the federation tests. It is not Claude Code and has no model.

It behaves like Claude Code where nika-brain can tell: it reads the hooks from `.claude/settings.json`
in the folder it starts in and runs their commands with Claude Code's JSON on stdin (SessionStart at
start, UserPromptSubmit for each prompt, Stop after each answer, SessionEnd at exit), and it writes a
transcript (JSONL, user and assistant lines, with usage) whose path it gives the hooks. So a test sees
delivery the way nika-brain sees it from the real agent: by a hook event, never by reading a screen.

Interactive (tmux runtime): reads prompts from its terminal, one a line, until EOF.
Headless (headless runtime): `standin_agent.py -p PROMPT --output-format json (--session-id|--resume) ID`
prints Claude Code's headless JSON result object.

A UserPromptSubmit hook answering `decision: block` erases the prompt (no turn, answer `blocked:
<reason>`), as Claude Code does. Words in a prompt are instructions: `alloc=MB` allocates and touches MB
megabytes (to cross a memory
limit), `crash` exits 3 at once, `sleep=S` waits S seconds before answering, `env=NAME` says whether NAME
is in its environment (never its value), `sh=B64` runs the base64-encoded shell command and adds its
exit code and output (the sandbox tests' attacks). The answer is
`stand-in answer to: <prompt>` followed by any hook context it was given (directives).

`--steer` (interactive): like Claude Code 2.1, a prompt typed while a turn runs is taken at once
(its UserPromptSubmit fires) and joins that turn; the turn's one answer (at its one Stop) is then
`stand-in answer to: <first> + <joined> ...`.
"""
from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

USED_PER_TURN = 2000


def hooks(event: str) -> list[str]:
    try:
        data = json.loads(Path(".claude/settings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    out = []
    for group in data.get("hooks", {}).get(event, []):
        for h in group.get("hooks", []):
            if h.get("type") == "command":
                out.append(h["command"])
    return out


ANSWERS: list[dict] = []   # the hooks' JSON answers of the last run_hooks call


def run_hooks(event: str, payload: dict) -> str:
    """Run the event's hook commands; return their additionalContext, joined (answers in ANSWERS)."""
    ctx = []
    ANSWERS.clear()
    for cmd in hooks(event):
        p = subprocess.run(["sh", "-c", cmd], input=json.dumps({"hook_event_name": event, **payload}),
                           capture_output=True, text=True, timeout=60)
        try:
            ans = json.loads(p.stdout) if p.stdout.strip() else {}
        except ValueError:
            ans = {}
        ANSWERS.append(ans)
        extra = (ans.get("hookSpecificOutput") or {}).get("additionalContext")
        if extra:
            ctx.append(extra)
    return "\n".join(ctx)


class Session:
    def __init__(self, sid: str, source: str):
        self.sid = sid
        tdir = Path(os.environ.get("STANDIN_TRANSCRIPTS", ".transcripts"))
        tdir.mkdir(parents=True, exist_ok=True)
        self.transcript = str((tdir / f"{sid}.jsonl").resolve())
        self.turns = sum(1 for _ in open(self.transcript)) // 2 if os.path.exists(self.transcript) else 0
        self.base = {"session_id": sid, "transcript_path": self.transcript, "cwd": os.getcwd()}
        self.context = run_hooks("SessionStart", {**self.base, "source": source})
        self.inbox: queue.Queue[str] | None = None   # --steer: lines typed while a turn runs
        self.joined: list[str] = []

    def steer(self) -> None:
        """Take what was typed meanwhile into the running turn (its UserPromptSubmit fires now)."""
        while self.inbox is not None:
            try:
                line = self.inbox.get_nowait().strip()
            except queue.Empty:
                return
            if line == "\0":   # EOF: the session ends after this turn
                self.inbox.put(line)
                return
            if line:
                run_hooks("UserPromptSubmit", {**self.base, "prompt": line})
                self.write({"type": "user", "sessionId": self.sid,
                            "message": {"role": "user", "content": line}})
                self.joined.append(line)

    def work(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.steer()
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    def write(self, obj: dict) -> None:
        with open(self.transcript, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(obj) + "\n")

    def turn(self, prompt: str) -> str:
        extra = run_hooks("UserPromptSubmit", {**self.base, "prompt": prompt})
        blocked = next((a.get("reason") for a in ANSWERS if a.get("decision") == "block"), None)
        if blocked:  # like Claude Code: the prompt is erased, the reason shown to the user
            return f"blocked: {blocked}"
        self.write({"type": "user", "sessionId": self.sid, "message": {"role": "user", "content": prompt}})
        words = dict(re.findall(r"\b(alloc|sleep)=(\d+(?:\.\d+)?)", prompt))
        if re.search(r"\bcrash\b", prompt):
            sys.exit(3)
        if "alloc" in words:
            hog = bytearray(int(float(words["alloc"]) * (1 << 20)))
            for i in range(0, len(hog), 4096):
                hog[i] = 1
        self.joined = []
        if "sleep" in words:
            self.work(float(words["sleep"]))
        self.turns += 1
        context = "\n".join(x for x in (self.context, extra) if x)
        self.context = ""
        self.steer()
        answer = f"stand-in answer to: {' + '.join([prompt, *self.joined])}"
        for name in re.findall(r"\benv=([A-Za-z_][A-Za-z0-9_]*)", prompt):
            answer += f" [env {name}={'present' if name in os.environ else 'absent'}]"
        for b64 in re.findall(r"\bsh=([A-Za-z0-9+/=]+)", prompt):
            import base64
            p = subprocess.Popen(["sh", "-c", base64.b64decode(b64).decode()], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            while p.poll() is None:   # a running command: what is typed meanwhile joins the turn
                self.steer()
                time.sleep(0.05)
            self.steer()
            out = (p.stdout.read() if p.stdout else "").strip().replace("\n", " | ")[:2000]
            answer += f" [sh rc={p.returncode} out={out}]"
        answer += f"\n[context]\n{context}" if context else ""
        used = USED_PER_TURN * self.turns
        self.write({"type": "assistant", "sessionId": self.sid, "message": {
            "id": f"msg_{uuid.uuid4().hex[:12]}", "role": "assistant", "model": "stand-in",
            "content": [{"type": "text", "text": answer}],
            "usage": {"input_tokens": used, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 10}}})
        run_hooks("Stop", {**self.base, "stop_hook_active": False})
        return answer


def interactive(steer: bool = False) -> int:
    s = Session(str(uuid.uuid4()), "startup")
    print(f"stand-in agent ready (session {s.sid})", flush=True)
    lines: Iterable[str] = sys.stdin
    if steer:
        inbox: queue.Queue[str] = queue.Queue()
        s.inbox = inbox

        def read() -> None:
            for x in sys.stdin:
                inbox.put(x)
            inbox.put("\0")   # EOF

        threading.Thread(target=read, daemon=True).start()

        def typed() -> Iterator[str]:
            while (x := inbox.get()) != "\0":
                yield x
        lines = typed()
    for line in lines:
        prompt = line.strip()
        if prompt:
            print(s.turn(prompt).splitlines()[0], flush=True)
    run_hooks("SessionEnd", {**s.base, "reason": "prompt_input_exit"})
    return 0


def headless(argv: list[str]) -> int:
    args = dict(zip(argv[::2], argv[1::2], strict=False))
    sid = args.get("--session-id") or args.get("--resume") or str(uuid.uuid4())
    s = Session(sid, "resume" if "--resume" in args else "startup")
    answer = s.turn(args["-p"])
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": answer,
                      "session_id": sid, "num_turns": 1}))
    run_hooks("SessionEnd", {**s.base, "reason": "other"})
    return 0


if __name__ == "__main__":
    sys.exit(headless(sys.argv[1:]) if "-p" in sys.argv[1:] else interactive("--steer" in sys.argv[1:]))
