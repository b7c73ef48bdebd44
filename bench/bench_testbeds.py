"""Benchmark: does the parallel-testbed check say more than the data? (report.testbeds)

Simulated parallel runs (tests/helpers/parallel_runs.py): 8 cells, each run `--trials` times on
each of 2 testbeds; a corruption count (40 sessions, 0-15%, the same on both testbeds) and two
number metrics (wall ~160 s, latency ~2 s) with trial-to-trial coefficient of variation CV,
normal or lognormal. The check tests, per cell, the rate and each number across testbeds (the
trial is the unit) with Holm over every cell and metric, as the report does.

Prints, per CV and shape, over --runs reports:
  A/A   identical testbeds: share of reports saying "Testbeds differ" (goal <= 5%);
  power the second testbed 20% slower in both numbers: share of reports naming it (any metric,
        and on wall alone).

Measured (1,000 reports a row, seed 0): A/A 2.6-3.9% of reports at every CV and shape; the testbed
20% slower named in 100% of reports at CV 2-5%, 75-77% at CV 10% (on wall alone 51%), 19-21% at
CV 20% (wall alone 10%): per cell, 4 trials against 4 must beat Holm over 24 tests.

    python bench/bench_testbeds.py [--runs 1000] [--trials 4] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # run builders shared with the tests

import numpy as np  # noqa: E402
from helpers.parallel_runs import parallel_trials  # noqa: E402
from timing import load_line  # noqa: E402

from orchestrator.report.testbeds import testbed_findings  # noqa: E402

NUMBERS = ["wall", "latency"]
CVS = (0.02, 0.05, 0.1, 0.2)
SHAPES = ("normal", "lognormal")


def shares(
    rng: np.random.Generator, runs: int, trials: int, cv: float, shape: str, slower: float
) -> tuple[float, float]:
    """(share of reports saying the testbeds differ, share naming them on wall)."""
    differ = wall = 0
    for _ in range(runs):
        records = parallel_trials(rng, trials=trials, cv=cv, shape=shape, slower=slower)
        texts = [f.text for f in testbed_findings(records, "corruption", NUMBERS)]
        differ += any(t.startswith("Testbeds differ") for t in texts)
        wall += any(" on wall:" in t for t in texts)
    return differ / runs, wall / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=4, help="trials per cell and testbed")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"bench_testbeds: {args.runs} reports per row, 8 cells x {args.trials} trials x 2 testbeds; {load_line()}")
    print(f"{'shape':<10} {'CV':>5} {'A/A differ':>11} {'20% slower: any':>16} {'on wall':>8}")
    for shape in SHAPES:
        for cv in CVS:
            aa, _ = shares(rng, args.runs, args.trials, cv, shape, 1.0)
            found, wall = shares(rng, args.runs, args.trials, cv, shape, 1.2)
            print(f"{shape:<10} {cv:>5.2f} {aa:>11.1%} {found:>16.1%} {wall:>8.1%}")


if __name__ == "__main__":
    main()
