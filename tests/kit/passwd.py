"""A passwd database of one's own, through nss_wrapper (a preloaded libc NSS module, apt package
libnss-wrapper): the processes started with `passwd_env` see a home of their own, the way a second Unix
account would. The operator's key folder comes from the passwd database, never from a variable
(state/operator_home.py), so this is how the suite (tests/kit/fixtures.py::operator_home) and the
benches (bench/isolation.py) keep operator keys out of the real ~/.config/nika-brain. This is the
harness's, not a nika-brain knob. No pytest here: the benches import it too."""
from __future__ import annotations

import os
from pathlib import Path

NSS_WRAPPER = "libnss_wrapper.so"
NSS_PATHS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")
NSS_VARS = ("LD_PRELOAD", "NSS_WRAPPER_PASSWD", "NSS_WRAPPER_GROUP")
MISSING = ("libnss-wrapper is not installed (apt-get install libnss-wrapper): it is needed to keep "
           "operator keys out of the real ~/.config/nika-brain")


def nss_wrapper_installed() -> bool:
    return any(os.path.isfile(os.path.join(d, NSS_WRAPPER)) for d in NSS_PATHS)


def passwd_env(folder: Path, home: Path) -> dict[str, str]:
    """Variables that give the processes started with them a passwd home of `home`."""
    import grp
    import pwd
    folder.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    me = pwd.getpwuid(os.getuid())
    (folder / "passwd").write_text(f"{me.pw_name}:x:{me.pw_uid}:{me.pw_gid}::{home}:{me.pw_shell}\n")
    try:
        gname = grp.getgrgid(me.pw_gid).gr_name
    except KeyError:
        gname = me.pw_name
    (folder / "group").write_text(f"{gname}:x:{me.pw_gid}:\n")
    return {"LD_PRELOAD": NSS_WRAPPER, "NSS_WRAPPER_PASSWD": str(folder / "passwd"),
            "NSS_WRAPPER_GROUP": str(folder / "group")}
