"""Benchmark: the statistics calls a report makes thousands of times, orch's beside scipy's.

A report ranks every stratum of every number effect (van Elteren's test), runs a chi-square
heterogeneity test per cell, per round check and per testbed check, and a Fisher test per cell
and per nightly comparison. orch computes the ranks and the chi-square with scipy's own steps
(core.ranks.midranks, core.stats.pearson_chi2: the same numbers, without ~0.2-0.5 ms of argument
handling a call) and remembers Fisher's p per table; each row times both on the same inputs, in
one run, and checks the results are equal. Five rows time the library calls every report makes
(Wilson, Newcombe, Fisher, Mann-Whitney, the drift check's trend test), written out in core.stats
and core.ranks so that the report imports neither statsmodels nor scipy.stats. The last rows
time a whole number effect (2 x 2 design, unequal strata: the exact stratified test) and a
report's second render (one jinja2 environment per process instead of a fresh one, which
compiled the template again).

    python bench/bench_stat_calls.py [--calls 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from scipy import stats as sps
from timing import best_of, load_line

from orchestrator.core import findings, ranks, stats


def per_call(repeat: int, calls: int, work: Callable[[int], object]) -> float:
    """Microseconds a call: the best of `repeat` runs of `calls` calls."""
    return best_of(repeat, lambda: [work(i) for i in range(calls)]) / calls * 1e6


def row(name: str, ours: float, theirs: float, what: str) -> None:
    print(f"{name}: orch {ours:.1f} us, {what} {theirs:.1f} us, ratio {theirs / max(ours, 1e-9):.1f}x")


def inputs(calls: int) -> tuple[list[np.ndarray], list[np.ndarray], list[tuple[int, int, int, int]]]:
    """Seeded: trial values with ties (ranks), 2-12 row tables of k/n (chi-square), 2 x 2 counts
    from a few dozen distinct tables (Fisher, as a report's cells and nights repeat them)."""
    rng = np.random.default_rng(5)
    values = [rng.integers(0, 6, int(rng.integers(2, 16))).astype(float) for _ in range(calls)]
    tables = []
    while len(tables) < calls:
        n = rng.integers(20, 60, int(rng.integers(2, 13)))
        k = rng.binomial(n, 0.15)
        if 0 < k.sum() < n.sum():
            tables.append(np.column_stack([k, n - k]).astype(float))
    fisher = [(int(a), 40, int(b), 40) for a, b in rng.binomial(40, 0.15, (calls, 2))]
    return values, tables, fisher


def number_effect_ms(repeat: int) -> float:
    """One number effect of a 2 x 2 design with strata of 3 vs 4 and 4 vs 4 trials (ms)."""
    rng = np.random.default_rng(6)
    sizes = {("on", "on"): 4, ("off", "on"): 3, ("on", "off"): 4, ("off", "off"): 4}
    cells = [
        findings.CellValues({"a": a, "b": b}, tuple(rng.normal(100 + 10 * (b == "off"), 1.0, n)))
        for (a, b), n in sizes.items()
    ]
    levels = {"a": ["on", "off"], "b": ["on", "off"]}
    return best_of(repeat, lambda: findings.number_effects(cells, levels, {"a": "on", "b": "on"})) * 1000


def render_ms() -> tuple[float, float]:
    """(first, second) render of the same small report in this process (ms)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from helpers.report_synth import synthetic_run

    from orchestrator.report.build import build_report
    from orchestrator.report.render import render_report

    report = build_report(*synthetic_run(replicates=2))
    times = []
    for _ in range(2):
        start = time.perf_counter()
        render_report(report)
        times.append((time.perf_counter() - start) * 1000)
    return times[0], times[1]


def scipy_mann_whitney(x: np.ndarray, y: np.ndarray) -> float:
    """scipy's two-sided p; where every value ties, 1.0 as orch (and scipy up to 1.17) says: scipy
    1.18 (Python 3.12+) says nan there, and this check stopped on the first such draw."""
    p = float(sps.mannwhitneyu(x, y).pvalue)
    return 1.0 if np.isnan(p) and np.unique(np.concatenate([x, y])).size == 1 else p


def written_out(args: argparse.Namespace, fisher: list[tuple[int, int, int, int]], values: list[np.ndarray]) -> None:
    """The library calls every report makes, written out in core.stats and core.ranks so that
    rendering it imports neither statsmodels nor scipy.stats: each beside the call it replaces, after
    checking both give the same floats."""
    from statsmodels.stats.contingency_tables import Table
    from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

    rounds = [np.array([[k1, 40.0 - k1], [k2, 40.0 - k2], [3.0, 37.0]]) for k1, _, k2, _ in fisher]
    scores, columns = np.array([0.0, 1.0, 2.0]), np.array([0.0, 1.0])
    pairs: list[tuple[str, Callable[[int], object], Callable[[int], object]]] = [
        (
            "wilson vs proportion_confint",
            lambda i: stats._wilson_bounds(fisher[i][0], 40, 0.95),
            lambda i: tuple(float(x) for x in proportion_confint(fisher[i][0], 40, alpha=1 - 0.95, method="wilson")),
        ),
        (
            "newcombe vs confint_proportions_2indep",
            lambda i: stats.rate_difference_ci(*fisher[i]),
            lambda i: tuple(float(x) for x in confint_proportions_2indep(*fisher[i], method="newcomb", alpha=1 - 0.95)),
        ),
        (
            "fisher_exact, not remembered, vs fisher_exact",
            lambda i: stats._fisher_p.__wrapped__(*fisher[i]),
            lambda i: float(
                sps.fisher_exact([[fisher[i][0], 40 - fisher[i][0]], [fisher[i][2], 40 - fisher[i][2]]]).pvalue
            ),
        ),
        (
            "mann_whitney vs mannwhitneyu",
            lambda i: ranks.mann_whitney(values[i][: len(values[i]) // 2], values[i][len(values[i]) // 2 :]),
            lambda i: scipy_mann_whitney(values[i][: len(values[i]) // 2], values[i][len(values[i]) // 2 :]),
        ),
        (
            "trend vs test_ordinal_association",
            lambda i: stats._ordinal_association(rounds[i], scores, columns),
            lambda i: (lambda r: (float(r.zscore), float(r.pvalue)))(
                Table(rounds[i]).test_ordinal_association(row_scores=scores, col_scores=columns)
            ),
        ),
    ]
    for name, ours, theirs in pairs:
        for i in range(args.calls):
            if ours(i) != theirs(i):
                raise SystemExit(f"{name}: orch and the library differ on {fisher[i]}")
        row(name, per_call(args.repeat, args.calls, ours), per_call(args.repeat, args.calls, theirs), "library")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    args = parser.parse_args()
    print(load_line())
    values, tables, fisher = inputs(args.calls)
    for v in values:
        if not np.array_equal(ranks.midranks(v), sps.rankdata(v)):
            raise SystemExit(f"midranks differ from rankdata on {v}")
    for t in tables:
        want = sps.chi2_contingency(t, correction=False)
        if stats.pearson_chi2(t) != (float(want.statistic), float(want.pvalue)):
            raise SystemExit(f"pearson_chi2 differs from chi2_contingency on {t.tolist()}")
    row(
        "midranks vs rankdata",
        *(
            per_call(args.repeat, args.calls, f)
            for f in (lambda i: ranks.midranks(values[i]), lambda i: sps.rankdata(values[i]))
        ),
        "scipy",
    )
    row(
        "pearson_chi2 vs chi2_contingency",
        *(
            per_call(args.repeat, args.calls, f)
            for f in (
                lambda i: stats.pearson_chi2(tables[i]),
                lambda i: sps.chi2_contingency(tables[i], correction=False),
            )
        ),
        "scipy",
    )
    distinct = len(set(fisher))
    scipy_fisher = per_call(
        args.repeat,
        args.calls,
        lambda i: sps.fisher_exact([[fisher[i][0], 40 - fisher[i][0]], [fisher[i][2], 40 - fisher[i][2]]]),
    )
    row(
        f"fisher_exact ({distinct} distinct tables)",
        per_call(args.repeat, args.calls, lambda i: stats.fisher_exact(*fisher[i])),
        scipy_fisher,
        "scipy",
    )
    written_out(args, fisher, values)
    ours = number_effect_ms(args.repeat)
    midranks = ranks.midranks
    try:
        ranks.midranks = sps.rankdata  # the same ranks, by the scipy call van Elteren's test made before
        theirs = number_effect_ms(args.repeat)
    finally:
        ranks.midranks = midranks
    row("number effect, 2 x 2, strata 3v4 + 4v4", ours * 1000, theirs * 1000, "with scipy's rankdata")
    first, second = render_ms()
    print(f"report render: first {first:.1f} ms (compiles the template), second {second:.1f} ms, ", end="")
    print(f"ratio {first / max(second, 1e-9):.1f}x")


if __name__ == "__main__":
    main()
