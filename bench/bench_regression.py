"""Benchmark: the nightly regression alert (orchestrator.core.regression) in simulated nights.

A matrix of 8 cells (rates 15%, 15%, 2% x4, 0% x2; 2 trials of 40 sessions per cell per night)
runs every night. Trials vary from restart to restart (beta-binomial, intra-trial correlation
ICC). Each night is checked against its lookback window of earlier nights, every cell at once,
Holm-adjusted. Printed side by side in one run, for orch's check and for the naive check (Fisher's
exact test on pooled counts, Holm-adjusted the same way):
  - A/A: the share of nights with at least one alert when nothing changed (goal <= 5%);
  - power: the share of nights where a real jump (one 2% cell -> 15%) is flagged.

--night-icc adds a night effect: each night's rate of a cell is drawn once (beta around the
cell's rate, that between-night ICC) and shared by its trials, so tonight's trials move together.
Measured at `--night-icc 0.05 --nights 200` (steady-night alarms, trial ICC 0 / 0.02 / 0.05):
before the night-level test, 13.5% / 11% / 11% at lookback 7 and 16.5% / 12% / 7.5% at 3; with
it, 6.5% / 5.5% / 6.0% and 4.5% / 4.0% / 4.0%, power 2%->15% 25% / 16.5% / 19% at lookback 7
(52% / 33% / 34% before). Lookback 1 is unchanged (24.5% at trial ICC 0): one earlier night
shows no night-to-night spread, so the night test needs 2.

    python bench/bench_regression.py [--nights 400] [--seed 1] [--night-icc 0.05]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from orchestrator.core.regression import RateHistory, check_night, rate_change
from orchestrator.core.stats import fisher_exact, holm

RATES = (0.15, 0.15, 0.02, 0.02, 0.02, 0.02, 0.0, 0.0)


def _beta(rng: np.random.Generator, p: float, icc: float, size: int) -> np.ndarray:
    """`size` rates drawn around p with intra-class correlation icc (none: p itself)."""
    return rng.beta(p * (1 - icc) / icc, (1 - p) * (1 - icc) / icc, size=size) if icc and p else np.full(size, p)


def night(rng: np.random.Generator, p: float, icc: float, night_icc: float = 0.0) -> tuple[tuple[int, int], ...]:
    """Two trials of 40 sessions: the night's rate (shared, between-night ICC), then each trial's."""
    tonight = float(_beta(rng, p, night_icc, 1)[0])
    return tuple((int(k), 40) for k in rng.binomial(40, _beta(rng, tonight, icc, 2)))


def naive_flags(cells: list[RateHistory]) -> list[bool]:
    ps = []
    for h in cells:
        k, n = sum(t[0] for t in h.tonight), sum(t[1] for t in h.tonight)
        big = [t for nt in h.nights for t in nt]
        ps.append(fisher_exact(k, n, sum(t[0] for t in big), sum(t[1] for t in big)))
    return [q < 0.05 for q in holm(ps)]


def simulate(
    rng: np.random.Generator, icc: float, lookback: int, nights: int, jump: bool, night_icc: float = 0.0
) -> tuple[float, float]:
    ours = naive = 0
    for _ in range(nights):
        cells = []
        for c, p in enumerate(RATES):
            today = 0.15 if jump and c == 2 else p
            history = tuple(night(rng, p, icc, night_icc) for _ in range(lookback))
            cells.append(RateHistory(str(c), "corruption", history, night(rng, today, icc, night_icc)))
        flagged = {ch.cell for ch in check_night(cells) if ch.flagged}
        nflags = naive_flags(cells)
        if jump:
            ours += "2" in flagged
            naive += nflags[2]
        else:
            ours += bool(flagged)
            naive += any(nflags)
    return ours / nights, naive / nights


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nights", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--night-icc", type=float, default=0.0, help="between-night ICC (default 0: nights alike)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.nights} simulated nights per row")
    print(f"between-night ICC {args.night_icc:g} (a night effect shared by every trial of a night)")
    print(
        f"{'ICC':>5} {'lookback':>8} | {'A/A alarms: orch':>17} {'naive':>7} | {'power 2%->15%: orch':>20} {'naive':>7}"
    )
    started = time.perf_counter()
    for icc in (0.0, 0.02, 0.05):
        for lookback in (1, 3, 7):
            aa = simulate(rng, icc, lookback, args.nights, jump=False, night_icc=args.night_icc)
            pw = simulate(rng, icc, lookback, args.nights, jump=True, night_icc=args.night_icc)
            print(f"{icc:>5} {lookback:>8} | {aa[0]:>17.1%} {aa[1]:>7.1%} | {pw[0]:>20.1%} {pw[1]:>7.1%}", flush=True)
    example = rate_change(RateHistory("c", "m", (((1, 40), (0, 40)),), ((7, 40), (6, 40))))
    print(f"method: {example.method if example else '-'}; {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
