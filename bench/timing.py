"""Timing shared by the bench scripts. A script imports it as `timing`: running as
`python bench/NAME.py` puts the script's own folder first on sys.path (and tests/helpers/benchrun
puts it there for the scripts the tests import)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def best_of(repeat: int, work: Callable[[], object]) -> float:
    """The least wall-clock seconds of `repeat` runs of work(): the run the machine disturbed least."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    return min(times)


def load_line() -> str:
    """The machine's load when a bench starts, printed first: a busy machine inflates every figure."""
    return "load average: {:.2f} {:.2f} {:.2f} on {} cores".format(*os.getloadavg(), os.cpu_count())
