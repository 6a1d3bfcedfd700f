"""Paired measurements for the benches: a baseline and the measured side run in turn (interleaved), each
pair giving one ratio, so a change of load during the run moves both sides of a pair alike.

    cpu_of(cmd, env, data)        CPU time (user + system) of one child process, in seconds
    pairs(n, base, measured)      n interleaved (base, measured) samples of two callables
    summary(xs)                   "min a / median b / max c" of a list
    judge(name, base, xs, goal)   prints both sides and the paired ratios; True when the median ratio
                                  is within the goal (a ratio goal) or the median is (an absolute goal)
"""
from __future__ import annotations

import resource
import statistics
import subprocess
from collections.abc import Callable, Sequence


def cpu_of(cmd: Sequence[str], env: dict | None = None, data: bytes = b"", cwd: str | None = None,
           check: bool = True) -> float:
    """CPU seconds (user + system) of one run of `cmd`, from the children's rusage."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(list(cmd), input=data, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def pairs(n: int, base: Callable[[], float], measured: Callable[[], float]) -> tuple[list[float], list[float]]:
    """n (base, measured) samples taken in turn; the order inside a pair alternates."""
    b, m = [], []
    for i in range(n):
        if i % 2:
            m.append(measured())
            b.append(base())
        else:
            b.append(base())
            m.append(measured())
    return b, m


def summary(xs: Sequence[float], unit: float = 1000.0, fmt: str = "{:.1f}") -> str:
    return " / ".join(fmt.format(v * unit) for v in (min(xs), statistics.median(xs), max(xs)))


def judge(name: str, base: Sequence[float], xs: Sequence[float], *, ratio: float | None = None,
          absolute: float | None = None, base_name: str = "python -c pass") -> bool:
    """Print `name` against the baseline (min / median / max, ms, and of the paired ratios) and the
    verdict against the goal: a median paired ratio <= `ratio`, and/or a median below `absolute` s."""
    rs = [x / b for b, x in zip(base, xs) if b > 0]
    ok = True
    goals = []
    if ratio is not None:
        ok &= statistics.median(rs) <= ratio
        goals.append(f"ratio <= {ratio:g}x")
    if absolute is not None:
        ok &= statistics.median(xs) < absolute
        goals.append(f"median < {absolute * 1000:.0f} ms")
    print(f"{name}\n    {summary(xs)} ms (min / median / max, n={len(xs)}); {base_name} {summary(base)} ms\n"
          f"    paired ratio min / median / max: {summary(rs, 1.0, '{:.2f}')}x"
          + (f"  goal {' and '.join(goals)}: {'met' if ok else 'MISSED'}" if goals else ""))
    return ok
