"""Benchmark: does the report ever say more than the data? Four measured legs, through the code the
report and the runner use (report.build.build_report, sweep.adaptive's sequential rule, core.power).

  (1) A/A: 2-4 two-level factors, NO factor matters; trials vary (a trial's rate is Beta with
      intra-trial correlation ICC, as the simulator's SIM_TRIAL_ICC; its latency has a trial effect);
      a proportion metric (failures/sessions) and a number (latency). Per design: the share of runs
      whose report states any finding (a headline sentence of kind "finding", or any cell, effect,
      interaction, numeric effect or neighbour test marked a finding), with its 95% Wilson interval.
      Goal: at most alpha (5%) familywise.
  (2) Missing outcomes: one cell crashes under load: its hardest trials fail (no metric at all), so
      its latency comes from its light trials only and looks better (nothing else differs). Share of
      reports that call latency a finding, and how many of those findings say that the compared cells
      lost different shares of their trials (report.missing's caution; before it: none).
  (3) Adaptive stopping, A/A (8 cells at one rate): the sequential rule's false "different" (through
      core.clustersim, which replays sweep.adaptive's decisions), per comparison (its nominal alpha is
      per comparison, and the report says it is not corrected across cells) and in any cell of a sweep.
  (4) Power: the DSV4 three-way AND (15% where three flags are on, 0% elsewhere), both ways round (the
      all-off baseline: a rise; the shipped all-on baseline: the fix's fall), at 2-12 replicates: the
      share of reports that find the all-off vs all-on comparison and the three-way interaction, beside
      the 80%-power differences `orch plan` states for that design.

The null headline's power sentence is stubbed while the bench runs (no_power_sentence): it decides no finding.
Monte Carlo: the Wilson interval of each share is printed beside it.

    .venv/bin/python bench/bench_truth.py [--runs 300] [--power-runs 200] [--adaptive-sweeps 2000]
        [--power-designs 2:0,3:0,5:0,5:0.02,8:0,12:0] [--seed 0] [--legs 1234]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # run builders shared with the tests

import numpy as np  # noqa: E402
from helpers.cell_runs import cell_run, failed_record  # noqa: E402

from orchestrator.core import clustersim as cs  # noqa: E402
from orchestrator.core import family, power  # noqa: E402
from orchestrator.core.records import RunManifest, TrialRecord  # noqa: E402
from orchestrator.core.sequential import SequentialPolicy  # noqa: E402
from orchestrator.report import build  # noqa: E402
from orchestrator.report.build import build_report  # noqa: E402
from orchestrator.report.model import Report  # noqa: E402

ALPHA = 0.05
METRICS = {"failures": "proportion", "latency": "number"}
Levels = dict[str, str]
MISSING_WORDS = "without data"  # what a finding says when its compared cells lost different shares of trials


def wilson(hits: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The 95% Wilson score interval of hits/n."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def share(hits: int, n: int) -> str:
    low, high = wilson(hits, n)
    return f"{hits:4d}/{n:<4d} = {100 * hits / n:5.1f}% [{100 * low:4.1f}, {100 * high:4.1f}]"


def factors_of(count: int) -> dict[str, list[str]]:
    return {f"f{i}": ["on", "off"] for i in range(count)}


def all_cells(factors: dict[str, list[str]]) -> list[Levels]:
    return [dict(zip(factors, combo, strict=True)) for combo in itertools.product(*factors.values())]


def trial_rate(rng: np.random.Generator, mean: float, icc: float) -> float:
    if icc <= 0 or mean <= 0 or mean >= 1:
        return mean
    scale = (1 - icc) / icc
    return float(rng.beta(mean * scale, (1 - mean) * scale))


def latency(rng: np.random.Generator, mean_ms: float, trial_sd: float, sessions: int) -> float:
    """A trial's mean latency: a trial effect (restart, warm-up, GPU state) plus its sessions' noise."""
    trial = mean_ms * math.exp(rng.normal(0, trial_sd))
    return float(round(np.mean(rng.lognormal(math.log(trial), 0.3, sessions)), 2))


def findings_of(report: Report) -> list[str]:
    """Every place the report calls something a finding (the headline and each table's marks)."""
    said = [f"headline: {f.text}" for f in report.headline if f.kind == "finding"]
    for c in report.cells:
        said += [f"cell {c.cell} {m}" for m, v in c.proportions.items() if v.significant]
        said += [f"cell {c.cell} {m}" for m, v in c.numbers.items() if v.significant]
    said += [f"effect {e.metric} {e.factor} {e.given}" for e in report.effects if e.finding]
    said += [f"interaction {i.metric} {i.factors}" for i in report.interactions if i.finding]
    said += [f"number effect {e.metric} {e.factor}" for e in report.number_effects if e.finding]
    said += [f"neighbour {n.metric} {n.cell}" for n in report.neighbours if n.finding]
    return said


# ----------------------------------------------------------------------------- (1) A/A


def aa_run(
    rng: np.random.Generator, n_factors: int, replicates: int, sessions: int, icc: float, rate: float
) -> tuple[RunManifest, list[TrialRecord]]:
    factors = factors_of(n_factors)
    cells = []
    for levels in all_cells(factors):
        trials = [
            {
                "failures": (int(rng.binomial(sessions, trial_rate(rng, rate, icc))), sessions),
                "latency": latency(rng, 30.0, 0.1, sessions),
            }
            for _ in range(replicates)
        ]
        cells.append((levels, trials))
    return cell_run(factors, {f: "on" for f in factors}, cells, metrics=dict(METRICS))


def leg_aa(rng: np.random.Generator, runs: int) -> None:
    print("\n(1) A/A: no factor matters; share of reports stating any finding (95% Wilson interval)")
    designs = [
        (2, 2, 10, 0.05, 0.10),
        (2, 5, 10, 0.10, 0.30),
        (3, 2, 40, 0.05, 0.02),
        (2, 3, 40, 0.02, 0.10),
        (3, 2, 40, 0.05, 0.15),
        (3, 3, 20, 0.05, 0.05),
        (3, 5, 40, 0.02, 0.10),
        (4, 2, 10, 0.05, 0.20),
        (4, 3, 40, 0.05, 0.10),
        (4, 5, 20, 0.02, 0.05),
    ]
    total_hits = total = 0
    examples: list[str] = []
    for n_factors, replicates, sessions, icc, rate in designs:
        hits = 0
        start = time.process_time()
        for _ in range(runs):
            said = findings_of(build_report(*aa_run(rng, n_factors, replicates, sessions, icc, rate)))
            hits += bool(said)
            if said and len(examples) < 3:
                examples.append(said[0])
        total_hits, total = total_hits + hits, total + runs
        cpu = (time.process_time() - start) / runs
        print(
            f"  {n_factors} factors ({2**n_factors:2d} cells), {replicates} replicates, {sessions:2d} sessions, "
            f"ICC {icc:.2f}, rate {rate:.0%}: {share(hits, runs)}  ({cpu * 1000:.0f} ms a report)"
        )
    print(f"  all designs: {share(total_hits, total)} (goal <= {ALPHA:.0%})")
    for text in examples:
        print(f"    e.g. {text[:200]}")


# ----------------------------------------------------------------------------- (2) missing outcomes


def crashing_run(
    rng: np.random.Generator, replicates: int, sessions: int, crash: float
) -> tuple[RunManifest, list[TrialRecord]]:
    """2 factors; cell (f0=off, f1=on) crashes in its hard trials (a trial's load drawn uniformly:
    the top `crash` share crash), so its completed trials are its light ones, whose latency is
    lower. Nothing else differs: every other trial's latency grows with its load the same way."""
    factors = factors_of(2)
    base = {f: "on" for f in factors}
    crashing = {"f0": "off", "f1": "on"}
    cells = []
    for levels in all_cells(factors):
        trials = []
        for _ in range(replicates):
            load = float(rng.uniform())
            k = int(rng.binomial(sessions, trial_rate(rng, 0.05, 0.02)))
            value = latency(rng, 10.0 + 40.0 * load, 0.05, sessions)
            trials.append(
                None if levels == crashing and load > 1 - crash else {"failures": (k, sessions), "latency": value}
            )
        cells.append((levels, trials))
    return _with_failures(factors, base, cells)


def _with_failures(
    factors: dict[str, list[str]], base: Levels, cells: Sequence[tuple[Levels, Sequence[object]]]
) -> tuple[RunManifest, list[TrialRecord]]:
    """cell_run's run with each None trial journaled as a failed trial."""
    stand_in = [(levels, [t or {"failures": (0, 1), "latency": 0.0} for t in trials]) for levels, trials in cells]
    manifest, records = cell_run(factors, base, stand_in, metrics=dict(METRICS))  # type: ignore[arg-type]
    missing = [t is None for _, trials in cells for t in trials]
    return manifest, [
        failed_record(p) if gone else r for p, r, gone in zip(manifest.plan, records, missing, strict=True)
    ]


def leg_missing(rng: np.random.Generator, runs: int) -> None:
    print("\n(2) Missing outcomes: cell f0=off,f1=on crashes in its hardest trials (no metric); nothing else differs")
    for replicates, crash in ((5, 0.5), (10, 0.3), (10, 0.5), (20, 0.3)):
        latency_found = told = 0
        example = ""
        for _ in range(runs):
            report = build_report(*crashing_run(rng, replicates, 30, crash))
            said = [s for s in findings_of(report) if "latency" in s]
            latency_found += bool(said)
            heads = [f.text for f in report.headline if f.kind == "finding" and "latency" in f.text.lower()]
            told += bool(said) and bool(heads) and all(MISSING_WORDS in t for t in heads)
            example = example or (heads[0] if heads else "")
        print(
            f"  {replicates:2d} replicates, {crash:.0%} of the cell's trials crash: latency called a finding in "
            f"{share(latency_found, runs)}; of those, the finding says the cells' missing trials differ: "
            f"{told}/{latency_found}"
        )
        if example:
            print(f"    e.g. {example[:160]} ... {example[-420:]}")


# ----------------------------------------------------------------------------- (3) adaptive A/A


def leg_adaptive(rng: np.random.Generator, sweeps: int) -> None:
    print("\n(3) Adaptive stopping, A/A (8 cells at one rate, 40 sessions a trial): false 'different'")
    print("    per comparison (the rule's nominal alpha, 5%, is per comparison) and in any of the 7 cells")
    for rate, icc, rounds in ((0.15, 0.0, 5), (0.15, 0.05, 5), (0.15, 0.05, 10), (0.02, 0.05, 10), (0.30, 0.1, 10)):
        for direction in ("both", "lower"):
            k = cs.beta_binomial_trials(rng, sweeps, [rate] * 8, rounds, 40, icc)
            policy = SequentialPolicy(max_rounds=rounds, direction=direction)
            different = np.asarray(cs.adaptive_different(k, 40, policy, clustered_rule=True))
            per_cell, any_cell = int(different.sum()), int(different.any(axis=1).sum())
            print(
                f"  rate {rate:.0%}, ICC {icc:.2f}, up to {rounds:2d} rounds, {direction:<5}: per comparison "
                f"{share(per_cell, different.size)}; any cell {share(any_cell, sweeps)}"
            )


def leg_adaptive_report(rng: np.random.Generator, runs: int) -> None:
    """What the report's fixed analysis says of an adaptive A/A sweep: its cells stopped when the rule
    decided them, so each ran as many trials as its own data chose (optional stopping)."""
    print("\n(3b) Adaptive A/A sweeps (3 factors, 8 cells, up to 6 rounds of 40 sessions), then the report's fixed")
    print("     analysis of the trials that ran: share of reports stating any finding")
    factors = factors_of(3)
    levels = all_cells(factors)
    for rate, icc in ((0.15, 0.0), (0.15, 0.05), (0.05, 0.05)):
        k = cs.beta_binomial_trials(rng, runs, [rate] * 8, 6, 40, icc)
        different, ran = cs.adaptive_replay(k, 40, SequentialPolicy(max_rounds=6), clustered_rule=True)
        hits = 0
        for s in range(runs):
            cells = [(lv, [(int(k[s, c, r]), 40) for r in range(6) if ran[s, c, r]]) for c, lv in enumerate(levels)]
            report = build_report(*cell_run(factors, levels[0], cells, adaptive=True))
            hits += bool(findings_of(report))
        stopped = float((~ran[:, 1:, -1]).mean())
        print(
            f"  rate {rate:.0%}, ICC {icc:.2f}: {share(hits, runs)}; cells stopped early {stopped:.0%}, "
            f"decided 'different' in {share(int(different.any(axis=1).sum()), runs)} of sweeps"
        )


# ----------------------------------------------------------------------------- (4) power


def leg_power(rng: np.random.Generator, runs: int, designs: str) -> None:
    """The DSV4 AND at 15% vs 0%: both ways round (the all-off cell as the baseline, a rise; the shipped
    matrix's all-on baseline, where the seven other cells fall to 0%), beside what `orch plan` says."""
    print("\n(4) Power: the DSV4 AND (15% where f0, f1, f2 are all on, 0% elsewhere), 40 sessions a trial")
    factors = factors_of(3)
    tests = plan_family(factors)
    for replicates, icc in ((int(r), float(i)) for r, i in (d.split(":") for d in designs.split(","))):
        for base_level, direction in (("off", "rise"), ("on", "fall")):
            base = {f: base_level for f in factors}
            found = inter = 0
            for _ in range(runs):
                cells = [
                    (lv, [(int(rng.binomial(40, trial_rate(rng, dsv4_rate(lv), icc))), 40) for _ in range(replicates)])
                    for lv in all_cells(factors)
                ]
                report = build_report(*cell_run(factors, base, cells))
                high = next(c for c in report.cells if all(v == "on" for v in c.levels.values()))
                low = next(c for c in report.cells if all(v == "off" for v in c.levels.values()))
                found += (low if base_level == "on" else high).proportions["corruption"].significant
                inter += any(i.finding and i.order == 3 for i in report.interactions)
            print(
                f"  {replicates:2d} replicates, ICC {icc:.2f}, baseline all {base_level:<3} ({direction}): "
                f"all-off vs all-on found {share(found, runs)}; 3-way interaction {share(inter, runs)}"
            )
        print(f"      orch plan: {plan_says(replicates, tests)}")


def dsv4_rate(levels: Levels) -> float:
    return 0.15 if all(v == "on" for v in levels.values()) else 0.0


def plan_family(factors: dict[str, list[str]]) -> int:
    """The report's Holm family for this design as `orch plan` states it (core.family.planned)."""
    cells = {",".join(f"{f}={lv[f]}" for f in factors): lv for lv in all_cells(factors)}
    base = {f: "on" for f in factors}
    design = family.Design(factors, base, next(iter(cells)), {"corruption": family.MetricDesign("proportion", cells)})
    return family.planned(design).total


def plan_says(replicates: int, tests: int) -> str:
    """The 80%-power differences `orch plan` states (cli.planview) for baselines at 0% and 15%: Fisher's at
    Holm's first step (its first lines), the quasi-binomial test's per comparison with the other cells at
    the baseline's rate (all it printed of that test before), and at Holm in that shape and with no events in
    the other cells (the DSV4 shape; both printed since this branch)."""
    n = 40 * replicates
    fisher = [power.detectable(n, n, b, alpha=ALPHA / tests) for b in (0.0, 0.15)]

    def quasi(others: float | None, alpha: float) -> list[power.Detectable]:
        return [
            power.quasi_detectable(power.Design(40, replicates, (b if others is None else others,) * 6), b, alpha=alpha)
            for b in (0.0, 0.15)
        ]

    def pair(d: list[power.Detectable]) -> str:
        rise = f"{d[0].rise:.1%}" if d[0].rise is not None else "none"
        fall = f"{0.15 - d[1].fall:.1%}" if d[1].fall is not None else "none"
        return f"0% -> {rise}, 15% -> {fall}"

    strict = ALPHA / tests
    return (
        f"Fisher+Holm({tests}) {pair(fisher)}; quasi {pair(quasi(None, ALPHA))}; "
        f"quasi+Holm {pair(quasi(None, strict))}; quasi+Holm, no events elsewhere {pair(quasi(0.0, strict))}"
    )


@contextlib.contextmanager
def no_power_sentence() -> Iterator[None]:
    """The null headline's power sentence (build._power_text: core.power's simulated quasi-binomial
    power) is ~95% of a small report's CPU (1.9 s of 2.0 s for 40 trials) and decides no finding: the
    bench words it as a stub while it runs, so 3,000 reports take minutes, not an hour."""
    kept = build._power_text
    build._power_text = lambda *_: "(power sentence skipped by bench_truth)"  # type: ignore[assignment]
    try:
        yield
    finally:
        build._power_text = kept  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--power-runs", type=int, default=200)
    parser.add_argument("--power-designs", default="2:0,3:0,5:0,5:0.02,8:0,12:0", help="replicates:ICC,...")
    parser.add_argument("--adaptive-sweeps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--legs", default="1234")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"bench_truth: {args.runs} reports per design, seed {args.seed}; load average {os.getloadavg()[0]:.1f}")
    start = time.perf_counter()
    legs: dict[str, Callable[[], object]] = {
        "1": lambda: leg_aa(rng, args.runs),
        "2": lambda: leg_missing(rng, args.runs),
        "3": lambda: (leg_adaptive(rng, args.adaptive_sweeps), leg_adaptive_report(rng, args.runs)),
        "4": lambda: leg_power(rng, args.power_runs, args.power_designs),
    }
    with no_power_sentence():
        for leg in args.legs:
            legs[leg]()
    print(f"\n{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
