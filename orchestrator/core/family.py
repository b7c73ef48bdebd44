"""PURE: which tests make up the report's one Holm family, for a run measured or a sweep planned.

Why one function: `orch plan` states, before the sweep, how many tests the report's correction
will cover (its power lines are Holm's first step over them), and the report corrects over its
family after it. They were counted by two pieces of code, and the plan's left out the highest
cell's neighbours: it said 46 where the report corrected over 49. Now the report corrects over
exactly `members` of what it measured, and the plan states `planned` = `members` of what it
will measure.

The family (core.findings' policy: every test the report could call a finding, every metric
together), per metric:
- a proportion metric whose trial-to-trial variation can be estimated (`tested`; the others are
  described, never tested): each measured cell vs the baseline, and each contrast
  findings.tested_contrasts finds over the measured cells (main and conditional effects and
  interactions);
- the primary metric (the first proportion), also: the highest-rate cell vs each measured cell
  one factor away, unless the baseline has the highest rate (those are then its cell-vs-baseline
  tests, already counted);
- a numeric metric: each measured cell vs the baseline, and each factor's non-reference level
  that some stratum measured together with the reference level (findings.number_effects).

Except a test that can never be significant by design (`unreachable`): a numeric cell-vs-baseline
test whose smallest achievable Mann-Whitney p, given only the trials each side has
(ranks.mann_whitney_smallest_p, ties included), is at or above ALPHA. Why: with 2 trials a side
that p is 0.19, and the demo's matrix at 2 trials per cell still counted 14 such tests (wall's and
anomalies' 7 each), so every real finding had to pass alpha/49 at Holm's first step where alpha/35
was valid. Why the family-wise error stays at or below ALPHA: Holm's largest threshold is ALPHA, so
such a test is rejected at no step whatever the data; and whether it is left out depends on the
design (the counts), not on any value, so Holm over the tests that remain is Holm over a family
fixed before the data are seen (Tarone 1990's idea in its simplest, design-only form). Only tests
whose smallest p is a function of counts alone are judged: the numeric factor effects stay in (an
unbalanced design's stratified test has an exact null whose floor depends on the strata's ties as
well, and a pooled effect with replicates can reach significance anyway), and so do the
proportions' tests (their p depends on the events seen, not on counts).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, cast

from orchestrator.core import ranks
from orchestrator.core.findings import FAMILY_PARTS, tested_contrasts
from orchestrator.core.stats import ALPHA

Levels = Mapping[str, str]
TestKey = tuple[str, str, Hashable]  # (kind, metric, which): kind rate, contrast, neighbour, number, number_effect


@dataclass(frozen=True)
class MetricDesign:
    """One metric's part of the design: its kind, the cells that measured it (id -> levels, in plan
    order), for a proportion whether its trial-to-trial variation can be estimated, and for a number
    the values (trials) each cell has (None: unknown, no test is judged unreachable)."""

    kind: Literal["proportion", "number"]
    cells: Mapping[str, Levels]
    tested: bool = True
    trials: Mapping[str, int] | None = None


@dataclass(frozen=True)
class Design:
    """What decides the family: factors and their reference levels, the baseline cell's id, the
    metrics in the manifest's order, and the primary metric's highest-rate cell (None: unknown)."""

    factors: Mapping[str, Sequence[str]]
    reference: Levels
    baseline: str | None
    metrics: Mapping[str, MetricDesign]
    highest: str | None = None


@dataclass(frozen=True)
class Planned:
    """The family `orch plan` expects: its size per metric when the highest rate is in the cell
    other than the baseline with the most cells one factor away (the largest family: Holm's first
    step is stated over it), and without the highest cell's neighbours (the baseline has the
    highest rate). `exact`: every other cell has as many neighbours (a full factorial), so the
    family is one of the two; else (`exclude` thinned some) it may fall between them.
    `unreachable`: per metric, the tests left out because they can never be significant."""

    sizes: dict[str, int]
    without_neighbours: dict[str, int]
    exact: bool = True
    unreachable: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.sizes.values())

    @property
    def total_without_neighbours(self) -> int:
        return sum(self.without_neighbours.values())


def primary_metric(kinds: Mapping[str, str]) -> str | None:
    """The outcome: the first proportion metric declared (the corruption rate), else any."""
    return next((name for name, kind in kinds.items() if kind == "proportion"), next(iter(kinds), None))


def members(design: Design) -> list[TestKey]:
    """Every test in the family, keyed, in the manifest's order of metrics: every test the report
    could call a finding but those that can never be one by design (`unreachable`)."""
    out = set(unreachable(design))
    return [key for key in _candidates(design) if key not in out]


def unreachable(design: Design) -> list[TestKey]:
    """The numeric cell-vs-baseline tests whose smallest achievable p, from the trials each side has
    alone (ranks.mann_whitney_smallest_p, ties included), is at or above ALPHA: Holm can reject
    none of them at any step, so they leave the family (the module's docstring says why that is valid)."""
    keys: list[TestKey] = []
    for name, metric in design.metrics.items():
        trials, baseline = metric.trials, design.baseline
        if metric.kind != "number" or trials is None or baseline is None or baseline not in trials:
            continue
        base = trials[baseline]
        keys += [
            key
            for key in _versus_baseline("number", name, metric, baseline)
            if not ranks.mann_whitney_can_reach(trials.get(str(key[2]), 0), base, ALPHA)
        ]
    return keys


def _candidates(design: Design) -> list[TestKey]:
    """Every test the report could call a finding, keyed, in the manifest's order of metrics."""
    keys: list[TestKey] = []
    primary = primary_metric({name: m.kind for name, m in design.metrics.items()})
    for name, metric in design.metrics.items():
        if metric.kind == "number":
            keys += _versus_baseline("number", name, metric, design.baseline)
            keys += [("number_effect", name, change) for change in _number_changes(design, metric.cells)]
        elif metric.tested:
            keys += _versus_baseline("rate", name, metric, design.baseline)
            keys += [("contrast", name, c) for c in tested_contrasts(list(metric.cells.values()), *_refs(design))]
            if name == primary:
                keys += [("neighbour", name, cell) for _, cell in _neighbours(design, metric)]
    return keys


def sizes(keys: Sequence[TestKey]) -> dict[str, int]:
    """Tests per metric, metrics in the order their first test comes (only those with a test)."""
    found: dict[str, int] = {}
    for _, metric, _ in keys:
        found[metric] = found.get(metric, 0) + 1
    return found


def parts(keys: Sequence[TestKey]) -> list[str]:
    """The kinds of test these keys hold, as findings.policy_sentence names them (FAMILY_PARTS, in
    its order): only what the design has, so a 2-factor run's policy names no three-way interaction,
    a 1-factor run's no conditional effect, a proportion-only run's no numeric effect."""
    found = {_part(kind, which) for kind, _, which in keys}
    return [part for index, part in enumerate(FAMILY_PARTS) if index in found]


def _part(kind: str, which: Hashable) -> int:
    """A key's index in FAMILY_PARTS; a contrast's `which` is (changes, given) (findings.tested_contrasts)."""
    if kind in ("rate", "number"):
        return 0
    if kind == "number_effect":
        return 5
    if kind == "neighbour":
        return 6
    changes, given = cast(tuple[tuple[object, ...], tuple[object, ...]], which)
    if len(changes) == 1:
        return 2 if given else 1
    return 3 if len(changes) == 2 else 4


def planned(design: Design) -> Planned:
    """The family of a sweep in which every planned trial completes: `members` with the highest rate
    in the non-baseline cell with the most neighbours (every cell has as many in a full factorial;
    `exclude` thins some), and the same without the neighbours."""
    counts = _neighbour_counts(design)
    highest = max(counts, key=lambda cell: counts[cell], default=None)  # the first in plan order on a tie
    keys = members(replace(design, highest=highest))
    exact = len(set(counts.values())) <= 1
    return Planned(sizes(keys), sizes([k for k in keys if k[0] != "neighbour"]), exact, sizes(unreachable(design)))


def one_factor_away(factors: Sequence[str], cells: Mapping[str, Levels], high: str) -> list[tuple[str, str]]:
    """(factor, cell id) of each cell that differs from `high` in exactly one factor (and has the same factors)."""
    top = cells[high]
    found = []
    for cell, levels in cells.items():
        if cell == high:
            continue
        diff = [f for f in factors if levels.get(f) != top.get(f)]
        if len(diff) == 1 and set(levels) == set(top):
            found.append((diff[0], cell))
    return found


def _refs(design: Design) -> tuple[Mapping[str, Sequence[str]], Levels]:
    return design.factors, design.reference


def _versus_baseline(kind: str, name: str, metric: MetricDesign, baseline: str | None) -> list[TestKey]:
    """Each measured cell vs the baseline: none when the baseline measured nothing."""
    if baseline is None or baseline not in metric.cells:
        return []
    return [(kind, name, cell) for cell in metric.cells if cell != baseline]


def _neighbours(design: Design, metric: MetricDesign) -> list[tuple[str, str]]:
    high = design.highest
    if high is None or high == design.baseline or high not in metric.cells:
        return []
    return one_factor_away(list(design.factors), metric.cells, high)


def _number_changes(design: Design, cells: Mapping[str, Levels]) -> list[tuple[str, str]]:
    """(factor, level) of each number effect findings.number_effects finds: the level and the
    reference were both measured in some stratum (the levels of the other factors)."""
    seen: dict[tuple[str, str], set[Stratum]] = {}
    for strata in _strata(cells).values():
        for factor, (value, others) in strata.items():
            seen.setdefault((factor, value), set()).add(others)
    changes = []
    for factor, levels in design.factors.items():
        ref = design.reference.get(factor, levels[0] if levels else "")
        base = seen.get((factor, ref), set())
        changes += [(factor, lv) for lv in levels if lv != ref and seen.get((factor, lv), set()) & base]
    return changes


def _neighbour_counts(design: Design) -> dict[str, int]:
    """Per non-baseline cell of the primary metric, how many cells are one factor away (as
    one_factor_away finds them); empty without a tested primary proportion. Counted by grouping
    the cells on their other factors' levels: comparing every pair is 16 million at 4,096 cells."""
    primary = primary_metric({name: m.kind for name, m in design.metrics.items()})
    metric = design.metrics.get(primary) if primary is not None else None
    if metric is None or metric.kind != "proportion" or not metric.tested:
        return {}
    strata = _strata(metric.cells)
    groups: dict[tuple[str, Stratum], int] = {}
    for by_factor in strata.values():
        for factor, (_, others) in by_factor.items():
            groups[(factor, others)] = groups.get((factor, others), 0) + 1
    return {
        cell: sum(groups[(f, others)] - 1 for f, (_, others) in strata[cell].items() if f in design.factors)
        for cell in metric.cells
        if cell != design.baseline
    }


Stratum = tuple[tuple[str, str], ...]


def _strata(cells: Mapping[str, Levels]) -> dict[str, dict[str, tuple[str, Stratum]]]:
    """Per cell, per factor it has: (its level, its other factors' levels), the stratum both
    findings.number_effects and one_factor_away group by."""
    found = {}
    for cell, levels in cells.items():
        items = tuple(sorted(levels.items()))
        found[cell] = {f: (v, items[:i] + items[i + 1 :]) for i, (f, v) in enumerate(items)}
    return found
