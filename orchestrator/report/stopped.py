"""The report's tests where an adaptive rule stopped cells on their data: each test whose cells
include one stopped early is read a second time off the cells' own intervals, the ones the cell
table states (anytime-valid for a stopped cell: core.clustered.cell_bounds), by MOVER
(core.findings.stopped_mover); the larger p counts in Holm's correction and the hull of the two
intervals is shown.

Why: a rule that stops a cell where its comparison looks decided leaves its rate leaning toward
the side that stopped it (and the cells that ran on, the other way), so the fixed test of factor
effects over cells of data-chosen sizes is not valid at 5%: A/A reports of matrices/overlap_hunt.yaml
(question `lower`, every cell at 15%) named a finding in 6.0% and 5.1% of runs (ICC 0.03, 0.10),
against 3.0% and 1.7% with every round run. With this reading: 2.0% and 1.5%, and the DSV4 mix's true
findings 77.2 -> 76.2% of runs (a stricter alpha of 0.035 would have cost 77.2 -> 70.3% for 4.5%):
bench/bench_adaptive_honesty.py. A test of no stopped cell, and every test of a run where no cell
stopped (a fixed design), is unchanged.

Number metrics' tests are unchanged, measured rather than assumed (the rule stops on a proportion, but
a bad trial is often both failing more and slower: a shared trial effect): A/A runs as above with a
wall per trial correlated 0, 0.5 or 0.9 with the trial's own failure rate named a wall finding in
0.5% [0.2, 1.2] of reports at most (ICC 0.03; fixed design 0.5-1.2%) and 1.0% [0.5, 1.8] (ICC 0.10;
fixed 0.6-1.0%); the factors' wall shifts held 0 in 94.3-95.3% (fixed 94.9-95.8%), the stated
medians the truth in 96.1-98.9% of stopped cells: bench/bench_adaptive_numbers.py. Why: a number's
tests rank trials (the trial is the unit, 2-8 of them per cell), so the lean a stop leaves in a few
trials is far from what Holm over the whole report calls a finding; the proportion's tests pool
sessions, ten times the units, and its lean is what this module corrects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from orchestrator.core import clustered, findings
from orchestrator.core.stats import Interval
from orchestrator.report.model import CellView, EffectView, InteractionView, NeighbourView

POLICY = (
    "Adaptive stopping ran fewer trials in some cells, on their own data: every test comparing such a cell "
    "was also read off the 95% intervals the cell table shows (anytime-valid for a cell stopped early: they hold "
    "at whatever round the data chose to stop), and the larger of its two p-values is the one corrected."
)

_Contrast = TypeVar("_Contrast", EffectView, InteractionView)

Key = tuple[str, int]  # (kind, index in its list): "rate" indexes the cells


def corrected(
    metric: str,
    cells: Sequence[CellView],
    disp: clustered.Dispersion,
    effects: Sequence[EffectView],
    interactions: Sequence[InteractionView],
    neighbours: Sequence[NeighbourView],
    high: str | None,
) -> tuple[list[CellView], list[EffectView], list[InteractionView], list[NeighbourView]]:
    """The views with every test of `metric` that compares a stopped cell read both ways (the larger
    p, the hull of the intervals); unchanged when no cell of it stopped. `high`: the cell the
    neighbour tests compare with (the highest rate)."""
    views = {c.cell: c.proportions[metric] for c in cells if metric in c.proportions}
    stopped = {cell for cell, v in views.items() if v.stopped}
    if not stopped:
        return list(cells), list(effects), list(interactions), list(neighbours)
    tests = _tests(metric, cells, effects, interactions, neighbours, high)
    involved = [key for key, terms in tests.items() if any(cell in stopped for cell, _ in terms)]
    readings = {cell: (v.rate.k, v.rate.n, clustered.cell_inflation(disp, v.rate.n, v.trials), v.stopped)
                for cell, v in views.items()}  # fmt: skip
    contrasts = [[(readings[c][0], readings[c][1], w, *readings[c][2:]) for c, w in tests[key]] for key in involved]
    intervals, pvalues = findings.stopped_mover(contrasts, clustered.cell_bounds)
    read = {key: (iv, float(p)) for key, iv, p in zip(involved, intervals, pvalues, strict=True)}
    return (
        [_cell(c, metric, read.get(("rate", i))) for i, c in enumerate(cells)],
        [_contrast(e, read.get(("effect", i))) for i, e in enumerate(effects)],
        [_contrast(x, read.get(("interaction", i))) for i, x in enumerate(interactions)],
        [nb.model_copy(update={"p": max(nb.p, r[1])}) if (r := read.get(("neighbour", i))) else nb
         for i, nb in enumerate(neighbours)],
    )  # fmt: skip


def _tests(
    metric: str,
    cells: Sequence[CellView],
    effects: Sequence[EffectView],
    interactions: Sequence[InteractionView],
    neighbours: Sequence[NeighbourView],
    high: str | None,
) -> dict[Key, list[tuple[str, float]]]:
    """Every tested comparison of `metric` and the (cell, weight) terms it sums."""
    base = next((c.cell for c in cells if c.is_baseline), None)
    tests: dict[Key, list[tuple[str, float]]] = {}
    for i, c in enumerate(cells):
        if base is not None and c.proportions[metric].p is not None:
            tests[("rate", i)] = [(c.cell, 1.0), (base, -1.0)]
    measured = [c for c in cells if c.proportions[metric].rate.n]  # proportion_contrasts' cells
    keyed: list[tuple[Key, tuple[findings.Change, ...], tuple[tuple[str, str], ...]]] = []
    for i, e in enumerate(effects):
        if e.metric == metric:
            keyed.append((("effect", i), ((e.factor, e.reference, e.level),), tuple(e.given.items())))
    for i, x in enumerate(interactions):
        if x.metric == metric:
            keyed.append((("interaction", i), tuple(zip(x.factors, x.references, x.levels, strict=True)), ()))
    terms = findings.contrast_terms([c.levels for c in measured], [(ch, given) for _, ch, given in keyed])
    for (key, _, _), found in zip(keyed, terms, strict=True):
        tests[key] = [(measured[j].cell, w) for j, w in found]
    for i, nb in enumerate(neighbours):
        if nb.metric == metric and high is not None:
            tests[("neighbour", i)] = [(high, 1.0), (nb.cell, -1.0)]
    return tests


def _cell(cell: CellView, metric: str, read: tuple[Interval, float] | None) -> CellView:
    view = cell.proportions[metric]
    if read is None or view.p is None:
        return cell
    interval, p = read
    low = interval.low if view.diff_low is None else min(view.diff_low, interval.low)
    high = interval.high if view.diff_high is None else max(view.diff_high, interval.high)
    update = {"p": max(view.p, p), "diff_low": low, "diff_high": high}
    return cell.model_copy(update={"proportions": {**cell.proportions, metric: view.model_copy(update=update)}})


def _contrast(view: _Contrast, read: tuple[Interval, float] | None) -> _Contrast:
    if read is None:
        return view
    interval, p = read
    low, high = min(view.low, interval.low), max(view.high, interval.high)
    return view.model_copy(update={"p": max(view.p, p), "p_holm": max(view.p, p), "low": low, "high": high,
                                   "clear": low > 0 or high < 0})  # fmt: skip
