"""Benchmark: after an adaptive stop, are a NUMBER metric's findings and intervals still honest? The
rule stops a cell on its proportion (corruption); a number metric of the same trials (wall time,
latency) is tested as if every cell ran a fixed number of trials (Mann-Whitney per cell, the factors'
stratified rank tests, Holm over the one family). That is valid only if a trial's number is
independent of its proportion; on a real deployment a bad trial (a slow node, a cold cache) has both
more failures and a higher latency: a shared trial effect.

The runs of bench_adaptive_honesty.py (same plan, same seeds, so the very same proportions, stops and
sweeps: matrices/overlap_hunt.yaml, 2x2x2, up to 8 rounds of 10 sessions, AdaptiveSource or the fixed
StepSource, report.build.build_report + with_adaptive_facts; no process started), each trial also
given a number: wall = 30 s x exp(0.1 x (rho z + sqrt(1 - rho^2) e)), z the trial's own rate as a
standard normal score (its Beta quantile), e independent noise (a second RNG, so the proportions do
not change with rho). rho = 0: the number is independent of the trial's failures; 0.5, 0.9: it shares
the trial effect (the correlation of the trial's log wall with its rate's normal score). Every cell
alike (A/A): a true median of 30 s in every cell, a true shift of 0 s for every factor.

Per row, each design: the share of reports naming a finding of the number metric (a cell's Holm-
significant wall, or a factor's wall effect; Holm over the whole report as the page does), of
reports naming any finding; the share of the wall's stated 95% intervals holding the truth: the
cells' medians (every cell; cells stopped early) and the factors' shifts. Wilson 95% intervals.

    .venv/bin/python bench/bench_adaptive_numbers.py [--runs 1000] [--rates 0.15] [--iccs 0.03,0.10]
        [--rhos 0,0.5,0.9] [--directions lower] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
import zlib

import numpy as np
from bench_adaptive_honesty import (
    METRIC,
    REPO,
    SESSIONS,
    STAMP,
    RateOf,
    Sweep,
    manifest_of,
    matrix_for,
)
from bench_adaptive_honesty import run_sweep as honesty_sweep
from bench_truth import findings_of, no_power_sentence, share, trial_rate
from scipy import stats as sps

from orchestrator.core.config import read_inventory
from orchestrator.core.plan import make_plan
from orchestrator.core.records import MetricValue, TrialRecord
from orchestrator.core.steps import Plan, Step
from orchestrator.report.build import build_report, with_adaptive_facts
from orchestrator.report.model import Report

NUMBER = "wall"
MEDIAN_S = 30.0  # the true median wall of every cell (A/A)
SPREAD = 0.1  # sd of a trial's log wall


@dataclasses.dataclass
class Tally:
    """Counts over one row's runs of one design."""

    runs: int = 0
    found: int = 0  # reports naming any finding
    number_found: int = 0  # reports naming a finding of the number metric
    number_cell_found: int = 0  # of those, a cell's wall vs the baseline
    number_effect_found: int = 0  # of those, a factor's wall effect
    cells: int = 0  # cells with a stated median interval
    covered: int = 0
    stopped: int = 0  # of those, cells stopped early
    stopped_covered: int = 0
    shifts: int = 0  # factors' wall shifts with an interval
    shifts_covered: int = 0


def wall(z: float, e: float, rho: float) -> float:
    return round(MEDIAN_S * math.exp(SPREAD * (rho * z + math.sqrt(1 - rho * rho) * e)), 4)


def score(rate: float, mean: float, icc: float) -> float:
    """The trial's rate as a standard normal score (its quantile under the Beta it was drawn from)."""
    if icc <= 0:
        return 0.0
    scale = (1 - icc) / icc
    u = float(sps.beta.cdf(rate, mean * scale, (1 - mean) * scale))
    return float(sps.norm.ppf(min(max(u, 1e-12), 1 - 1e-12)))


def run_sweep(
    rng: np.random.Generator, noise: np.random.Generator, plan: Plan, adaptive: bool, rate_of: RateOf, icc: float,
    rho: float,
) -> Sweep:  # fmt: skip
    """bench_adaptive_honesty.run_sweep with a wall per trial; `rng` draws exactly what it draws there."""
    return honesty_sweep(
        rng, plan, adaptive, rate_of, icc, lambda step: trial_record(rng, noise, step, rate_of(step), icc, rho)
    )


def trial_record(
    rng: np.random.Generator, noise: np.random.Generator, step: Step, mean: float, icc: float, rho: float
) -> TrialRecord:
    t = step.trial
    rate = trial_rate(rng, mean, icc)
    k = int(rng.binomial(SESSIONS, rate))  # as bench_adaptive_honesty.trial_record draws it
    value = wall(score(rate, mean, icc), float(noise.normal()), rho)
    metrics = {METRIC: MetricValue(kind="proportion", k=k, n=SESSIONS), NUMBER: MetricValue(kind="number", value=value)}
    return TrialRecord(
        run_id="r1", trial=t.index, round=t.round, cell=t.cell.id, levels=t.cell.as_dict(),
        is_baseline=t.is_baseline, testbed="tb0", status="completed", started=STAMP, ended=STAMP,
        duration_s=1.0, metrics=metrics,
    )  # fmt: skip


def number_findings(report: Report) -> tuple[bool, bool]:
    """(a cell's wall named a finding, a factor's wall effect named a finding)."""
    cells = any(v.significant for c in report.cells for m, v in c.numbers.items() if m == NUMBER)
    effects = any(e.finding for e in report.number_effects if e.metric == NUMBER)
    return cells, effects


def tally_run(tally: Tally, report: Report, rounds: int) -> None:
    tally.runs += 1
    tally.found += bool(findings_of(report))
    cells, effects = number_findings(report)
    tally.number_found += cells or effects
    tally.number_cell_found += cells
    tally.number_effect_found += effects
    for cell in report.cells:
        view = cell.numbers.get(NUMBER)
        if view is None or view.low is None or view.high is None:
            continue
        inside = view.low <= MEDIAN_S <= view.high
        tally.cells += 1
        tally.covered += inside
        if cell.completed < rounds:
            tally.stopped += 1
            tally.stopped_covered += inside
    for e in report.number_effects:
        if e.metric == NUMBER and e.low is not None and e.high is not None:
            tally.shifts += 1
            tally.shifts_covered += e.low <= 0.0 <= e.high


def scenario(args: argparse.Namespace, rate: float, icc: float, rho: float, direction: str) -> list[str]:
    """One row, adaptive and fixed: the seeds of bench_adaptive_honesty's `A/A {rate}` row."""
    name = f"A/A {rate:.0%}"
    matrix = matrix_for(direction)
    testbed = next(iter(read_inventory(REPO / "inventory" / "local.yaml").testbeds.values()))
    lines = []
    for adaptive in (True, False):
        rng = np.random.default_rng([args.seed, zlib.crc32(f"{name},{icc},{direction}".encode())])
        noise = np.random.default_rng([args.seed, zlib.crc32(f"{name},{icc},{direction},wall".encode())])
        tally = Tally()
        for _ in range(args.runs):
            plan = make_plan(matrix, testbed, int(rng.integers(1 << 30)))
            sweep = run_sweep(rng, noise, plan, adaptive, lambda s: rate, icc, rho)
            manifest = manifest_of(plan, adaptive)
            manifest = manifest.model_copy(update={"metrics": {METRIC: "proportion", NUMBER: "number"}})
            report = with_adaptive_facts(build_report(manifest, sweep.records), sweep.events)
            tally_run(tally, report, plan.replicates)
        lines.append(row(name, icc, rho, direction, "adaptive" if adaptive else "fixed", tally))
    return lines


def row(name: str, icc: float, rho: float, direction: str, design: str, t: Tally) -> str:
    head = f"  {name:<8} ICC {icc:.2f} rho {rho:.1f} {direction:<5} {design:<8}"
    parts = [
        f"wall finding {share(t.number_found, t.runs)} (cells {t.number_cell_found}, effects {t.number_effect_found})",
        f"any finding {share(t.found, t.runs)}",
        f"medians hold {share(t.covered, t.cells)}",
    ]
    if t.stopped:
        parts.append(f"stopped cells' medians {share(t.stopped_covered, t.stopped)}")
    parts.append(f"shifts hold 0 {share(t.shifts_covered, t.shifts)}")
    return head + ": " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rates", default="0.15")
    parser.add_argument("--iccs", default="0.03,0.10")
    parser.add_argument("--rhos", default="0,0.5,0.9")
    parser.add_argument("--directions", default="lower")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"bench_adaptive_numbers: {args.runs} runs per row and design, matrices/overlap_hunt.yaml "
        f"(2x2x2, up to 8 rounds of {SESSIONS} sessions), seed {args.seed}; load average {os.getloadavg()[0]:.1f}"
    )
    start = time.perf_counter()
    with no_power_sentence():
        for rate in (float(r) for r in args.rates.split(",")):
            for icc in (float(x) for x in args.iccs.split(",")):
                for direction in args.directions.split(","):
                    for rho in (float(x) for x in args.rhos.split(",")):
                        for line in scenario(args, rate, icc, rho, direction):
                            print(line)
                        sys.stdout.flush()
    print(f"\n{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
