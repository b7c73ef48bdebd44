"""Benchmark: does a run under adaptive stopping keep what its report states? Stopping on the data
(optional stopping) biases fixed-sample statistics: p-values too small, intervals too narrow, a
rate biased at the stop. The report's fixed analysis (Holm, 95% intervals, the trial the unit) is
run over the trials an adaptive run kept, beside a fixed design of the same plan (every round).

Through the real code: the plan (core.plan.make_plan of matrices/overlap_hunt.yaml: 2x2x2, 8 rounds
of 10 sessions, adaptive stopping), the adaptive step source (sweep.adaptive.AdaptiveSource, its
sequential rule core.sequential) or the fixed one (sweep.sources.StepSource), one testbed taking
trials in order, each trial's k of 10 drawn with a seeded RNG (a trial's rate is Beta with
intra-trial correlation ICC: trial-to-trial variation), then report.build.build_report and the
run-level sentences the page adds (report.build.with_adaptive_facts, from the
"cell_decided" events the runner journals: sweep.runner.cell_decided). No process is started.

Per scenario (rates x ICC x the question asked, `lower` as shipped or `both`), each design:
  (1) A/A (every cell at one rate): the share of reports that name any finding
      (bench_truth.findings_of); target <= 5% familywise, as without adaptive stopping;
  (2) coverage: the share of stated 95% intervals (the cell's rate) that contain the true rate, over
      the cells an adaptive run stopped early (and their mean bias, stated rate - true rate), and
      over every cell; target >= 93-95%; and of the stated intervals of each cell's difference
      from the baseline (the true difference);
  (3) disclosure: the share of adaptive runs with a cell stopped early whose report says so, naming
      the rule (an anytime-valid sequential test) and the stopped cells (headline or the cell table's
      note); of stopped cells whose rate the table marks so; of reports naming a finding after a stop
      whose headline says the correction its findings survived (report.stopped: tests comparing a
      stopped cell also read off the anytime-valid intervals).
A "mix" scenario (the baseline and overlap=on cells at 15%, overlap=off cells at 2%: the DSV4 shape)
measures coverage where cells stop on a true difference; its findings are true ones, not errors.
Monte Carlo: each share is printed with its 95% Wilson interval.

    .venv/bin/python bench/bench_adaptive_honesty.py [--runs 1000] [--rates 0.02,0.10,0.15]
        [--iccs 0.03,0.10] [--directions lower,both] [--mix] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402
from bench_truth import findings_of, no_power_sentence, share, trial_rate  # noqa: E402

from orchestrator.core.config import read_inventory, read_matrix  # noqa: E402
from orchestrator.core.model import Matrix  # noqa: E402
from orchestrator.core.plan import make_plan  # noqa: E402
from orchestrator.core.records import EventRecord, MetricValue, RunManifest, TrialRecord  # noqa: E402
from orchestrator.core.sequential import Decision  # noqa: E402
from orchestrator.core.steps import Plan, Step  # noqa: E402
from orchestrator.report.build import build_report, stopped_note, with_adaptive_facts  # noqa: E402
from orchestrator.report.model import Report  # noqa: E402
from orchestrator.store.planrecord import make_manifest  # noqa: E402
from orchestrator.sweep.adaptive import AdaptiveSource  # noqa: E402
from orchestrator.sweep.sources import StepSource  # noqa: E402

SESSIONS = 10  # matrices/overlap_hunt.yaml: 10 sessions a trial, up to 8 rounds
STAMP = "2026-12-05T00:00:00Z"
METRIC = "corruption"
RateOf = Callable[[Step], float]


@dataclasses.dataclass
class Tally:
    """Counts over the runs of one scenario and design."""

    runs: int = 0
    found: int = 0  # reports naming any finding
    trials: int = 0
    covered: int = 0  # every cell's interval holds its true rate
    cells: int = 0
    stopped: int = 0  # cells stopped early (fewer trials than the plan's rounds)
    stopped_covered: int = 0
    bias: float = 0.0  # summed (stated rate - true rate) over stopped cells
    diffs: int = 0  # cells with an interval for their difference from the baseline
    diff_covered: int = 0  # of those, holding the true difference
    runs_stopping: int = 0  # runs with a cell stopped early
    disclosed: int = 0  # of those, reports saying so, with the rule and the cells
    marked: int = 0  # stopped cells whose rate the page marks as from a stop (ProportionCell.stopped)
    found_stopping: int = 0  # reports naming a finding in a run with a cell stopped early
    cautioned: int = 0  # of those, the headline saying the correction for the stopping (report.stopped)


@dataclasses.dataclass
class Sweep:
    records: list[TrialRecord]
    events: list[EventRecord]


def matrix_for(direction: str) -> Matrix:
    matrix = read_matrix(REPO / "matrices" / "overlap_hunt.yaml")
    assert matrix.adaptive is not None
    return dataclasses.replace(matrix, adaptive=dataclasses.replace(matrix.adaptive, direction=direction))  # type: ignore[arg-type]


def run_sweep(
    rng: np.random.Generator,
    plan: Plan,
    adaptive: bool,
    rate_of: RateOf,
    icc: float,
    make: Callable[[Step], TrialRecord] | None = None,
) -> Sweep:
    """One testbed takes trials as the runner does (next, run, record); a decision is journaled.
    `make` builds a step's trial (default: trial_record on `rng`; bench_adaptive_numbers adds a wall)."""
    make = make or (lambda step: trial_record(rng, step, rate_of(step), icc))
    events: list[EventRecord] = []

    def journal(cell: str, decision: Decision) -> None:  # as sweep.runner.Runner.cell_decided
        events.append(
            EventRecord(
                run_id="r1", event="cell_decided", at=STAMP, message=decision.reason, cell=cell, state=decision.state
            )
        )

    source: StepSource = (
        AdaptiveSource(plan.steps, set(), plan.matrix, on_decision=journal)
        if adaptive
        else StepSource(plan.steps, set())
    )
    records = []
    while (step := source.next()) is not None:
        record = make(step)
        source.record(record)
        records.append(record)
    return Sweep(records, events)


def trial_record(rng: np.random.Generator, step: Step, rate: float, icc: float) -> TrialRecord:
    t = step.trial
    k = int(rng.binomial(SESSIONS, trial_rate(rng, rate, icc)))
    return TrialRecord(
        run_id="r1", trial=t.index, round=t.round, cell=t.cell.id, levels=t.cell.as_dict(),
        is_baseline=t.is_baseline, testbed="tb0", status="completed", started=STAMP, ended=STAMP,
        duration_s=1.0, metrics={METRIC: MetricValue(kind="proportion", k=k, n=SESSIONS)},
    )  # fmt: skip


def manifest_of(plan: Plan, adaptive: bool) -> RunManifest:
    inventory = read_inventory(REPO / "inventory" / "local.yaml")
    manifest = make_manifest(plan, inventory, "r1", STAMP)
    update = {"metrics": {METRIC: "proportion"}, "adaptive": adaptive, "status": "completed", "ended": STAMP}
    return manifest.model_copy(update=update)


def discloses(report: Report, stopped: set[str]) -> bool:
    """Does the page say that trials stopped early, by which rule, and which cells?"""
    text = " ".join(f.text for f in report.headline)
    rule = "Adaptive stopping" in text and "anytime-valid" in text
    return rule and all(cell in text + stopped_note(report) for cell in stopped)


def tally_run(tally: Tally, report: Report, sweep: Sweep, rate_of_cell: dict[str, float], rounds: int) -> None:
    tally.runs += 1
    tally.trials += len(sweep.records)
    tally.found += bool(findings_of(report))
    stopped = set()
    for cell in report.cells:
        view = cell.proportions.get(METRIC)
        if view is None or view.rate.rate is None:
            continue
        truth = rate_of_cell[cell.cell]
        inside = view.rate.low <= truth <= view.rate.high
        tally.cells += 1
        tally.covered += inside
        if view.diff_low is not None and view.diff_high is not None and report.baseline_cell is not None:
            gap = truth - rate_of_cell[report.baseline_cell]
            tally.diffs += 1
            tally.diff_covered += view.diff_low <= gap <= view.diff_high
        if view.trials < rounds:
            stopped.add(cell.cell)
            tally.stopped += 1
            tally.stopped_covered += inside
            tally.bias += view.rate.rate - truth
            tally.marked += view.stopped
    if stopped:
        tally.runs_stopping += 1
        tally.disclosed += discloses(report, stopped)
        if findings_of(report):
            tally.found_stopping += 1
            tally.cautioned += any(
                "anytime-valid 95% intervals" in f.text and "allow for the stopping" in f.text for f in report.headline
            )


def scenario(args: argparse.Namespace, name: str, rate_of: RateOf, icc: float, direction: str) -> list[str]:
    """The scenario's figures, adaptive and fixed side by side (the same seeds for both)."""
    matrix = matrix_for(direction)
    testbed = next(iter(read_inventory(REPO / "inventory" / "local.yaml").testbeds.values()))
    lines = []
    for adaptive in (True, False):
        rng = np.random.default_rng([args.seed, zlib.crc32(f"{name},{icc},{direction}".encode())])
        tally = Tally()
        for _ in range(args.runs):
            plan = make_plan(matrix, testbed, int(rng.integers(1 << 30)))
            rates = {s.trial.cell.id: rate_of(s) for s in plan.steps}
            sweep = run_sweep(rng, plan, adaptive, rate_of, icc)
            report = with_adaptive_facts(build_report(manifest_of(plan, adaptive), sweep.records), sweep.events)
            tally_run(tally, report, sweep, rates, plan.replicates)
        lines.append(row(name, icc, direction, "adaptive" if adaptive else "fixed", tally))
    return lines


def row(name: str, icc: float, direction: str, design: str, t: Tally) -> str:
    head = f"  {name:<8} ICC {icc:.2f} {direction:<5} {design:<8}"
    parts = [f"any finding {share(t.found, t.runs)}", f"{t.trials / t.runs:5.1f} trials a run"]
    parts.append(f"coverage all cells {share(t.covered, t.cells)}")
    parts.append(f"differences {share(t.diff_covered, t.diffs)}")
    if t.stopped:
        parts.append(f"stopped cells {share(t.stopped_covered, t.stopped)}, bias {100 * t.bias / t.stopped:+.2f} pts")
        parts.append(f"runs saying so {share(t.disclosed, t.runs_stopping)}, cells marked {share(t.marked, t.stopped)}")
        cautioned = share(t.cautioned, t.found_stopping) if t.found_stopping else "(no finding after a stop)"
        parts.append(f"findings saying the correction {cautioned}")
    return head + ": " + "; ".join(parts)


def rates_for(name: str, rate: float) -> RateOf:
    if name == "mix":  # the DSV4 shape: overlap off removes most of the bug
        return lambda s: 0.02 if s.trial.cell.as_dict().get("overlap") == "off" else 0.15
    return lambda s: rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rates", default="0.02,0.10,0.15")
    parser.add_argument("--iccs", default="0.03,0.10")
    parser.add_argument("--directions", default="lower,both")
    parser.add_argument("--mix", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"bench_adaptive_honesty: {args.runs} runs per scenario and design, matrices/overlap_hunt.yaml "
        f"(2x2x2, up to 8 rounds of {SESSIONS} sessions), seed {args.seed}; load average {os.getloadavg()[0]:.1f}"
    )
    names = [f"A/A {float(r):.0%}" for r in args.rates.split(",")] + (["mix"] if args.mix else [])
    start = time.perf_counter()
    with no_power_sentence():
        for name in names:
            rate = float(name.split()[-1].rstrip("%")) / 100 if name != "mix" else 0.0
            for icc in (float(x) for x in args.iccs.split(",")):
                for direction in args.directions.split(","):
                    for line in scenario(args, name, rates_for(name, rate), icc, direction):
                        print(line)
                    sys.stdout.flush()
    print(f"\n{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
