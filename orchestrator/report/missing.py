"""Trials without data, per cell and metric, and what a finding must say about them (PURE).

Why: the report compares every metric over the trials that completed. A trial that failed for
good (the repro crashed, timed out, or printed no metric; after its retries) has no value of any
metric, and its loss need not be at random: a cell that crashes under load keeps only its light
trials, so its latency looks better, and its failure rate over the sessions that did run looks no
worse. bench/bench_truth.py (2) measured it: a cell whose hardest 30% of 20 trials crashed, with
nothing else different, had its latency called a finding (e.g. "1.5x lower with f0=off") in 7.0% of
reports (21/300), and not one of those sentences said that cell's trials had failed; the page showed the
failed attempts only as a count beside the cell. So each cell carries how many of its finished
trials lack each metric, and a headline finding whose compared cells lost shares of their trials
that differ by MATERIAL or more says so in its own sentence (the data cannot tell whether the lost
trials would have changed the result, so it is a caution, not a verdict).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple, TypeVar

from orchestrator.report.model import CellView, EffectView, InteractionView, NeighbourView, NumberEffectView

# Shares of finished trials without data differing by this much (10 points: one trial in ten) make
# the comparison's cells unalike in what they left out. Lower would flag a single infrastructure
# hiccup in a 12-trial cell; at 10 points one failure in 2-9 trials is told, as it is material there.
MATERIAL = 0.10
WORDS = "without data"  # the phrase every such caution uses (bench/bench_truth.py looks for it)
_Side = TypeVar("_Side")  # what a share belongs to: a cell of the report, or a side of `orch compare`


def without_data(finished: Mapping[str, int], measured: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """cell -> metric -> trials that finished (completed, or failed for good) with no value of the
    metric. `finished`: per cell; `measured`: per metric, per cell, the trials with a value."""
    return {
        cell: {m: max(0, ran - per_cell.get(cell, 0)) for m, per_cell in measured.items()}
        for cell, ran in finished.items()
    }


def share(cell: CellView, metric: str) -> float | None:
    """The share of the cell's finished trials without the metric (None: no trial finished)."""
    return cell.missing.get(metric, 0) / cell.ran if cell.ran else None


def unalike(metric: str, cells: Iterable[CellView]) -> tuple[CellView, CellView] | None:
    """The rule every caution follows: the compared cells that lost the largest and the smallest share
    of their finished trials without `metric`, when those shares differ by MATERIAL or more; else None."""
    return _unalike([(s, c) for c in _unique(cells) if (s := share(c, metric)) is not None])


def _unalike(known: Sequence[tuple[float, _Side]]) -> tuple[_Side, _Side] | None:
    """(most, least) of shares without data, when they differ by MATERIAL or more: the one rule."""
    if len(known) < 2:
        return None
    (low, least), (high, most) = min(known, key=_by_share), max(known, key=_by_share)
    return (most, least) if high - low >= MATERIAL else None


def clause(metric: str, cells: Iterable[CellView]) -> str:
    """A sentence for a finding on `metric` that compares `cells`, when their shares of finished trials
    without the metric differ by MATERIAL or more (unalike); else "". Names the cell that lost the most
    and the one that lost the least, with their counts."""
    pair = unalike(metric, cells)
    if pair is None:
        return ""
    most, least = pair
    return (
        f" Caution: {metric} is compared over completed trials only, and the compared cells lost different shares "
        f"of their trials: {_name(most)}: {most.missing.get(metric, 0)} of its {most.ran} finished trials {WORDS} "
        f"({_how_lost(most, metric)}); {_name(least)}: {least.missing.get(metric, 0)} of {least.ran}. If the lost "
        "trials were the hard ones (a crash under load leaves a cell its easy trials), the comparison flatters "
        f"{_name(most)}."
    )


def _how_lost(cell: CellView, metric: str) -> str:
    """What the cell's trials without `metric` were: failed for good (its finished trials beyond the
    completed ones), or completed with no measurement of it (an older journal's record of a
    proportion over 0 sessions, a number left empty): not failures, so not called so."""
    lost = cell.missing.get(metric, 0)
    failed = min(lost, max(0, cell.ran - cell.completed))
    empty = lost - failed
    if not empty:
        return "failed"
    completed = f"completed without a measurement of {metric}"
    return f"{failed} failed, {empty} {completed}" if failed else completed


def mark(metric: str, cells: Iterable[CellView]) -> str:
    """The same caution, short, for a table row that marks a finding comparing `cells` (its reader may
    never read the headline's sentence); "" when the cells lost alike."""
    pair = unalike(metric, cells)
    if pair is None:
        return ""
    most, least = (Lost(_name(c), c.missing.get(metric, 0), c.ran) for c in pair)
    return _mark_text(most, least)


class Lost(NamedTuple):
    """One side of a comparison by what it lost: its name, its finished trials without the metric,
    its finished trials."""

    name: str
    missing: int
    ran: int


def pair_mark(a: Lost, b: Lost) -> str:
    """mark() for two sides known only by their counts (`orch compare`: one cell in run A and in run
    B), by the same rule (unalike); "" when they lost alike or a side finished no trial."""
    pair = _unalike([(side.missing / side.ran, side) for side in (a, b) if side.ran])
    return "" if pair is None else _mark_text(*pair)


def _mark_text(most: Lost, least: Lost) -> str:
    return (
        f"caution: {most.name} {most.missing} of {most.ran} finished trials {WORDS}, "
        f"{least.name} {least.missing} of {least.ran}; compared over completed trials only"
    )


def effect_cells(cells: Sequence[CellView], item: EffectView | InteractionView | NumberEffectView) -> list[CellView]:
    """The cells an effect or interaction compares: each of its factors at one of its two levels, and
    a conditional effect's given levels."""
    if isinstance(item, InteractionView):
        moved = {f: {r, lv} for f, r, lv in zip(item.factors, item.references, item.levels, strict=True)}
        given: Mapping[str, str] = {}
    else:
        moved = {item.factor: {item.reference, item.level}}
        given = item.given if isinstance(item, EffectView) else {}
    return [
        c
        for c in cells
        if all(c.levels.get(f) in values for f, values in moved.items())
        and all(c.levels.get(f) == v for f, v in given.items())
    ]


_Marked = TypeVar("_Marked", EffectView, InteractionView, NumberEffectView)


def marked_cells(cells: Sequence[CellView], baseline: str | None) -> list[CellView]:
    """The cells with each significant comparison with the baseline carrying its mark (the Cells
    table's "sig." beside the rate or the median)."""
    base = next((c for c in cells if c.cell == baseline), None)
    if base is None:
        return list(cells)
    return [
        c.model_copy(
            update={
                "proportions": {
                    m: v.model_copy(update={"caution": mark(m, [c, base]) if v.significant else ""})
                    for m, v in c.proportions.items()
                },
                "numbers": {
                    m: v.model_copy(update={"caution": mark(m, [c, base]) if v.significant else ""})
                    for m, v in c.numbers.items()
                },
            }
        )
        for c in cells
    ]


def marked(items: Sequence[_Marked], cells: Sequence[CellView]) -> list[_Marked]:
    """Effects, interactions or numeric effects, each finding with the mark of the cells it compares."""
    return [
        i.model_copy(update={"caution": mark(i.metric, effect_cells(cells, i)) if i.finding else ""}) for i in items
    ]


def marked_neighbours(
    neighbours: Sequence[NeighbourView], cells: Sequence[CellView], high: str | None
) -> list[NeighbourView]:
    """The highest cell's one-factor comparisons, each finding with the mark of its two cells."""
    by_id = {c.cell: c for c in cells}
    return [
        nb.model_copy(update={"caution": mark(nb.metric, [by_id[high], by_id[nb.cell]]) if nb.finding else ""})
        if high in by_id and nb.cell in by_id
        else nb
        for nb in neighbours
    ]


def _name(cell: CellView) -> str:
    levels = ", ".join(f"{k}={v}" for k, v in cell.levels.items())
    return f"the baseline ({levels})" if cell.is_baseline else f"cell {levels}"


def _by_share(item: tuple[float, object]) -> float:
    return item[0]


def _unique(cells: Iterable[CellView]) -> list[CellView]:
    seen: dict[str, CellView] = {}
    for c in cells:
        seen.setdefault(c.cell, c)
    return list(seen.values())
