"""The operator's authority: a per-brain signing key that agent sessions cannot read.

Deciding a gate, resetting a circuit breaker, releasing or overriding another owner's lock and
(federation) approving a spawn proposal are the operator's decisions. An environment variable an
agent can unset, or a regex over its commands, cannot tell the operator from an agent; what can is
a file the agent cannot read. So each brain has an Ed25519 key pair in the operator's config folder,
outside the brain:

    $NIKA_OPERATOR_DIR (default $XDG_CONFIG_HOME/nika-brain, else ~/.config/nika-brain)
        private/<brain-id>.key    0600, in a 0700 folder: the sandbox's denyRead covers private/
        <brain-id>.pub            readable by anyone, writable only by the operator

`sign()` needs the private key, so only the operator's own processes can sign; `verify()` needs only
the public key, so the orchestrator checks every decision it reads, even inside an agent's sandbox
(a gate file edited by hand to say "approved" carries no valid signature: it is invalid, not
approved). Claude Code's OS sandbox (`nika-brain claude install`) denies agent sessions the
`private/` folder and every write outside the brain; where the sandbox is off, only the hook's
tripwire stands between an agent and the key, and `nika-brain doctor` says so.

The pull-request review is the other authority (its token is not in an agent's environment).

`sign(brain, kind, fields)` / `verify(brain, kind, fields, signature)` are the whole API; any
record kind ("gate", "breaker-reset", "lock-override", "spawn") uses them. The `cryptography`
package is imported only when signing or verifying, never on the hook path.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nika_brain.errors import BrainError, Refused

ENV_DIR = "NIKA_OPERATOR_DIR"


def operator_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get(ENV_DIR):
        return Path(env[ENV_DIR]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"),
                                                      ".config")
    return Path(base) / "nika-brain"


def private_dir(env: Mapping[str, str] | None = None) -> Path:
    """The folder agent sessions are denied (sandbox denyRead, Read deny rule, hook)."""
    return operator_dir(env) / "private"


def brain_id(root: Path | str) -> str:
    """Stable per brain folder on this machine: its name and a hash of its real path."""
    real = os.path.realpath(str(root))
    return f"{os.path.basename(real) or 'brain'}-{hashlib.sha256(real.encode()).hexdigest()[:12]}"


def key_paths(root: Path | str, env: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    bid = brain_id(_root(root))
    return private_dir(env) / f"{bid}.key", operator_dir(env) / f"{bid}.pub"


def _root(brain: Any) -> Path:
    # A Brain, or a folder (a Path has a `.root` of its own: "/", so test the type, not the attribute).
    # A linked worktree of the brain (a theme branch checkout) is the same brain: the same key.
    from nika_brain.brain import _main_worktree
    root = Path(brain) if isinstance(brain, (str, os.PathLike)) else Path(brain.root)
    return _main_worktree(root)


def _refused(what: str, why: str) -> Refused:
    return Refused(f"refused: {what} needs the operator's authority, and {why}. A human runs "
                      "this command in their own terminal (agent sessions are denied the operator "
                   "key)")


def ensure_key(brain: Any) -> Path:
    """Create the brain's key pair if it has none; return the public key path. Idempotent."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    key, pub = key_paths(_root(brain))
    if key.is_file() and pub.is_file():
        return pub
    try:
        key.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(key.parent.parent, 0o700)
        os.chmod(key.parent, 0o700)
        if key.is_file():
            seed = bytes.fromhex(key.read_text().strip())
        else:
            seed = os.urandom(32)
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(seed.hex() + "\n")
        raw = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()
        tmp = pub.with_suffix(f".pub.{os.getpid()}.tmp")
        tmp.write_text(raw.hex() + "\n")
        os.replace(tmp, pub)
    except (OSError, ValueError) as exc:
        raise _refused("creating the operator key",
                       f"{key} cannot be written here ({getattr(exc, 'strerror', None) or exc})") from exc
    return pub


def available(brain: Any) -> bool:
    """Whether this process can sign (reads the private key); never raises."""
    try:
        _private(brain)
        return True
    except BrainError:
        return False


def _private(brain: Any):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    key, _ = key_paths(_root(brain))
    try:
        seed = bytes.fromhex(key.read_text(encoding="ascii").strip())
        return Ed25519PrivateKey.from_private_bytes(seed)
    except FileNotFoundError:
        raise _refused("this", f"there is no operator key at {key} (a human creates it with "
                               "`nika-brain operator init`)") from None
    except (OSError, ValueError, UnicodeError) as exc:
        raise _refused("this", f"the operator key {key} cannot be read here "
                               f"({getattr(exc, 'strerror', None) or exc})") from None


def _signer(brain: Any):
    key, pub = key_paths(_root(brain))
    if not pub.is_file() and not key.exists():
        ensure_key(brain)  # the operator's first decision on this brain (install creates it too)
    return _private(brain)


def _public(brain: Any):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    _, pub = key_paths(_root(brain))
    try:
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(pub.read_text().strip()))
    except (OSError, ValueError, UnicodeError):
        return None


def payload(brain: Any, kind: str, fields: Mapping[str, Any]) -> bytes:
    """What is signed: the brain, the record kind and its fields, as canonical JSON."""
    body = {"brain": brain_id(_root(brain)), "kind": kind,
            "fields": {k: v for k, v in fields.items() if k != "signature"}}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str,
                      ensure_ascii=False).encode()


def sign(brain: Any, kind: str, fields: Mapping[str, Any], *, what: str | None = None) -> str:
    """The operator's signature (hex) over a record; refused where the private key is not readable."""
    try:
        private = _signer(brain)
    except BrainError as exc:
        if what:
            raise Refused(exc.message.replace("refused: this", f"refused: {what}", 1)) from None
        raise
    return private.sign(payload(brain, kind, fields)).hex()


def verify(brain: Any, kind: str, fields: Mapping[str, Any], signature: str | None) -> bool:
    """True when `signature` is the operator's over exactly these fields of this brain."""
    if not signature or not isinstance(signature, str):
        return False
    public = _public(brain)
    if public is None:
        return False
    from cryptography.exceptions import InvalidSignature
    try:
        public.verify(bytes.fromhex(signature), payload(brain, kind, fields))
        return True
    except (InvalidSignature, ValueError):  # ValueError: not even hex
        return False


def require(brain: Any, what: str) -> None:
    """Refuse unless this process holds the operator's authority (can read the private key)."""
    try:
        _signer(brain)
    except BrainError as exc:
        raise Refused(exc.message.replace("refused: this", f"refused: {what}", 1)) from None


def status(brain: Any) -> dict[str, Any]:
    """For `doctor`: where the key is and whether this process can use it."""
    key, pub = key_paths(_root(brain))
    return {"brain_id": brain_id(_root(brain)), "private": str(key), "public": str(pub),
            "public_present": pub.is_file(), "can_sign": available(brain)}
