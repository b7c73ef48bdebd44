"""core.regression's formulas, each against the textbook form written out here (bench/mutants.py
round nine): the simulations of tests/test_nightly_nights.py and tests/test_trends.py bound the
false-alarm rate, which a test that is too liberal in one term can still pass."""

from __future__ import annotations

import math

import pytest

from orchestrator.core import dist, regression


def test_the_prediction_test_is_students_t_of_one_more_night() -> None:
    """Nights 1, 2, 3 (mean 2, s^2 = 1), tonight 5, no within-night noise: t = 3 / sqrt(1 * (1 +
    1/3)) on 2 degrees of freedom."""
    got = regression._prediction_p(5.0, [1.0, 2.0, 3.0], 0.0, [0.0, 0.0, 0.0])
    t = 3 / math.sqrt(1 + 1 / 3)
    assert got == pytest.approx(2 * float(dist.t_sf(t, 2)), rel=1e-12)


def test_tonights_extra_within_night_noise_widens_the_prediction_test() -> None:
    """Tonight's within-night variance 1 above the nights' mean 0.5: var = 4/3 + 0.5, and
    Satterthwaite's degrees of freedom 2 x (var / (4/3))^2."""
    got = regression._prediction_p(5.0, [1.0, 2.0, 3.0], 1.0, [0.5, 0.5, 0.5])
    spread = 1 + 1 / 3
    var = spread + 0.5
    expected = 2 * float(dist.t_sf(3 / math.sqrt(var), 2 * (var / spread) ** 2))
    assert got == pytest.approx(expected, rel=1e-12)
    # tonight no noisier than the nights: nothing added (and nothing taken off for a quieter night)
    plain = 2 * float(dist.t_sf(3 / math.sqrt(spread), 2))
    assert regression._prediction_p(5.0, [1.0, 2.0, 3.0], 0.5, [0.5, 0.5, 0.5]) == pytest.approx(plain, rel=1e-12)
    assert regression._prediction_p(5.0, [1.0, 2.0, 3.0], 0.0, [0.5, 0.5, 0.5]) == pytest.approx(plain, rel=1e-12)


def test_the_quasi_binomial_variance_is_each_sides_design_effect_over_its_sessions_squared() -> None:
    """Two trials of 100 sessions tonight, three of 50 before, rate 0.3, rho 0.02: each side's
    variance is sum m p (1 - p) (1 + (m - 1) rho) / (sum m)^2."""
    rate, rho = 0.3, 0.02
    tonight = sum(m * rate * (1 - rate) * (1 + (m - 1) * rho) for m in (100, 100)) / 200**2
    before = sum(m * rate * (1 - rate) * (1 + (m - 1) * rho) for m in (50, 50, 50)) / 150**2
    expected = 2 * float(dist.norm_sf(0.08 / math.sqrt(tonight + before)))
    assert regression._quasi_p(0.08, rate, rho, [100, 100], [50, 50, 50]) == pytest.approx(expected, rel=1e-12)


def test_a_count_above_half_the_sessions_is_the_mirrored_near_tail_not_one_minus_a_sum() -> None:
    """190 events of 200 at a rate of 0.2 is 10 non-events at 0.8: its tail (~6e-42) is computed as
    that near tail. As 1 minus a sum near 1 it came out as rounding noise (3e-14), at a cost of
    the count squared instead of the non-count squared."""
    high = regression._betabinom_exact(190, [100, 100], 0.2, 0.02)
    assert high == pytest.approx(regression._betabinom_exact(10, [100, 100], 0.8, 0.02), rel=1e-12)
    assert 0 < high < 1e-40


def test_a_number_metric_needs_two_values_on_each_side() -> None:
    one_tonight = regression.NumberHistory("c", "wall", ((1.0, 2.0, 3.0), (2.0, 3.0)), (9.0,))
    one_before = regression.NumberHistory("c", "wall", ((1.0,),), (9.0, 9.5, 10.0))
    assert regression.number_change(one_tonight) is None
    assert regression.number_change(one_before) is None


def test_the_within_night_variance_is_pooled_around_each_nights_own_mean() -> None:
    """Squares 2 (1, 2, 3 around 2) and 2 (5, 7 around 6) over 2 + 1 degrees of freedom; a night of
    one trial adds neither."""
    assert regression._pooled_within_variance([[1.0, 2.0, 3.0], [5.0, 7.0], [4.0]]) == pytest.approx(4 / 3)
    assert regression._pooled_within_variance([[1.0], [2.0]]) == 0.0


def test_the_night_test_weighs_tonights_fewer_trials_by_its_own_count() -> None:
    """Nights of 3 trials (means 2, 3, 4), tonight of 2 (mean 6.5): the pooled within variance
    sigma2 = (3 x 2 + 0.5) / (3 x 2 + 1); tonight's mean varies by sigma2 / 2, the nights' by
    sigma2 / 3, so sigma2 / 6 is added to the prediction variance."""
    nights = [[1.0, 2.0, 3.0], [2.0, 3.0, 4.0], [3.0, 4.0, 5.0]]
    tonight = [6.0, 7.0]
    sigma2 = (3 * 2 + 0.5) / 7
    spread = 1 * (1 + 1 / 3)
    var = spread + sigma2 / 6
    expected = 2 * float(dist.t_sf((6.5 - 3) / math.sqrt(var), 2 * (var / spread) ** 2))
    assert regression._number_night_p(nights, tonight) == pytest.approx(expected, rel=1e-12)
