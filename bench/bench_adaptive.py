"""Benchmark: adaptive stopping vs a fixed 80-session design on simulated DSV4 sweeps.

The DSV4 sweep (DESIGN.md section 1): a baseline at 15% corruption (bf16 index-K, CUDA graph
and overlap all on) and 7 other cells at 0-2% (overlap or CUDA graph off: 0%; fp8 index-K:
1-2%), rounds of 10 sessions, at most 8 rounds (the fixed design: 80 sessions per cell). Each
simulated sweep draws every trial of all 8 rounds once; the fixed design analyses all of it
(Fisher exact per cell vs baseline, Holm at 0.05 over the 7 cells), the adaptive design sees
the rounds one by one (the baseline runs while any cell is open) and stops each cell when
orchestrator.core.sequential.decide says so. Same data, so the decisions compare directly. As
the runner does (issue 13: the trial is the unit of replication), no cell is decided on one
round, and the sessions are weighed by the variance inflation of every trial so far
(orchestrator.core.clustered): with rounds of 10 sessions and events in the baseline alone, that
inflation rests on few degrees of freedom, which delays decisions (question 'both', alpha 0.05,
100 sweeps: sessions used rose from 70% / 54% to 83% / 76% of the fixed design's in the DSV4 /
issue 6 sweeps; with Bonferroni from 86% / 76% to 94% / 89%).

Prints, over --sweeps simulated sweeps (goals, not asserted; tests/test_sequential.py asserts
the error bounds):
  (a) how often adaptive reaches the same decisions as the fixed design (all 7 cells, per cell);
  (b) mean and p90 fraction of sessions used vs fixed (baseline included; goal <= 50%);
  (c) type I error in A/A sweeps (all 8 cells at one rate), per cell and per sweep.
Each is printed for the per-comparison alpha (0.05, what a policy of alpha=0.05 gives) and for
Bonferroni over the 7 comparisons (alpha=0.05/7: family-wise error like the fixed Holm design),
and for each question (--directions): "both" (does the cell differ from the baseline?) and
"lower" (does the cell lower the rate? - the bug hunt's question when the baseline has the bug).
The fixed design asks the same question: two-sided Fisher for "both", one-sided for "lower";
(a) also prints agreement with the two-sided fixed design for a one-sided question.

    /root/venv-orch/bin/python bench/bench_adaptive.py [--sweeps 500] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from orchestrator.core.clustered import dispersion
from orchestrator.core.sequential import SequentialPolicy, decide
from orchestrator.core.stats import fisher_exact, holm

BASELINE_RATE = 0.15
CELL_RATES = (0.0, 0.0, 0.0, 0.01, 0.01, 0.02, 0.02)  # overlap/graph off; fp8 cells
CELL_NAMES = (
    "overlap-off",
    "graph-off",
    "graph-off+overlap-off",
    "fp8",
    "fp8+overlap-off",
    "fp8+graph-off",
    "fp8+both-off",
)
SESSIONS = 10
ROUNDS = 8
ALPHA = 0.05


@dataclass(frozen=True)
class SweepOutcome:
    """One simulated sweep: per-cell decisions of both designs and the sessions adaptive used."""

    fixed_different: tuple[bool, ...]  # the fixed design asking the adaptive design's question
    two_sided_different: tuple[bool, ...]  # the two-sided fixed design
    adaptive_states: tuple[str, ...]
    sessions_fraction: float

    @property
    def adaptive_different(self) -> tuple[bool, ...]:
        return tuple(s == "different" for s in self.adaptive_states)

    @property
    def hybrid_different(self) -> tuple[bool, ...]:
        """Adaptive, and at max rounds the fixed test on the full 80 sessions has the last word."""
        return tuple(
            s == "different" or (s == "max_rounds" and f)
            for s, f in zip(self.adaptive_states, self.fixed_different, strict=True)
        )


BASELINE_RUNS = [1]  # baseline trials per round in the adaptive design (--baseline-runs)


def draw(rng: np.random.Generator, base: float, cells: Sequence[float]) -> np.ndarray:
    """Event counts [arm, round] for the baseline (arm 0) and every cell, all rounds at once.
    The baseline's count is per trial; extra baseline trials of a round come from extra_draw."""
    rates = np.array([base, *cells])
    return rng.binomial(SESSIONS, rates[:, None], size=(rates.size, ROUNDS))


def fixed_design(counts: np.ndarray, direction: str = "both") -> tuple[bool, ...]:
    """Fisher exact of each cell's 80 sessions vs the baseline's, Holm over the cells;
    one-sided ("is the cell lower / higher?") when the question is."""
    n = SESSIONS * ROUNDS
    kb = int(counts[0].sum())
    if direction == "both":
        pvalues = [fisher_exact(int(row.sum()), n, kb, n) for row in counts[1:]]
    else:
        alternative = "less" if direction == "lower" else "greater"
        pvalues = [
            float(sps.fisher_exact([[int(row.sum()), n - int(row.sum())], [kb, n - kb]], alternative=alternative)[1])
            for row in counts[1:]
        ]
    return tuple(p < ALPHA for p in holm(pvalues))


def adaptive_design(counts: np.ndarray, policy: SequentialPolicy) -> tuple[tuple[str, ...], int]:
    """Each cell's final state and the sessions run (baseline while any cell is open)."""
    cells = counts.shape[0] - 1
    states = ["continue"] * cells
    stopped = [ROUNDS] * cells
    baseline_rounds = 0
    for r in range(1, ROUNDS + 1):
        open_cells = [c for c in range(cells) if states[c] == "continue"]
        if not open_cells:
            break
        baseline_rounds = r
        if r < 2:  # as the runner: no cell is decided on one round (the trial is the unit)
            continue
        base = [(int(k), SESSIONS * BASELINE_RUNS[0]) for k in counts[0, :r]]
        ran = [base] + [[(int(k), SESSIONS) for k in counts[c + 1, : min(r, stopped[c])]] for c in range(cells)]
        inflation = dispersion(ran).inflation()  # as the runner: every trial so far, pooled
        for c in open_cells:
            cell = [(int(k), SESSIONS) for k in counts[c + 1, :r]]
            decision = decide(policy, cell, base, dispersion=inflation)
            if decision.state != "continue":
                states[c], stopped[c] = decision.state, r
    return tuple(states), SESSIONS * (BASELINE_RUNS[0] * baseline_rounds + sum(stopped))


def sweep(rng: np.random.Generator, base: float, cells: Sequence[float], policy: SequentialPolicy) -> SweepOutcome:
    counts = draw(rng, base, cells)
    adaptive_counts = counts.copy()
    if BASELINE_RUNS[0] > 1:  # the adaptive design's baseline runs more sessions per round
        extra = rng.binomial(SESSIONS * (BASELINE_RUNS[0] - 1), base, size=ROUNDS)
        adaptive_counts[0] = counts[0] + extra
    states, sessions = adaptive_design(adaptive_counts, policy)
    two_sided = fixed_design(counts)
    return SweepOutcome(
        fixed_different=two_sided if policy.direction == "both" else fixed_design(counts, policy.direction),
        two_sided_different=two_sided,
        adaptive_states=states,
        sessions_fraction=sessions / (SESSIONS * ROUNDS * (len(cells) + 1)),
    )


def report_different(outcomes: Sequence[SweepOutcome], rates: Sequence[float], names: Sequence[str]) -> None:
    """Every cell truly differs from the baseline here: 'different' is the right answer."""
    fixed = np.array([o.fixed_different for o in outcomes])
    two_sided = np.array([o.two_sided_different for o in outcomes])
    adaptive = np.array([o.adaptive_different for o in outcomes])
    hybrid = np.array([o.hybrid_different for o in outcomes])
    fraction = np.array([o.sessions_fraction for o in outcomes])
    same = fixed == adaptive
    print(
        f"  (a) same decisions as fixed, all {len(rates)} cells: {same.all(1).mean():.1%}"
        f" of sweeps (per cell {same.mean():.1%}); all {len(rates)} found "
        f"different: fixed {fixed.all(1).mean():.1%}, adaptive {adaptive.all(1).mean():.1%}"
    )
    if not (fixed == two_sided).all():
        print(
            f"      vs the two-sided fixed design: same decisions {(two_sided == adaptive).all(1).mean():.1%}"
            f" of sweeps (per cell {(two_sided == adaptive).mean():.1%}); all found different: "
            f"{two_sided.all(1).mean():.1%}"
        )
    print(
        f"      adaptive says different where fixed does not: {(adaptive & ~fixed).mean():.1%} "
        f"of cells; fixed where adaptive does not: {(fixed & ~adaptive).mean():.1%}"
    )
    print(
        f"      adaptive + fixed test for cells reaching max rounds: same decisions "
        f"{(fixed == hybrid).all(1).mean():.1%} of sweeps "
        f"(per cell {(fixed == hybrid).mean():.1%})"
    )
    for i, (name, rate) in enumerate(zip(names, rates, strict=True)):
        states = [o.adaptive_states[i] for o in outcomes]
        tally = ", ".join(
            f"{s} {states.count(s) / len(states):.0%}"
            for s in ("different", "no_difference", "max_rounds")
            if s in states
        )
        print(
            f"      {name:>22} {rate:4.0%} vs {BASELINE_RATE:.0%}: fixed different "
            f"{fixed[:, i].mean():.0%}; adaptive {tally}"
        )
    print(
        f"  (b) sessions used vs fixed: mean {fraction.mean():.1%}, p90 {np.quantile(fraction, 0.9):.1%} (goal <= 50%)"
    )


def report_aa(outcomes: Sequence[SweepOutcome], rate: float) -> None:
    fixed = np.array([o.fixed_different for o in outcomes])
    adaptive = np.array([o.adaptive_different for o in outcomes])
    hybrid = np.array([o.hybrid_different for o in outcomes])
    fraction = np.array([o.sessions_fraction for o in outcomes])
    states = [s for o in outcomes for s in o.adaptive_states]
    print(
        f"  (c) A/A at {rate:.0%}: false 'different' per cell: adaptive {adaptive.mean():.2%}, "
        f"fixed {fixed.mean():.2%}, adaptive+fixed {hybrid.mean():.2%}; per sweep (any of "
        f"{fixed.shape[1]}): adaptive {adaptive.any(1).mean():.1%}, fixed "
        f"{fixed.any(1).mean():.1%}, adaptive+fixed {hybrid.any(1).mean():.1%}; "
        f"no_difference {states.count('no_difference') / len(states):.0%} of cells; "
        f"sessions used {fraction.mean():.0%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--directions", default="both,lower", help="the questions to simulate, comma-separated: both, lower, higher"
    )
    parser.add_argument(
        "--baseline-runs",
        type=int,
        default=1,
        help="baseline trials per round in the adaptive design (matrix adaptive.baseline_runs)",
    )
    args = parser.parse_args()
    BASELINE_RUNS[0] = args.baseline_runs
    cells = len(CELL_RATES)
    print(
        f"{SESSIONS} sessions a round, max {ROUNDS} rounds (fixed design: {SESSIONS * ROUNDS} "
        f"sessions per cell, Fisher + Holm at {ALPHA}); {args.sweeps} simulated sweeps per line"
    )
    settings = [
        (direction, label, alpha)
        for direction in args.directions.split(",")
        for label, alpha in (("per-comparison alpha 0.05", ALPHA), (f"Bonferroni alpha 0.05/{cells}", ALPHA / cells))
    ]
    for direction, label, alpha in settings:
        policy = SequentialPolicy(alpha=alpha, max_rounds=ROUNDS, direction=direction)  # type: ignore[arg-type]
        start = time.perf_counter()
        rng = np.random.default_rng(args.seed)
        print(f"adaptive, question {direction!r}, with {label} (power {policy.power}, effect {policy.effect}):")
        print(f" DSV4 sweep: baseline {BASELINE_RATE:.0%}, cells {', '.join(f'{r:.0%}' for r in CELL_RATES)}")
        report_different(
            [sweep(rng, BASELINE_RATE, CELL_RATES, policy) for _ in range(args.sweeps)], CELL_RATES, CELL_NAMES
        )
        clean = (0.0,) * cells
        print(f" issue 6 rates: baseline {BASELINE_RATE:.0%}, all {cells} cells 0%")
        report_different(
            [sweep(rng, BASELINE_RATE, clean, policy) for _ in range(args.sweeps)],
            clean,
            [f"cell {i + 1}" for i in range(cells)],
        )
        print(" A/A sweeps (all 8 cells at one rate):")
        for rate in (0.0, 0.02, 0.15):
            report_aa([sweep(rng, rate, [rate] * cells, policy) for _ in range(args.sweeps)], rate)
        print(f"  ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
