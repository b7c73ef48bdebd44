"""Factor effects, interactions and numeric effects as the report shows them (pure).

build.py turns a run into cells; this module turns cells into the effect views (one per
contrast in core.findings), and build.py then applies the report's one multiplicity policy
(Holm over every test it could call a finding) and sets `p_holm` and `finding` on each view.
`clear` keeps the raw reading (the 95% interval excludes 0) for the exploratory columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.core import findings
from orchestrator.core.records import Frozen
from orchestrator.core.stats import CellCount


class EffectView(Frozen):
    metric: str
    factor: str
    level: str
    reference: str
    given: dict[str, str]  # empty: main effect
    estimate: float
    low: float
    high: float
    clear: bool  # raw 95% interval excludes 0 (exploratory)
    strata: int
    p: float = 1.0
    p_holm: float = 1.0
    finding: bool = False  # survives the report's multiplicity policy


class InteractionView(Frozen):
    """A two- or three-way interaction, listed once: the k-th difference of rates over the
    corners where `factors` move from `references` to `levels`."""

    metric: str
    factors: list[str]
    levels: list[str]
    references: list[str]
    estimate: float
    low: float
    high: float
    clear: bool
    strata: int
    p: float = 1.0
    p_holm: float = 1.0
    finding: bool = False

    @property
    def order(self) -> int:
        return len(self.factors)

    @property
    def label(self) -> str:
        return " × ".join(
            f"{f} ({r} → {lv})" for f, r, lv in zip(self.factors, self.references, self.levels, strict=True)
        )


class NumberEffectView(Frozen):
    """Main effect of a factor on a numeric metric: both medians, their ratio and the shift."""

    metric: str
    factor: str
    level: str
    reference: str
    median_level: float
    median_reference: float
    n_level: int
    n_reference: int
    shift: float  # Hodges-Lehmann, level - reference
    low: float | None  # exact Mann-Whitney interval; None when no order reaches 95%
    high: float | None
    coverage: float | None  # the interval's exact coverage
    strata: int
    p: float = 1.0
    p_holm: float = 1.0
    finding: bool = False

    @property
    def ratio(self) -> float | None:
        return self.median_level / self.median_reference if self.median_reference else None


class NeighbourView(Frozen):
    """The highest cell vs a cell one factor away: does the outcome need that factor's level?"""

    metric: str
    cell: str
    factor: str
    level: str  # the neighbour's level of `factor`
    k: int
    n: int
    p: float
    p_holm: float = 1.0
    finding: bool = False


def proportion_views(
    metric: str,
    counts: Sequence[CellCount],
    factors: Mapping[str, Sequence[str]],
    baseline: Mapping[str, str],
    phi: float = 1.0,
    df: float = 0.0,
) -> tuple[list[EffectView], list[InteractionView]]:
    contrasts = findings.proportion_contrasts(counts, factors, baseline, phi=phi, df=df)
    effects = [_effect_view(metric, c) for c in contrasts if c.order == 1]
    interactions = [_interaction_view(metric, c) for c in contrasts if c.order > 1]
    return effects, interactions


def _effect_view(metric: str, c: findings.Contrast) -> EffectView:
    factor, reference, level = c.changes[0]
    return EffectView(
        metric=metric,
        factor=factor,
        level=level,
        reference=reference,
        given=dict(c.given),
        estimate=c.interval.estimate,
        low=c.interval.low,
        high=c.interval.high,
        clear=c.clear,
        strata=c.strata,
        p=c.p,
        p_holm=c.p,
    )


def _interaction_view(metric: str, c: findings.Contrast) -> InteractionView:
    return InteractionView(
        metric=metric,
        factors=[f for f, _, _ in c.changes],
        references=[r for _, r, _ in c.changes],
        levels=[lv for _, _, lv in c.changes],
        estimate=c.interval.estimate,
        low=c.interval.low,
        high=c.interval.high,
        clear=c.clear,
        strata=c.strata,
        p=c.p,
        p_holm=c.p,
    )


def number_views(
    metric: str,
    cells: Sequence[findings.CellValues],
    factors: Mapping[str, Sequence[str]],
    baseline: Mapping[str, str],
) -> list[NumberEffectView]:
    return [
        NumberEffectView(
            metric=metric,
            factor=e.factor,
            level=e.level,
            reference=e.reference,
            median_level=e.median_level,
            median_reference=e.median_reference,
            n_level=e.n_level,
            n_reference=e.n_reference,
            shift=e.shift.estimate,
            low=e.shift.low,
            high=e.shift.high,
            coverage=e.shift.coverage,
            strata=e.strata,
            p=e.p,
            p_holm=e.p,
        )
        for e in findings.number_effects(cells, factors, baseline)
    ]
