"""Tests that can never be significant by design leave the Holm family (core.family.unreachable).

The demo's matrix at 2 trials per cell counted 14 numeric cell-vs-baseline tests (wall and anomalies,
7 each) whose smallest possible Mann-Whitney p is 0.19: they could never be findings, yet every real
finding had to pass alpha/49 at Holm's first step instead of alpha/35. A test whose smallest
achievable p, from the trials each side has alone (ties included), is at or above ALPHA is left out;
one whose ties or trials make significance reachable stays.
"""

from __future__ import annotations

import itertools

import numpy as np

from orchestrator.core import findings, ranks
from orchestrator.core.family import Design, MetricDesign, members, planned, unreachable
from orchestrator.core.stats import ALPHA

FACTORS = {f: ["on", "off"] for f in ("a", "b", "c")}
REFERENCE = {f: "on" for f in FACTORS}
CELLS = {
    "-".join(levels): dict(zip(FACTORS, levels, strict=True))
    for levels in itertools.product(["on", "off"], repeat=len(FACTORS))
}
BASE = "on-on-on"


def design(trials: dict[str, int] | None) -> Design:
    metrics = {
        "corruption": MetricDesign("proportion", CELLS),
        "wall": MetricDesign("number", CELLS, trials=trials),
        "anomalies": MetricDesign("number", CELLS, trials=trials),
    }
    return Design(FACTORS, REFERENCE, BASE, metrics)


def each(n: int) -> dict[str, int]:
    return dict.fromkeys(CELLS, n)


def numbers_vs_baseline(keys: list[tuple[str, str, object]]) -> list[tuple[str, str, object]]:
    return [k for k in keys if k[0] == "number"]


def test_two_trials_a_side_leave_exactly_the_numeric_cell_vs_baseline_tests_out() -> None:
    everything = members(design(None))
    kept = members(design(each(2)))
    out = unreachable(design(each(2)))
    assert len(out) == 14 and set(out) == set(numbers_vs_baseline(everything))
    assert kept == [k for k in everything if k not in set(out)]
    # the factor effects pool 4 cells a side (8 vs 8 trials) and stay; so do every proportion test
    assert [k for k in kept if k[1] != "corruption"] == [k for k in everything if k[0] == "number_effect"]
    assert len(everything) - len(kept) == 14


def test_four_trials_a_side_or_ties_that_can_reach_significance_keep_them() -> None:
    assert unreachable(design(each(4))) == []
    # 3 vs 3: the exact test's floor is 0.1, but tied sides switch to the normal approximation,
    # which reaches 0.047: such a test can be a finding, so it stays
    assert ranks.mann_whitney_min_p(3, 3) > ALPHA > ranks.mann_whitney_smallest_p(3, 3)
    assert unreachable(design(each(3))) == []
    assert members(design(each(3))) == members(design(None))


def test_each_cell_is_judged_by_its_own_trials_and_the_baselines() -> None:
    """2 vs 4 reaches 0.0504 at best (left out), 2 vs 5 reaches 0.027 (kept)."""
    trials = each(5) | {BASE: 2, "off-on-on": 4, "on-off-on": 1}
    out = {which for _, metric, which in unreachable(design(trials)) if metric == "wall"}
    assert out == {"off-on-on", "on-off-on"}


def test_the_plan_states_the_family_without_them_and_counts_them() -> None:
    at_two, at_four = planned(design(each(2))), planned(design(each(4)))
    assert at_four.unreachable == {}
    assert at_two.unreachable == {"wall": 7, "anomalies": 7}
    assert at_two.total == at_four.total - 14
    assert at_two.sizes["wall"] == 3 and at_two.sizes["corruption"] == at_four.sizes["corruption"]


def test_holm_over_the_remaining_tests_keeps_any_false_finding_at_or_below_alpha() -> None:
    """A/A: every cell's values from one distribution, 2 trials a cell (so the left-out tests are the
    7 cell-vs-baseline ones, the 3 pooled factor effects remain); 600 runs, Holm over the remaining
    family. The rate of any finding stays <= 5% within 3 Monte Carlo standard errors."""
    rng = np.random.default_rng(11)
    kept = {k for k in members(design(each(2))) if k[1] == "wall"}
    runs, any_finding = 600, 0
    for _ in range(runs):
        values = {cell: rng.normal(size=2).tolist() for cell in CELLS}
        pvalues = {("number", "wall", c): ranks.mann_whitney(values[c], values[BASE]) for c in CELLS if c != BASE}
        cells = [findings.CellValues(levels=CELLS[c], values=tuple(v)) for c, v in values.items()]
        for effect in findings.number_effects(cells, FACTORS, REFERENCE):
            pvalues[("number_effect", "wall", (effect.factor, effect.level))] = effect.p
        adjusted = findings.adjust({k: p for k, p in pvalues.items() if k in kept})
        assert set(adjusted) == kept
        any_finding += any(findings.is_finding(p) for p in adjusted.values())
    rate, error = any_finding / runs, (ALPHA * (1 - ALPHA) / runs) ** 0.5
    assert rate <= ALPHA + 3 * error
