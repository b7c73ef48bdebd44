"""Benchmark: the quasi-binomial power solve (power.quasi_detectable), old vs new in one run.

Every null finding of a proportion in a report with replicates, and `orch plan`, solve the
difference the quasi-binomial test detects with 80% power by bisection over a simulation. Until
7556b0b each bisection step drew every simulated trial's beta quantile (scipy's _beta_ppf, ~1.3 us
each: 90% of a solve); power._QuasiSim.cell_counts now draws a grid of quantiles and a trial's
own only where a session's uniform falls between the grid's bounds on it. Printed per design:
CPU seconds old (tests/helpers/reference_stats.quasi_detectable_full_quantiles) and new, their
ratio, and whether the two Detectables are equal (they must be: the same counts, sweep by sweep).

--grid also solves the brief's grid of designs (sessions 5-80, trials 2-200, ICC 0-0.3, baseline
0.005-0.5) both ways and prints how many differ (CPU summed; minutes).

    python bench/bench_power_speed.py [--repeat 2] [--grid] [--tiny]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the replaced definition, shared with the tests

from helpers import reference_stats as ref  # noqa: E402
from timing import load_line  # noqa: E402

from orchestrator.core import power  # noqa: E402

# (design, baseline): the brief's three (20 sessions, phi 1.8, one other cell at 0%), a report's
# typical mix, a large cell, and `orch plan`'s at its 5% baseline (ICC 0: no quantile drawn)
DESIGNS = [
    (power.Design(20, 8, (0.0,), 1.8), 0.06),
    (power.Design(20, 20, (0.0,), 1.8), 0.06),
    (power.Design(20, 70, (0.0,), 1.8), 0.06),
    (power.Design(40, 4, (0.01, 0.02, 0.15), 2.0), 0.15),
    (power.Design(80, 50, (0.0, 0.1), 1.3), 0.02),
    (power.Design(2, 4, (0.0,) * 62), 0.05),
]
TINY = [(power.Design(10, 3, (0.0,), 1.5), 0.06)]


def new_solve(design: power.Design, base: float) -> power.Detectable:
    """power.quasi_detectable uncached, its shared simulation dropped: every call simulates afresh."""
    power._shared_sim.cache_clear()
    return power.quasi_detectable.__wrapped__(design, base)


def cpu(repeat: int, work: Callable[[], power.Detectable]) -> tuple[float, power.Detectable]:
    """The least CPU seconds of `repeat` runs (CPU: less moved by a shared machine's load), and the result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        c = time.process_time()
        result = work()
        best = min(best, time.process_time() - c)
    assert result is not None
    return best, result


def label(design: power.Design, base: float) -> str:
    icc = (design.phi - 1) / max(design.sessions - 1, 1)
    return f"{design.sessions}x{design.trials} +{len(design.other_rates)} ICC {icc:.3f} @{base:.1%}"


def side_by_side(designs: list[tuple[power.Design, float]], repeat: int) -> None:
    for design, base in TINY:  # warm: the first solve of a process fills caches both share (trialexact's)
        ref.quasi_detectable_full_quantiles(design, base), new_solve(design, base)
    print(f"{'design (sessions x trials +others)':<38} {'old s':>8} {'new s':>8} {'old/new':>8}  same")
    for design, base in designs:
        old_s, old = cpu(repeat, lambda: ref.quasi_detectable_full_quantiles(design, base))  # noqa: B023
        new_s, new = cpu(repeat, lambda: new_solve(design, base))  # noqa: B023
        print(f"{label(design, base):<38} {old_s:>8.3f} {new_s:>8.3f} {old_s / new_s:>7.1f}x  {old == new}")


def grid() -> None:
    """The brief's grid both ways: every Detectable compared, CPU summed."""
    designs = [
        (power.Design(s, t, (0.0, 0.05), 1 + icc * (s - 1)), base)
        for s, t, icc, base in itertools.product((5, 20, 80), (2, 8, 50, 200), (0.0, 0.03, 0.3), (0.005, 0.05, 0.5))
    ]
    totals, differ = [0.0, 0.0], []
    for design, base in designs:
        old_s, old = cpu(1, lambda: ref.quasi_detectable_full_quantiles(design, base))  # noqa: B023
        new_s, new = cpu(1, lambda: new_solve(design, base))  # noqa: B023
        totals[0] += old_s
        totals[1] += new_s
        if old != new:
            differ.append(f"{label(design, base)}: old {old.rise}/{old.fall}, new {new.rise}/{new.fall}")
    print(f"grid: {len(designs)} designs, {len(differ)} with a different detectable difference")
    print(f"grid CPU: old {totals[0]:.1f} s, new {totals[1]:.1f} s, {totals[0] / totals[1]:.1f}x")
    for line in differ:
        print("  " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="best of N (CPU seconds)")
    parser.add_argument("--grid", action="store_true", help="also the brief's grid of designs (minutes)")
    parser.add_argument("--tiny", action="store_true", help="one small design (the test's run)")
    args = parser.parse_args()
    print(load_line())
    side_by_side(TINY if args.tiny else DESIGNS, args.repeat)
    if args.grid:
        grid()


if __name__ == "__main__":
    main()
