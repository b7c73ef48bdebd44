"""A rate's interval widened for trial-to-trial variation is never wider than taking each trial as
one observation. Each trial's rate lies in [0, 1], so however its sessions hang together the pooled
rate's variance is at most p(1 - p) / trials: the variance factor m never needs to exceed the
sessions of a trial. Found by the second export audit: a hunt configuration with 0 of 110 sessions
failed read "95% interval 0.0%-72.7%", phi estimated on 1 df (t(1)^2 / z^2 = 42 times the
binomial variance, where 22 trials of 5 sessions bound it at 5). Pure."""

from __future__ import annotations

import pytest

from orchestrator.core.clustered import Dispersion, rate_interval, wilson_inflated

ONE_DF = Dispersion(phi=1.0, df=1.0, trials=4, cells=2, most_trials=22, sessions_per_trial=5.0)


def test_a_dispersion_on_one_df_is_bounded_by_the_trials() -> None:
    low, high = rate_interval(0, 110, ONE_DF, trials=22)
    _, by_trials = wilson_inflated(0, 22, 1.0)  # 0 of 22 trials: each trial one observation
    _, binomial = wilson_inflated(0, 110, 1.0)
    assert low == 0.0 and high == pytest.approx(float(by_trials)) and high < 0.16, high
    assert high > float(binomial)  # still wider than sessions taken as independent


def test_the_bound_uses_the_configurations_own_trial_size_or_else_the_mean() -> None:
    _, own = rate_interval(3, 120, ONE_DF, trials=3)  # trials of 40 sessions: bounded at 40
    _, mean = rate_interval(3, 120, ONE_DF)  # the sweep's mean trial of 5 sessions
    assert own == pytest.approx(float(wilson_inflated(3, 120, 40.0)[1]))
    assert mean == pytest.approx(float(wilson_inflated(3, 120, 5.0)[1]))


@pytest.mark.parametrize("df", [8.0, 30.0])
def test_an_estimate_on_enough_df_is_untouched(df: float) -> None:
    """The bound binds only where the t quantile of a few df blows the factor up."""
    spread = Dispersion(phi=1.8, df=df, trials=40, cells=8, most_trials=5, sessions_per_trial=40.0)
    assert rate_interval(12, 200, spread, trials=5) == pytest.approx(
        tuple(float(x) for x in wilson_inflated(12, 200, spread.inflation()))
    )
    assert spread.interval_inflation(40.0) == pytest.approx(spread.inflation())


def test_the_cells_interval_factor_is_bounded_alike() -> None:
    assert ONE_DF.inflation() > 40 and ONE_DF.interval_inflation(5.0) == 5.0
    assert ONE_DF.interval_inflation(0.5) == 1.0  # never narrower than the binomial
