"""Every bench runs with an operator home of its own, removed when it ends: the brains a bench makes
(`nika-brain init`, in process or not) write their operator keys there, never under the real
~/.config/nika-brain/private. The same passwd database of one's own as the suite's `operator_home`
fixture (tests/kit/passwd.py, nss_wrapper): the bench's children get it through the environment, the
bench process itself in code.

    if __name__ == "__main__":
        with own_operator_home():
            sys.exit(main())

Both sides of a paired measurement (`python -c pass` and the measured command) start with the wrapper
preloaded, so a ratio compares like with like.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.kit.passwd import MISSING, NSS_VARS, nss_wrapper_installed, passwd_env  # noqa: E402


@contextmanager
def own_operator_home() -> Iterator[dict[str, str]]:
    """Give this process and every process it starts (os.environ) a passwd home in a temporary folder;
    yields the variables set; on the way out the folder is removed and the environment put back."""
    if not nss_wrapper_installed():
        raise SystemExit(MISSING)
    from nika_brain.state import operator_home
    base = Path(tempfile.mkdtemp(prefix="nika-bench-home-"))
    home = base / "home"
    saved = {name: os.environ.get(name) for name in NSS_VARS}
    variables = passwd_env(base / "nss", home)
    os.environ.update(variables)
    real = operator_home.passwd_home
    operator_home.passwd_home = lambda: str(home)
    try:
        yield variables
    finally:
        operator_home.passwd_home = real
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(base, ignore_errors=True)
