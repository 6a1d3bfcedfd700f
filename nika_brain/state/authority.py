"""The operator's authority: a per-brain signing key that agent sessions cannot reach, and a pinned
public key that decides what is authentic.

Deciding a gate, resetting a circuit breaker, releasing or overriding another owner's lock,
(federation) approving a spawn, granting vault access, governing kernels and posting to the
orchestrator's inbox are the operator's decisions. An environment variable an agent can set, or a
file or message it can write, cannot tell the operator from an agent. So:

- The key pair lives in the operator's own config folder, found from the passwd database (the
  user's home as the system records it), never from HOME, XDG_CONFIG_HOME or any variable:

      <passwd home>/.config/nika-brain/private/<brain-id>.key   0600, in a 0700 folder
      <passwd home>/.config/nika-brain/<brain-id>.pub           the operator's pin for this brain

- The brain pins the public key too: `operator.pub` at its root, committed (`operator show`).
- `verify()` trusts only the pinned key: the operator's own pin when this machine has it (and then
  the brain's `operator.pub` must say the same, or nothing is authentic: someone rewrote it), else the
  brain's `operator.pub` as committed on HEAD (another machine, CI). A key an agent makes for itself
  signs nothing anyone trusts.
- Signing never creates a key: `nika-brain operator init` (or `init`, `claude install`, run by a human)
  does, and refuses in an agent session. `require()` proves the process holds the pinned private key.

Inside the sandboxes (Claude Code's, and the per-kernel one nika-brain starts) the private folder is
denied and `operator.pub` is not writable; where no sandbox runs, an agent runs as the operator's
user and the hook's tripwire is what stands in the way (README: "Authority: what each layer covers").

`sign(brain, kind, fields)` / `verify(brain, kind, fields, signature)` are the whole API; the record's
id is among its fields, so a signature replayed onto another id fails. The `cryptography` package is
imported only when signing or verifying, never on the hook path.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nika_brain.errors import BrainError, Refused
from nika_brain.state import operator_home

PIN_NAME = "operator.pub"   # the brain's pinned operator key, committed at its root


operator_dir = operator_home.operator_dir   # the operator's config folder (passwd home, not $HOME)


def private_dir() -> Path:
    """The folder agent sessions are denied (sandbox denyRead, Read deny rule, hook)."""
    return operator_dir() / "private"


def brain_id(root: Path | str) -> str:
    """Stable per brain folder on this machine: its name and a hash of its real path."""
    real = os.path.realpath(str(root))
    return f"{os.path.basename(real) or 'brain'}-{hashlib.sha256(real.encode()).hexdigest()[:12]}"


def key_paths(root: Path | str) -> tuple[Path, Path]:
    """(private key, the operator's own pin) of this brain."""
    bid = brain_id(_root(root))
    return private_dir() / f"{bid}.key", operator_dir() / f"{bid}.pub"


def pin_path(brain: Any) -> Path:
    return _root(brain) / PIN_NAME


def _root(brain: Any) -> Path:
    # A Brain, or a folder (a Path has a `.root` of its own: "/", so test the type, not the attribute).
    # A linked worktree of the brain (a theme branch checkout) is the same brain: the same key.
    from nika_brain.brain import _main_worktree
    root = Path(brain) if isinstance(brain, (str, os.PathLike)) else Path(brain.root)
    return _main_worktree(root)


def in_agent_session(env: Mapping[str, str] | None = None) -> bool:
    """A hint only (an agent can unset these): used to refuse early and clearly, never as authority."""
    env = os.environ if env is None else env
    return env.get("CLAUDECODE") == "1" or bool(env.get("NIKA_AGENT"))


def _refused(what: str, why: str) -> Refused:
    return Refused(f"refused: {what} needs the operator's authority, and {why}. A human runs "
                   "this command in their own terminal (agent sessions are denied the operator "
                   "key)")


def _read_hex(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="ascii").strip()
        bytes.fromhex(text)
    except (OSError, ValueError, UnicodeError):
        return None
    return text if len(text) == 64 else None


def _committed_pin(root: Path) -> str | None:
    """The brain's operator.pub as committed on HEAD (the working copy is not trusted)."""
    try:
        out = subprocess.run(["git", "-C", str(root), "show", f"HEAD:{PIN_NAME}"], capture_output=True,
                             text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip() if out.returncode == 0 else ""
    try:
        bytes.fromhex(text)
    except ValueError:
        return None
    return text if len(text) == 64 else None


def trusted_key(brain: Any) -> tuple[str | None, str]:
    """(the public key every decision is checked against, or None; where it comes from / why none)."""
    root = _root(brain)
    _, own = key_paths(root)
    mine, pinned = _read_hex(own), _read_hex(root / PIN_NAME)
    if mine is not None:
        if pinned is not None and pinned != mine:
            return None, (f"{root / PIN_NAME} differs from the operator's pin {own} (rewritten?): no "
                          "decision is authentic until a human restores it")
        return mine, f"the operator's pin {own}"
    committed = _committed_pin(root)
    if committed is not None:
        return committed, f"{PIN_NAME} as committed on HEAD"
    return None, "no operator key is pinned for this brain (a human runs `nika-brain operator init`)"


def create_key(brain: Any) -> Path:
    """Create the brain's key pair if it has none, pin it (operator's config and the brain's
    operator.pub); return the operator's pin path. Idempotent; refused in an agent session."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    if in_agent_session():
        raise _refused("creating the operator key", "this is an agent session")
    root = _root(brain)
    key, pub = key_paths(root)
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
        raw = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw().hex()
        pinned = _read_hex(root / PIN_NAME)
        if pinned is not None and pinned != raw:
            raise Refused(f"refused: {root / PIN_NAME} pins another operator's key; this machine's key "
                          f"({key}) would sign nothing this brain trusts. Restore {PIN_NAME} from git, or "
                          "have the brain's operator run this")
        for path in (pub, root / PIN_NAME):
            if _read_hex(path) != raw:
                tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                tmp.write_text(raw + "\n")
                os.replace(tmp, path)
    except (OSError, ValueError) as exc:
        raise _refused("creating the operator key",
                       f"{key} cannot be written here ({getattr(exc, 'strerror', None) or exc})") from exc
    return pub


ensure_key = create_key  # `claude install` and `init` call it by this name


def available(brain: Any) -> bool:
    """Whether this process can sign with the pinned key; never raises."""
    try:
        _signer(brain)
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
    """The private key, only when its public half is the key this brain trusts (never created here)."""
    private = _private(brain)
    trusted, why = trusted_key(brain)
    if trusted is None:
        raise _refused("this", why)
    if private.public_key().public_bytes_raw().hex() != trusted:
        raise _refused("this", f"this machine's key is not the one the brain trusts ({why})")
    return private


def _public(brain: Any):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    trusted, _ = trusted_key(brain)
    if trusted is None:
        return None
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(trusted))


_LINEAGE: dict[str, str | None] = {}


def lineage_id(root: Path | str) -> str | None:
    """The brain as every machine knows it: its repository's root commit ("git:<sha>"), the same in
    every clone, so a signature made on one machine verifies on all (issue 22); None before the
    first commit or without git (the folder-bound brain_id is used then)."""
    real = os.path.realpath(str(root))
    if real not in _LINEAGE:
        try:
            proc = subprocess.run(["git", "-C", real, "rev-list", "--max-parents=0", "HEAD"],
                                  capture_output=True, text=True, timeout=30)
            roots = sorted(proc.stdout.split()) if proc.returncode == 0 else []
        except (OSError, subprocess.SubprocessError):
            roots = []
        if not roots:
            return None  # not cached: the first commit may come
        _LINEAGE[real] = f"git:{roots[0]}"
    return _LINEAGE[real]


def payload(brain: Any, kind: str, fields: Mapping[str, Any], *, legacy: bool = False) -> bytes:
    """What is signed: the brain (its lineage: the root commit every clone shares; `legacy`: the
    folder-bound id signatures made before used), the record kind and its fields, as canonical JSON."""
    root = _root(brain)
    ident = None if legacy else lineage_id(root)
    body = {"brain": ident or brain_id(root), "kind": kind,
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
    for legacy in (False, True):  # a signature made before brains had a lineage id still verifies here
        try:
            public.verify(bytes.fromhex(signature), payload(brain, kind, fields, legacy=legacy))
            return True
        except (InvalidSignature, ValueError):  # ValueError: not even hex
            continue
    return False


def require(brain: Any, what: str) -> None:
    """Refuse unless this process holds the operator's authority (can read the private key)."""
    try:
        _signer(brain)
    except BrainError as exc:
        raise Refused(exc.message.replace("refused: this", f"refused: {what}", 1)) from None


def operator_only(brain: Any, what: str) -> None:
    """The CLI's own check for a command only the operator runs: refused when the session says it is
    an agent's (a hint, for a clear early answer) and whenever this process cannot sign with the
    pinned key (the authority itself: an agent unsetting CLAUDECODE still has no key)."""
    if in_agent_session():
        raise Refused(f"refused: {what} is the operator's decision, not an agent's (this is an agent "
                      "session); an agent asks with `/kernel new` or `nika-brain kernel propose`, or "
                      "reports BLOCKED_ON")
    require(brain, what)


def status(brain: Any) -> dict[str, Any]:
    """For `doctor` and `operator show`: the pinned key, where it comes from, whether this process
    can sign with it."""
    key, pub = key_paths(_root(brain))
    trusted, source = trusted_key(brain)
    return {"brain_id": brain_id(_root(brain)), "pinned": trusted or "-", "trusted_from": source,
            "brain_pin": str(pin_path(brain)), "private": str(key), "public": str(pub),
            "public_present": pub.is_file(), "can_sign": available(brain)}
