"""core.stats, core.sequential and core.findings on the inputs their own tests did not feed.

Found by mutation testing (bench/mutants.py, seed 20261206; bench/README.md): each test here
fails on a one-line change to the module that every earlier test passed.
"""

from __future__ import annotations

import pytest

from orchestrator.core import stats


@pytest.mark.parametrize("bad", [(0, 1, 3, 2), (2, 1, 0, 1), (0, 1, -1, 4), (0, 1, 0, -1)])
def test_fisher_refuses_an_impossible_count_on_either_side(bad: tuple[int, int, int, int]) -> None:
    """More events than sessions (or a negative count) on the SECOND side is as wrong as on the
    first: a p computed from it (scipy's hypergeometric of a negative column) would reach the page."""
    with pytest.raises(ValueError, match="invalid count"):
        stats.fisher_exact(*bad)


def test_the_drift_trend_shifts_only_the_empty_cells_of_a_round_table() -> None:
    """statsmodels' Table counts a zero cell as 0.5 and leaves every other count alone: a round with
    no event beside a round with exactly one keeps its one (the trend's z and p are statsmodels')."""
    import warnings

    import numpy as np
    from statsmodels.stats.contingency_tables import Table

    table = np.array([[0.0, 40.0], [1.0, 39.0], [6.0, 34.0]])
    scores, columns = np.array([0.0, 1.0, 2.0]), np.array([0.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = Table(table).test_ordinal_association(row_scores=scores, col_scores=columns)
    assert stats._ordinal_association(table, scores, columns) == (float(want.zscore), float(want.pvalue))
    assert stats.trend([(0, 40), (1, 40), (6, 40)]) == float(want.pvalue)


def test_two_sparse_trials_are_compared_by_fishers_exact_test() -> None:
    """Two trials with expected counts under Cochran's 5: their homogeneity p is Fisher's on the
    two trials as they are (trial 1's events against trial 2's), scipy's number."""
    from scipy import stats as sps

    want = float(sps.fisher_exact([[0, 40], [4, 36]]).pvalue)
    assert stats.trial_homogeneity([(0, 40), (4, 40)]) == want
    assert stats.trial_homogeneity([(4, 40), (0, 30)]) == float(sps.fisher_exact([[4, 36], [0, 30]]).pvalue)


def test_a_baseline_of_two_rounds_is_checked_for_drift() -> None:
    """Two rounds are enough to compare: 2/40 then 20/40 is drift (homogeneity by scipy's
    chi-square on the round table), and the report's caution hangs on `flagged`."""
    from scipy import stats as sps

    check = stats.drift_check([stats.RoundCount(0, 2, 40), stats.RoundCount(1, 20, 40)])
    want = float(sps.chi2_contingency([[2, 38], [20, 20]], correction=False).pvalue)
    assert check.p_homogeneity == pytest.approx(want, rel=1e-12)
    assert check.p_homogeneity < 0.001
    assert check.flagged


def test_a_level_nothing_measured_has_no_effect_rather_than_an_empty_one() -> None:
    """factor_effects (the reference core.findings is checked against): a level whose cells ran no
    session has no matched stratum, so no main effect is listed for it, not a None in its place."""
    cells = [
        stats.CellCount({"a": "off", "b": "off"}, 3, 40),
        stats.CellCount({"a": "on", "b": "off"}, 0, 0),
        stats.CellCount({"a": "off", "b": "on"}, 5, 40),
        stats.CellCount({"a": "on", "b": "on"}, 0, 0),
    ]
    effects = stats.factor_effects(cells, {"a": ["off", "on"], "b": ["off", "on"]}, {"a": "off", "b": "off"})
    assert [(e.factor, e.level) for e in effects.main] == [("b", "on")]
    assert effects.main[0].interval.estimate == pytest.approx(5 / 40 - 3 / 40)


@pytest.mark.parametrize("effect", [0.05, 0.1, 0.3])
def test_the_mixture_reaches_the_odds_ratio_of_the_smallest_difference_it_must_detect(effect: float) -> None:
    """sequential's "different" mixes odds ratios covering every one a rate difference of `effect`
    can produce; the nearest to 1 is that of rates 50% -/+ effect/2, by hand: (0.45/0.55)/(0.55/0.45)
    at 0.1. The mixture's least extreme odds ratio on each side is exactly that one (and its inverse)."""
    import numpy as np

    from orchestrator.core import sequential

    low, high = 0.5 - effect / 2, 0.5 + effect / 2
    edge = (low / (1 - low)) / (high / (1 - high))
    log_psi, log_weight = sequential._mixture(effect)
    lower, higher = log_psi[: log_psi.size // 2], log_psi[log_psi.size // 2 :]
    assert np.exp(lower.max()) == pytest.approx(edge, rel=1e-12)
    assert np.exp(higher.min()) == pytest.approx(1 / edge, rel=1e-12)
    assert np.exp(log_weight).sum() == pytest.approx(1.0, rel=1e-12)


def test_the_cached_mixture_and_round_ratios_cannot_be_changed_by_a_caller() -> None:
    """_mixture and _round_ratio are memoised and shared by every decide() and simulation: an
    in-place edit by one caller (`ratios -= x`) would change every later e-value, so it is refused."""
    from orchestrator.core import sequential

    log_psi, log_weight = sequential._mixture(0.1)
    ratio = sequential._round_ratio(1, 40, 5, 40, 0.1)
    for array in (log_psi, log_weight, ratio):
        with pytest.raises(ValueError, match="read-only"):
            array += 1.0
    assert sequential._round_ratio(1, 40, 5, 40, 0.1) is ratio


def test_the_approximate_stratified_shift_of_one_stratum_is_the_classic_hodges_lehmann_interval() -> None:
    """One stratum of 60 vs 60 (van Elteren is then Wilcoxon): the normal-approximation interval is
    the sorted differences' k-th from each end, k = mn/2 - z sqrt(mn(m + n + 1) / 12) by hand (the
    count of differences above d has that null mean and variance), to one difference."""
    import math

    import numpy as np

    from orchestrator.core import findings

    rng = np.random.default_rng(1)
    x, y = rng.normal(1.0, 1.0, 60), rng.normal(0.0, 1.0, 60)
    shift = findings._approximate_shift([(x, y)], 0.95)
    d = np.sort(np.subtract.outer(x, y).ravel())
    k = int(60 * 60 / 2 - 1.959963984540054 * math.sqrt(60 * 60 * 121 / 12))
    assert shift.low is not None and shift.high is not None
    assert d[k - 1] <= shift.low <= d[k + 1]
    assert d[::-1][k + 1] <= shift.high <= d[::-1][k - 1]
