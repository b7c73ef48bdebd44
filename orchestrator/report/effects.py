"""Factor effects, interactions and numeric effects as the report shows them (pure).

build.py turns a run into cells; this module turns cells into the effect views (report.model; one per
contrast in core.findings), and build.py then applies the report's one multiplicity policy
(Holm over every test it could call a finding) and sets `p_holm` and `finding` on each view.
`clear` keeps the raw reading (the 95% interval excludes 0) for the exploratory columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.core import findings
from orchestrator.core.stats import CellCount
from orchestrator.report.model import EffectView, InteractionView, NumberEffectView


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
            stratified=e.stratified,
            p=e.p,
            p_holm=e.p,
        )
        for e in findings.number_effects(cells, factors, baseline)
    ]
