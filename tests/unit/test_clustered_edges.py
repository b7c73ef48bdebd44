"""Trial-level statistics (core.clustered) on the data shapes the other tests did not feed.

Found by mutation testing (bench/mutants.py): counting a round of a cell as present only above
one session left every test green (their trials ran 40 sessions each), and so did subtracting
half a table probability from the binomial test that replaces Fisher past its size, and so did
anytime_log_evidence returning nothing (the bounds compute the same e-value inline; nothing
checked the two agree).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.core import clustered, stats


def test_trials_of_one_session_each_count_in_the_round_spread() -> None:
    """A repro of one session per trial: each (cell, round) entry is one session, and the spread
    around the cell + round fit has (cells - 1)(rounds - 1) degrees of freedom, as with 40."""
    k = np.array([[1, 0, 0, 1], [0, 1, 1, 0], [1, 1, 0, 0]], dtype=float)
    phi, df = clustered.round_dispersion(k, np.ones_like(k))
    assert df == (3 - 1) * (4 - 1)
    assert phi > 0


def test_the_sparse_tables_mid_p_is_fishers_where_fisher_runs_and_the_binomial_tests_past_it() -> None:
    """Mid-p subtracts half the observed table's probability from Fisher's p; a p of 1 (the same
    rates) stays 1, and past stats.FISHER_SESSIONS the binomial test's p is taken as it is (it
    has no table probability to subtract)."""
    assert clustered._mid_p(1, 40, 1, 40) == 1.0
    assert clustered._mid_p(0, 40, 5, 40) < stats.pooled_test(0, 40, 5, 40).p
    many = stats.FISHER_SESSIONS
    binomial = stats.pooled_test(1, many, 6, many)
    assert not binomial.exact
    assert clustered._mid_p(1, many, 6, many) == binomial.p


def test_a_stopped_cells_interval_ends_where_its_e_value_reaches_one_over_alpha() -> None:
    """The anytime-valid interval (stopped_rate) is every rate whose mixture e-value
    (anytime_log_evidence, the definition the report's words cite) stays under 1 / (1 - 0.95)."""
    bound = math.log(1 / (1 - clustered.CONFIDENCE))
    for k, n in ((3, 40), (0, 120), (17, 60)):
        interval = clustered.stopped_rate(k, n, None)
        edges = [p for p in (interval.low, interval.high) if 0 < p < 1]
        assert edges
        assert np.allclose(clustered.anytime_log_evidence(edges, k, n), bound, atol=1e-6)
        assert clustered.anytime_log_evidence(k / n, k, n) < bound


def test_the_e_value_is_the_jeffreys_mixtures_likelihood_ratio() -> None:
    """Against "the rate is p" after k events in n sessions: the Beta(1/2, 1/2) mixture's marginal
    likelihood over p's, B(k + 1/2, n - k + 1/2) / B(1/2, 1/2) / (p^k (1 - p)^(n - k)); in logs."""

    def log_beta(a: float, b: float) -> float:
        return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)

    for p, k, n in ((0.1, 3, 40), (0.02, 0, 120), (0.5, 17, 60), (0.3, 9, 9)):
        mixture = log_beta(k + 0.5, n - k + 0.5) - log_beta(0.5, 0.5)
        expected = mixture - k * math.log(p) - (n - k) * math.log1p(-p)
        assert float(clustered.anytime_log_evidence(p, k, n)) == pytest.approx(expected, rel=1e-9)
