"""The one error type of nika-brain.

The core raises BrainError; the CLI and the hook entry points turn it into one line on stderr and an
exit code. Third-party errors are translated into it at the module that calls the library.
"""
from __future__ import annotations


class BrainError(Exception):
    """A failure the user can act on: a message, an exit code, and where it happened."""

    def __init__(self, message: str, exit_code: int = 1, *, file: str | None = None,
                 line: int | None = None, key: str | None = None):
        super().__init__(message)
        self.message = message
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


# Exit codes, stable for scripts that call the shell wrappers.
EXIT_FAIL = 1          # generic failure / invalid input
EXIT_BUSY = 3          # a lock or scope is held by someone else
EXIT_BLOCKED = 4       # preflight or routing says BLOCKED_ON
EXIT_GATE_PENDING = 5  # waiting on a human gate
EXIT_REFUSED = 6       # an action refused by policy (e.g. an agent approving its own gate)
