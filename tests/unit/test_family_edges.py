"""The Holm family (core.family) where a run measured less than it planned: which tests the report
corrects over when the baseline cell has no data for a metric, when the highest-rate cell is the
baseline or unknown, and which level is a factor's reference when the manifest names none.

Found by mutation testing (bench/mutants.py): removing any of these rules left every test green,
yet each changes how many tests the report's correction divides alpha among.
"""

from __future__ import annotations

from orchestrator.core.family import Design, MetricDesign, members

FACTORS = {"a": ["on", "off"], "b": ["on", "off"]}
CELLS = {
    "base": {"a": "on", "b": "on"},
    "a-off": {"a": "off", "b": "on"},
    "b-off": {"a": "on", "b": "off"},
    "both-off": {"a": "off", "b": "off"},
}
WITHOUT_BASE = {k: v for k, v in CELLS.items() if k != "base"}


def design(cells: dict[str, dict[str, str]], *, baseline: str | None = "base", highest: str | None = None) -> Design:
    metrics = {"corruption": MetricDesign("proportion", cells, tested=True), "wall": MetricDesign("number", cells)}
    return Design(FACTORS, {"a": "on", "b": "on"}, baseline, metrics, highest)


def kinds(d: Design) -> dict[str, list[object]]:
    out: dict[str, list[object]] = {}
    for kind, metric, which in members(d):
        out.setdefault(f"{kind} {metric}", []).append(which)
    return out


def test_every_measured_cell_is_tested_against_a_measured_baseline() -> None:
    got = kinds(design(CELLS))
    assert got["rate corruption"] == ["a-off", "b-off", "both-off"]
    assert got["number wall"] == ["a-off", "b-off", "both-off"]


def test_a_baseline_that_measured_nothing_adds_no_test_against_it() -> None:
    """The baseline's trials all failed (or the run stopped before it): a cell-vs-baseline test
    has nothing to compare with, so it is not in the family; the contrasts among the other
    cells still are."""
    for d in (design(WITHOUT_BASE), design(WITHOUT_BASE, baseline=None), design(CELLS, baseline=None)):
        got = kinds(d)
        assert "rate corruption" not in got
        assert "number wall" not in got
        assert got["contrast corruption"]


def test_the_highest_cells_neighbours_join_the_family_only_when_it_is_not_the_baseline() -> None:
    assert kinds(design(CELLS, highest="both-off"))["neighbour corruption"] == ["a-off", "b-off"]
    for highest in ("base", None):  # the baseline's own tests already compare it with each cell
        assert "neighbour corruption" not in kinds(design(CELLS, highest=highest))
    # a highest cell that did not measure this metric has no neighbours in it
    measured = {k: v for k, v in CELLS.items() if k != "both-off"}
    assert "neighbour corruption" not in kinds(design(measured, highest="both-off"))


def test_a_factor_without_a_named_reference_is_referred_to_its_first_level() -> None:
    d = design(CELLS)
    unnamed = Design(FACTORS, {}, d.baseline, d.metrics)
    assert kinds(unnamed)["number_effect wall"] == [("a", "off"), ("b", "off")]
