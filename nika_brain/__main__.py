"""Entry point. The hook paths (Claude Code hooks, git hooks, status line) are dispatched before the
CLI framework is imported: they run on every tool call of every agent and must stay light."""
from __future__ import annotations

import os
import sys


def undecodable(argv: list[str]) -> int | None:
    """The 1-based position of the first argument holding bytes that are not UTF-8 (Python hands them
    over as lone surrogates, which no file, journal or bus message can store), or None."""
    for i, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return i
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    bad = undecodable(argv)
    if bad is not None:
        print(f"nika-brain: argument {bad} is not valid UTF-8 (nika-brain's names, messages and paths are "
              "UTF-8 text)", file=sys.stderr)
        return 1
    if argv[:1] == ["hook"]:
        from nika_brain.hooks.claude import main as hook_main
        return hook_main(argv[1:])
    if argv[:2] == ["claude", "statusline"]:
        from nika_brain.hooks.statusline import statusline_main
        return statusline_main()
    if argv[:1] == ["githook"]:
        from nika_brain.hooks.git import main as githook_main
        return githook_main(argv[1:])
    if argv[:1] in (["lock"], ["claim"], ["index"]) and os.environ.get("NIKA_NO_FAST_CLI") != "1":
        from nika_brain.cli import fast  # lock/claim/index in loops: no CLI framework when the call is plain
        code = fast.run(argv)
        if code is not None:
            return code
    if (argv[:1] == ["workflow-launch"] or argv[:2] == ["workflow", "resume"]) \
            and os.environ.get("NIKA_NO_FAST_CLI") != "1":
        from nika_brain.cli import launchfast  # a swarm run is one process: no CLI framework for a plain call
        code = launchfast.run(argv)
        if code is not None:
            return code
    if argv[:1] == ["ask"] and os.environ.get("NIKA_NO_FAST_CLI") != "1":
        from nika_brain.cli import askfast  # a client of the daemon: no CLI framework for a plain call
        code = askfast.run(argv)
        if code is not None:
            return code
    from nika_brain.cli import run
    return run(argv)


def _exit_now(code: int) -> None:
    """End a hook process without the interpreter's teardown (module cleanup, a last garbage
    collection): about a tenth of a hook's CPU, paid on every tool call. Nothing is left to finish:
    the hook closed its files and wrote its answer; no atexit handler and no non-daemon thread run on
    the hook paths. The output streams are flushed first."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # a closed pipe: the answer could not be delivered anyway
    os._exit(code)


if __name__ == "__main__":
    code = main()
    if sys.argv[1:2] == ["hook"]:
        _exit_now(code)
    sys.exit(code)
