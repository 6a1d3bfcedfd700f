"""Doctrines given and kept (issue 20, item 4): the seed's pair, an R&D kernel that tolerates writes
outside its scope and a client kernel that wants a human to validate each one, spawned for real; their
hooks (the real `nika-brain hook`, as Claude Code runs it) answer the same tool calls differently,
and each session is told its doctrine at start."""
from __future__ import annotations

import json
import re

import yaml

from nika_brain.federation.kernels import doctrine
from nika_brain.state import kernels

from .fedkit import fbrain  # noqa: F401

RND = {"id": "rnd-tolerant", "title": "R&D: aggressive exploration is welcome", "status": "active",
       "kernels": ["rnd"], "invariants": {"external_writes": "allowed", "network": "on"}}
CLIENT = {"id": "client-strict", "title": "Dossier client", "text": "validation humaine systématique",
          "status": "active", "kernels": [],
          "invariants": {"external_writes": "validated", "network": "off", "tools_denied": ["NotebookEdit"]}}


def _pair(brain, cli):
    folder = brain.root / "doctrines"
    folder.mkdir(exist_ok=True)
    for d in (RND, CLIENT):
        (folder / f"{d['id']}.yml").write_text(yaml.safe_dump(d, allow_unicode=True))
    rnd = cli("kernel", "spawn", "Explore new backup tools", "--id", "rnd", "--runtime", "headless")
    client = cli("kernel", "spawn", "Client Pulsa accounts", "--id", "client", "--runtime", "headless",
                 "--doctrine", "client-strict")
    assert rnd.returncode == 0 and client.returncode == 0, rnd.stderr + client.stderr
    assert "doctrine (rnd-tolerant)" in rnd.stdout and "tolerated" in rnd.stdout, rnd.stdout
    assert "waits for a human's approval" in client.stdout and "no network" in client.stdout, client.stdout


def _pre(cli, brain, kid: str, tool: str, **tool_input) -> dict:
    event = {"hook_event_name": "PreToolUse", "session_id": "11111111-2222-3333-4444-555555555555",
             "cwd": str(kernels.kernel_dir(brain, kid)), "tool_name": tool, "tool_input": tool_input}
    p = cli("hook", "PreToolUse", input=json.dumps(event), cwd=kernels.kernel_dir(brain, kid),
            env={"NIKA_KERNEL_ID": kid})
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    out = json.loads(p.stdout) if p.stdout.strip() else {}
    return out.get("hookSpecificOutput") or {}


def test_rnd_and_client_doctrines_behave_differently(fbrain, cli):  # noqa: F811
    brain = fbrain
    _pair(brain, cli)
    outside = str(brain.root / "docs" / "report.md")
    calls = {
        "write outside its folder": ("Write", {"file_path": outside, "content": "x"}),
        "edit outside its folder": ("Edit", {"file_path": outside, "old_string": "a", "new_string": "b"}),
        "fetch a web page": ("WebFetch", {"url": "https://example.org", "prompt": "read"}),
        "curl from the shell": ("Bash", {"command": "curl -s https://example.org"}),
        "a tool its doctrine denies": ("NotebookEdit", {"notebook_path": "nb.ipynb", "new_source": "x"}),
    }
    got = {kid: {what: _pre(cli, brain, kid, tool, **args).get("permissionDecision")
                 for what, (tool, args) in calls.items()} for kid in ("rnd", "client")}
    assert got["rnd"] == dict.fromkeys(calls), got["rnd"]   # the R&D kernel: nothing in the way
    assert got["client"] == {"write outside its folder": "ask", "edit outside its folder": "ask",
                             "fetch a web page": "deny", "curl from the shell": "deny",
                             "a tool its doctrine denies": "deny"}, got["client"]
    why = _pre(cli, brain, "client", "Write", file_path=outside, content="x")["permissionDecisionReason"]
    assert "client-strict" in why and "docs/report.md" in why and "human" in why, why
    # inside its own folder, the client kernel writes freely
    own = str(kernels.kernel_dir(brain, "client") / "ledger.md")
    assert _pre(cli, brain, "client", "Write", file_path=own, content="x").get("permissionDecision") is None


def test_each_session_is_told_its_doctrine_at_start(fbrain, cli):  # noqa: F811
    brain = fbrain
    _pair(brain, cli)
    told = {}
    for kid in ("rnd", "client"):
        ans = cli("kernel", "invoke", kid, "hello", "--wait")
        assert ans.returncode == 0, ans.stderr
        told[kid] = ans.stdout   # the stand-in agent repeats the context its hooks gave it
    assert "validation humaine systématique" in told["client"] and "waits for a human" in told["client"]
    assert "aggressive exploration" in told["rnd"] and "tolerated" in told["rnd"]
    assert "validation humaine" not in told["rnd"]


def test_free_text_is_told_and_a_doctrine_change_applies_at_restart(fbrain, cli):  # noqa: F811
    brain = fbrain
    sp = cli("kernel", "spawn", "Watch tenders", "--id", "free", "--runtime", "headless",
             "--doctrine", "be thorough")
    assert sp.returncode == 0 and "enforced: nothing (free text" in sp.stdout, sp.stdout
    assert doctrine.for_hook(brain, "free") == doctrine.Doctrine(text="be thorough", sources=("kernel.yml",))
    folder = brain.root / "doctrines"
    folder.mkdir(exist_ok=True)
    (folder / "all-strict.yml").write_text(yaml.safe_dump({**CLIENT, "id": "all-strict", "kernels": ["*"]}))
    assert doctrine.for_hook(brain, "free").external_writes == "allowed"   # the start's snapshot holds
    assert cli("kernel", "restart", "free").returncode == 0
    assert doctrine.for_hook(brain, "free").external_writes == "ask"
    (folder / "all-strict.yml").write_text("id: all-strict\ninvariants: []\n")
    bad = cli("kernel", "restart", "free")
    assert bad.returncode != 0 and "needs invariants" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_a_strict_kernels_sandbox_refuses_any_process_writing_outside_its_scope(fbrain, cli):  # noqa: F811
    """`external_writes: ask` is not only what the hook can read: in the client kernel's sandbox the brain
    is read-only outside its folder and scope, so an interpreter, a script or perl writing outside fail
    (EROFS) and nothing reaches the host; the R&D kernel's same commands write. The hook asks a human
    for a shell command it cannot prove stays in scope, for the strict kernel only."""
    import dataclasses

    from nika_brain.federation.kernels import sandbox

    from .test_kernels_sandbox import _sh
    brain = fbrain
    if sandbox.unavailable():
        raise AssertionError(f"bubblewrap must run here: {sandbox.unavailable()}")
    _pair(brain, cli)
    k = kernels.load_kernel(brain, "client")
    assert k.sandbox == "bwrap" and kernels.load_kernel(brain, "rnd").sandbox == "bwrap"
    kernels.save_kernel(brain, dataclasses.replace(k, scope=("docs/client/*",)))
    assert cli("kernel", "restart", "client").returncode == 0
    (brain.root / "docs").mkdir(exist_ok=True)
    writes = {
        "python3 -c": "python3 -c \"open('{p}','w').write('x')\"",
        "node -e": "node -e \"require('fs').writeFileSync('{p}','x')\"",
        "perl -e": "perl -e \"open(F,'>','{p}') or die \\$!; print F 'x'; close(F) or die \\$!\"",
        "a script": "printf '#!/bin/sh\\necho x > \"$1\"\\n' > w.sh && chmod +x w.sh && ./w.sh '{p}'",
        "dd": "dd if=/dev/zero of='{p}' bs=1 count=1",
    }
    got: dict[str, dict[str, tuple[int, bool]]] = {}
    for kid in ("rnd", "client"):
        # the five writers, each its own process, in one turn of the kernel's agent: "<<i:rc>>out" each
        script = "\n".join(f"o=$( ( {cmd.format(p=brain.root / 'docs' / f'{kid}-{i}.txt')} ) 2>&1 ); r=$?; "
                           f"printf '<<{i}:%d>>%s\\n' \"$r\" \"$(printf %s \"$o\" | head -c 300)\""
                           for i, cmd in enumerate(writes.values()))
        _, out = _sh(brain, kid, script)
        said = {int(i): (int(rc), text) for i, rc, text in re.findall(r"<<(\d+):(-?\d+)>>(.*?)(?= \| <<\d+:|$)", out)}
        assert sorted(said) == list(range(len(writes))), out
        got[kid] = {}
        for i, what in enumerate(writes):
            rc, text = said[i]
            got[kid][what] = (rc, (brain.root / "docs" / f"{kid}-{i}.txt").exists())
            if kid == "client":
                assert "Read-only file system" in text or "EROFS" in text, (what, text)
    assert all(rc == 0 and there for rc, there in got["rnd"].values()), got["rnd"]
    assert all(rc != 0 and not there for rc, there in got["client"].values()), got["client"]
    # the client kernel still writes in its folder and in its scope, whatever the process
    inside = brain.root / "docs" / "client" / "ledger.txt"
    rc, out = _sh(brain, "client", f"python3 -c \"open('{inside}','w').write('ok')\" && "
                  "python3 -c \"open('mine.txt','w').write('ok')\"")
    assert rc == 0 and inside.read_text() == "ok", out
    assert (kernels.kernel_dir(brain, "client") / "mine.txt").read_text() == "ok"
    # the hook: what it cannot prove in scope is asked, for the strict kernel only
    outside = brain.root / "docs" / "x.txt"
    shell = {
        "an interpreter": f"python3 -c \"open('{outside}','w')\"",
        "node": "node -e 1",
        "a script": "./w.sh",
        "a redirection outside": f"echo x > {outside}",
        "a reader": "ls -la ../.. | grep docs",
        "a redirection in its folder": "echo x > notes.md",
        "a copy into its scope": f"cp notes.md {brain.root}/docs/client/n.md",
    }
    asked = {kid: {what: _pre(cli, brain, kid, "Bash", command=cmd).get("permissionDecision")
                   for what, cmd in shell.items()} for kid in ("rnd", "client")}
    assert asked["rnd"] == dict.fromkeys(shell), asked["rnd"]
    assert asked["client"] == {**dict.fromkeys(list(shell)[:4], "ask"), **dict.fromkeys(list(shell)[4:])}, \
        asked["client"]
    why = _pre(cli, brain, "client", "Bash", command="perl -e 1")["permissionDecisionReason"]
    assert "perl" in why and "human" in why and "client-strict" in why, why
