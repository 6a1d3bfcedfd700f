"""Poll until something is there: the one wait loop of the tests and the benches."""
from __future__ import annotations

import time


def until(fn, timeout: float = 120.0, every: float = 0.05, what: str | None = None):
    """Poll fn() until it returns something truthy and return that; after timeout, fail with `what`
    (fn's name unless told)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what or getattr(fn, '__name__', fn)}")
