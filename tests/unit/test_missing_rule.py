"""The one rule behind every "without data" caution (report.missing), on hand-made cells: the
compared cells' shares of finished trials without a metric must differ by MATERIAL or more.
Cells that lost alike, whatever they lost, get no caution; a cell that finished nothing has no
share and is left out; a cell with no count for a metric lost none of it."""

from __future__ import annotations

import pytest

from orchestrator.report import missing
from orchestrator.report.missing import Lost
from orchestrator.report.model import CellView, ProportionCell, RateView


def cell(name: str, ran: int, lost: dict[str, int] | None = None, *, baseline: bool = False) -> CellView:
    return CellView(
        cell=name,
        levels={"f": name},
        is_baseline=baseline,
        planned=ran,
        completed=ran - sum((lost or {}).values()),
        failed=0,
        proportions={},
        numbers={},
        ran=ran,
        missing=lost or {},
    )


def test_cells_that_lost_the_same_large_share_are_alike() -> None:
    a, b = cell("a", 10, {"latency": 5}), cell("b", 10, {"latency": 5})
    assert missing.unalike("latency", [a, b]) is None
    assert missing.clause("latency", [a, b]) == "" and missing.mark("latency", [a, b]) == ""


def test_a_cell_with_no_count_for_the_metric_lost_none_of_it() -> None:
    assert missing.share(cell("a", 10), "latency") == 0.0
    assert missing.unalike("latency", [cell("a", 10), cell("b", 10, {"latency": 0})]) is None
    most, least = cell("a", 10, {"latency": 3}), cell("b", 10)
    assert missing.unalike("latency", [least, most]) == (most, least)


def test_a_cell_that_finished_nothing_has_no_share_and_is_left_out() -> None:
    empty = cell("e", 0)
    assert missing.share(empty, "latency") is None
    assert missing.unalike("latency", [empty, cell("a", 10, {"latency": 9})]) is None  # one share: nothing to compare
    assert missing.unalike("latency", []) is None


def test_the_mark_names_the_cell_that_lost_most_then_least() -> None:
    base, lossy = cell("a", 10, baseline=True), cell("b", 8, {"latency": 4})
    assert missing.mark("latency", [base, lossy]) == (
        "caution: cell f=b 4 of 8 finished trials without data, the baseline (f=a) 0 of 10; "
        "compared over completed trials only"
    )


def test_compare_sides_follow_the_same_rule_by_their_counts() -> None:
    assert missing.pair_mark(Lost("run A", 2, 10), Lost("run B", 2, 10)) == ""  # 20% both: alike
    assert missing.pair_mark(Lost("run A", 1, 20), Lost("run B", 0, 1)) == ""  # 5 points apart
    assert missing.pair_mark(Lost("run A", 3, 10), Lost("run B", 0, 0)) == ""  # B finished no trial
    said = missing.pair_mark(Lost("run A", 0, 10), Lost("run B", 3, 10))
    assert said.startswith("caution: run B 3 of 10 finished trials without data, run A 0 of 10")


def significant(c: CellView, metric: str) -> CellView:
    """`c` with a rate of `metric` that differs from the baseline's (the Cells table's "sig.")."""
    rate = ProportionCell(
        rate=RateView(k=1, n=10, rate=0.1, low=0.0, high=0.4), trials=2, trial_rates=[], significant=True
    )
    return c.model_copy(update={"proportions": {metric: rate}})


def test_a_significant_cell_carries_the_caution_of_its_comparison_with_the_baseline() -> None:
    base, lossy = cell("a", 10, baseline=True), significant(cell("b", 10, {"failures": 4}), "failures")
    marked = missing.marked_cells([base, lossy], "a")
    assert marked[0] == base
    assert marked[1].proportions["failures"].caution.startswith("caution: cell f=b 4 of 10 finished trials")


@pytest.mark.parametrize("baseline", [None, "nosuch"])
def test_without_a_baseline_cell_the_cells_are_returned_unmarked(baseline: str | None) -> None:
    cells = [cell("a", 10), significant(cell("b", 10, {"failures": 5}), "failures")]
    assert missing.marked_cells(cells, baseline) == cells
