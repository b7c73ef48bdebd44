"""What `orch plan` and the report promise past the exact grid, and the grid's edge (core/power.py).

Past MAX_EXACT_N sessions a side, the detectable difference comes from the arcsine (Cohen's h)
normal approximation; these tests compare it with the exact Fisher figure at the grid's edge and
with statsmodels' power solver, so a wrong sign or a swapped operator in it is seen (mutation
testing: bench/README.md, "Fourth round")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.stats.power import NormalIndPower

from orchestrator.core import power


@pytest.mark.parametrize("baseline", [0.02, 0.1, 0.3, 0.5])
def test_the_approximation_is_within_a_point_of_the_exact_figure_at_the_grid_edge(baseline: float) -> None:
    """The docstring's "< 1 pt off": at 500 sessions a side the exact figure exists; the
    approximation used beyond it must agree to well under a point (measured: 0.1-0.25 points)."""
    exact = power.detectable(500, 500, baseline)
    rise, fall = power._approximate(500, 500, baseline, 0.05, 0.8)
    assert exact.rise is not None and exact.fall is not None and rise is not None and fall is not None
    assert abs(rise - exact.rise) < 0.005
    assert abs(fall - exact.fall) < 0.005
    assert rise <= exact.rise and fall <= exact.fall  # the normal limit is the less conservative one


def test_beyond_the_grid_the_detectable_difference_is_statsmodels_cohen_h() -> None:
    """1,000 sessions a side at a 10% baseline: statsmodels solves Cohen's h for 80% power at
    alpha 0.05 (two-sided); the rate whose h from 10% is that is the rise `orch plan` states."""
    h = NormalIndPower().solve_power(effect_size=None, nobs1=1000, alpha=0.05, power=0.8, ratio=1.0)
    angle = math.asin(math.sqrt(0.1))
    want_rise = math.sin(angle + h / 2) ** 2 - 0.1
    want_fall = 0.1 - math.sin(angle - h / 2) ** 2
    d = power.detectable(1000, 1000, 0.1)
    assert d.rise == pytest.approx(want_rise, rel=1e-4)  # statsmodels solves h numerically
    assert d.fall == pytest.approx(want_fall, rel=1e-4)  # statsmodels solves h numerically
    assert 0.035 < d.rise < 0.045  # about 4 points: the figure a user reads


def test_a_side_with_no_sessions_has_every_table_at_p_one() -> None:
    """fisher_pvalues accepts 0..MAX_EXACT_N a side: with no sessions on one side nothing can
    differ (scipy's fisher_exact gives 1 for every such table)."""
    assert np.array_equal(power.fisher_pvalues(0, 3), np.ones((1, 4)))
    assert np.array_equal(power.fisher_pvalues(2, 0), np.ones((3, 1)))
    with pytest.raises(ValueError):
        power.fisher_pvalues(-1, 3)


def test_the_simulated_trials_have_the_dispersion_the_design_states() -> None:
    """quasi_detectable simulates the design "with the dispersion this run estimated as the
    truth": trials of 20 sessions at phi 3 must scatter 3 times the binomial's variance,
    20 x 0.2 x 0.8 x 3 = 9.6 sessions^2, around a mean of 4 (3,000 sweeps x 50 trials drawn).
    A narrower scatter would state a power the design does not have."""
    sim = power._QuasiSim(power.Design(sessions=20, trials=50, other_rates=(), phi=3.0), 0.2, seed=0)
    k = sim.fixed_k[:, 0, :].ravel()
    assert k.size == 150_000
    assert k.mean() == pytest.approx(4.0, rel=0.01)
    assert k.var() == pytest.approx(9.6, rel=0.03)
    # the compared cell's trials too (drawn from their own uniforms at each rate it is tried at)
    counts = sim.cell_counts(0.2).ravel()
    assert counts.mean() == pytest.approx(4.0, rel=0.01)
    assert counts.var() == pytest.approx(9.6, rel=0.03)
