"""Benchmark: does a difference between parallel testbeds read as a factor's effect? Simulated A/A
sweeps on parallel testbeds (two; --testbeds N), through the real plan (core.plan.make_plan) and the real step sources
(sweep.sources.StepSource for a fixed design, sweep.adaptive.AdaptiveSource for adaptive stopping),
driven by a simulated clock, then the report's own analysis (report.build.build_report).

No cell differs from another. One testbed differs from the other: `fail`: tb1 fails 10 more
sessions in 100 (tb0 at --rate, tb1 at --rate + 0.10); `slow`: tb1's numeric metric (wall) is 20%
higher. Both testbeds run at one pace (a trial takes 1 s, +-5% jitter; each testbed starts at a
random time within the first trial), which is where handing out in plan order lines a testbed up
with a cell. The trial is the unit of replication: a trial's rate is Beta with intra-trial
correlation --icc, its wall has a trial effect (bench_truth's draws).

Per scenario (source x order x testbed difference): the share of reports that state any finding
(bench_truth.findings_of: a headline finding, or any cell / effect / interaction / numeric effect /
neighbour marked a finding; 5% is the standard), with its 95% Wilson interval; for adaptive
sweeps also the share of sweeps in which the stopping rule decided any cell "different" (the
report says those as info at the adaptive alpha, per comparison), and the mean share of cells whose
completed trials all ran on one testbed, and the roles restarted a sweep (summed over the testbeds:
a role restarts when its env differs from its testbed's last trial; every role on a testbed's first).

    .venv/bin/python bench/bench_handout.py [--reports 200] [--sources adaptive,fixed]
        [--orders sequential,randomized,min-restarts] [--scenarios fail,slow] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import os
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # run builders shared with the tests
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402
from bench_truth import findings_of, latency, no_power_sentence, share, trial_rate  # noqa: E402

from orchestrator.core.config import read_inventory, read_matrix  # noqa: E402
from orchestrator.core.model import Matrix  # noqa: E402
from orchestrator.core.plan import make_plan  # noqa: E402
from orchestrator.core.records import MetricValue, RunManifest, TrialRecord  # noqa: E402
from orchestrator.core.steps import Plan, Step  # noqa: E402
from orchestrator.report.build import build_report  # noqa: E402
from orchestrator.store.planrecord import make_manifest  # noqa: E402
from orchestrator.sweep.adaptive import AdaptiveSource  # noqa: E402
from orchestrator.sweep.sources import StepSource, restarted_roles  # noqa: E402

SESSIONS = 10  # matrices/overlap_hunt.yaml's repro: 10 sessions a trial, up to 8 rounds
STAMP = "2026-12-05T00:00:00Z"
WALL_S = 30.0


@dataclasses.dataclass(frozen=True)
class Scenario:
    source: str  # "adaptive" | "fixed"
    testbeds: int  # tb0, tb1, ...: tb1 differs, the others are alike
    order: str  # "sequential" | "randomized"
    difference: str  # "fail" | "slow"

    def rate(self, base: float, testbed: str) -> float:
        return base + 0.10 if self.difference == "fail" and testbed == "tb1" else base

    def wall(self, testbed: str) -> float:
        return WALL_S * 1.2 if self.difference == "slow" and testbed == "tb1" else WALL_S


def matrix_for(order: str) -> Matrix:
    matrix = read_matrix(REPO / "matrices" / "overlap_hunt.yaml")
    return dataclasses.replace(matrix, order=order)  # type: ignore[arg-type]


@dataclasses.dataclass
class Sweep:
    records: list[TrialRecord]
    decided: list[str]  # cells the adaptive rule decided 'different'
    restarts: int  # roles restarted, summed over the testbeds (a role whose env differs from its testbed's last trial)


def simulate(rng: np.random.Generator, plan: Plan, scenario: Scenario, base: float, icc: float) -> Sweep:
    """The testbeds take trials from the source as they become free (a simulated clock); each
    trial is recorded into the source when it ends, as the runner does."""
    decided: list[str] = []
    last: dict[str, Step] = {}
    restarts = 0
    source: StepSource
    if scenario.source == "adaptive":
        source = AdaptiveSource(
            plan.steps,
            set(),
            plan.matrix,
            on_decision=lambda cell, d: decided.append(cell) if d.state == "different" else None,
        )
    else:
        source = StepSource(plan.steps, set(), fewest_restarts=plan.matrix.order == "min-restarts")  # as sweep.api
    # (when free, tie-break, testbed): each testbed starts when its own preflight ends, not in step
    free = [(float(rng.uniform(0, 1)), i, f"tb{i}") for i in range(scenario.testbeds)]
    running: list[tuple[float, int, str, TrialRecord]] = []
    records: list[TrialRecord] = []
    serial = 0
    while free or running:
        while free:
            now, _, testbed = heapq.heappop(free)
            step = source.next(testbed)
            if step is None:
                continue  # this testbed's runner ends
            restarts += changed_roles(last.get(testbed), step)
            last[testbed] = step
            record = trial_record(rng, step, testbed, scenario, base, icc)
            serial += 1
            heapq.heappush(running, (now + float(np.exp(rng.normal(0, 0.05))), serial, testbed, record))
        if running:
            end, n, testbed, record = heapq.heappop(running)
            source.record(record)
            records.append(record)
            heapq.heappush(free, (end, n, testbed))
    return Sweep(sorted(records, key=lambda r: r.trial), decided, restarts)


def changed_roles(before: Step | None, after: Step) -> int:
    """Roles a testbed restarts going from its last trial to this one (every role the first time)."""
    return len(after.env) if before is None else restarted_roles(before, after)


def trial_record(
    rng: np.random.Generator, step: Step, testbed: str, scenario: Scenario, base: float, icc: float
) -> TrialRecord:
    t = step.trial
    k = int(rng.binomial(SESSIONS, trial_rate(rng, scenario.rate(base, testbed), icc)))
    return TrialRecord(
        run_id="r1", trial=t.index, round=t.round, cell=t.cell.id, levels=t.cell.as_dict(),
        is_baseline=t.is_baseline, testbed=testbed, status="completed", started=STAMP, ended=STAMP,
        duration_s=1.0,
        metrics={
            "corruption": MetricValue(kind="proportion", k=k, n=SESSIONS),
            "wall": MetricValue(kind="number", value=latency(rng, scenario.wall(testbed), 0.1, SESSIONS)),
        },
    )  # fmt: skip


def manifest_of(plan: Plan, adaptive: bool, testbeds: int) -> RunManifest:
    inventory = read_inventory(REPO / "inventory" / "local.yaml")
    manifest = make_manifest(plan, inventory, "r1", STAMP, testbeds=[f"tb{i}" for i in range(testbeds)])
    return manifest.model_copy(
        update={
            "metrics": {"corruption": "proportion", "wall": "number"},
            "adaptive": adaptive,
            "status": "completed",
            "ended": STAMP,
        }
    )


def one_sided(records: list[TrialRecord]) -> float:
    """The share of cells whose trials all ran on one testbed."""
    by_cell: dict[str, set[str]] = {}
    for r in records:
        by_cell.setdefault(r.cell, set()).add(r.testbed)
    return sum(len(tbs) == 1 for tbs in by_cell.values()) / len(by_cell)


def run_scenario(rng: np.random.Generator, scenario: Scenario, reports: int, base: float, icc: float) -> str:
    testbed = next(iter(read_inventory(REPO / "inventory" / "local.yaml").testbeds.values()))
    matrix = matrix_for(scenario.order)
    found = different = 0
    alone = 0.0
    trials = restarts = 0
    examples: Counter[str] = Counter()
    start = time.process_time()
    for _ in range(reports):
        plan = make_plan(matrix, testbed, int(rng.integers(1 << 30)), order=scenario.order)
        sweep = simulate(rng, plan, scenario, base, icc)
        manifest = manifest_of(plan, scenario.source == "adaptive", scenario.testbeds)
        said = findings_of(build_report(manifest, sweep.records))
        found += bool(said)
        different += bool(sweep.decided)
        alone += one_sided(sweep.records)
        trials += len(sweep.records)
        restarts += sweep.restarts
        examples.update(s.split(" ")[0] + " " + s.split(" ")[1] for s in said[:1])
    cpu = (time.process_time() - start) / reports
    line = f"  {scenario.source:<8} {scenario.order:<10} {scenario.difference:<4}: any finding {share(found, reports)}"
    if scenario.source == "adaptive":
        line += f"; rule decided a cell 'different' {share(different, reports)}"
    line += (
        f"; cells on one testbed only {100 * alone / reports:4.1f}%; {trials / reports:.0f} trials and "
        f"{restarts / reports:.0f} roles restarted a sweep"
        f" ({cpu * 1000:.0f} ms CPU a report)"
    )
    if examples:
        line += "\n      first finding by kind: " + ", ".join(f"{k} {n}" for k, n in examples.most_common(4))
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reports", type=int, default=200)
    parser.add_argument("--sources", default="adaptive,fixed")
    parser.add_argument("--orders", default="sequential,randomized")
    parser.add_argument("--scenarios", default="fail,slow")
    parser.add_argument("--rate", type=float, default=0.05, help="tb0's failure rate (tb1 10 points more in `fail`)")
    parser.add_argument("--icc", type=float, default=0.02)
    parser.add_argument("--testbeds", type=int, default=2, help="tb1 differs, the others are like tb0")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"bench_handout: {args.reports} reports per scenario, {args.testbeds} testbeds, "
        f"2x2x2 (matrices/overlap_hunt.yaml), up to 8 rounds of {SESSIONS} sessions, rate {args.rate:.0%}, "
        f"ICC {args.icc}, seed {args.seed}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    start = time.perf_counter()
    with no_power_sentence():
        for source in args.sources.split(","):
            for order in args.orders.split(","):
                for difference in args.scenarios.split(","):
                    rng = np.random.default_rng([args.seed, zlib.crc32(f"{source},{order},{difference}".encode())])
                    scenario = Scenario(source, args.testbeds, order, difference)
                    print(run_scenario(rng, scenario, args.reports, args.rate, args.icc))
                    sys.stdout.flush()
    print(f"\n{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
