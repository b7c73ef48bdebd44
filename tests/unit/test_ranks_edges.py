"""core.ranks' edges no other test reached (bench/mutants.py round nine): one value on a side, the
normal approximation's coverage of the shift interval, and the order named in median_coverage's
refusal."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.core import dist, ranks


def test_median_coverage_refuses_an_order_past_the_middle_and_names_the_range() -> None:
    with pytest.raises(ValueError, match=r"order 4 not in 1\.\.3 for n=5"):
        ranks.median_coverage(5, 4)
    with pytest.raises(ValueError, match=r"order 4 not in 1\.\.3 for n=6"):
        ranks.median_coverage(6, 4)


def test_one_value_against_many_can_still_be_significant() -> None:
    """1 vs 39: the exact floor is 2/40 = 0.05; with ties the normal approximation goes lower. A
    side of one value is no empty side (p 1.0)."""
    assert ranks.mann_whitney_floor(1, 39) == pytest.approx(2 / 40)
    assert ranks.mann_whitney_smallest_p(1, 39) == pytest.approx(min(2 / 40, ranks.mann_whitney([1.0], [0.0] * 39)))
    assert ranks.mann_whitney_smallest_p(1, 39) < 0.05
    assert ranks.mann_whitney_floor(0, 39) == ranks.mann_whitney_smallest_p(39, 0) == 1.0


def test_the_shift_interval_of_the_normal_approximation_has_its_stated_coverage() -> None:
    """60 vs 60 values (3,600 pairs): past the exact null. The interval [d_(k), d_(mn+1-k)] and the
    coverage 1 - 2 Phi((k - 0.5 - mn/2) / sd) it states, with k from the normal quantile."""
    x = np.arange(60, dtype=float)
    y = np.arange(60, dtype=float) + 0.25
    got = ranks.shift_interval(x, y)
    mean, sd = 60 * 60 / 2, math.sqrt(60 * 60 * 121 / 12)
    k = math.floor(mean - dist.norm_ppf(0.975) * sd)
    diffs = np.sort(np.subtract.outer(x, y).ravel())
    assert (got.low, got.high) == (diffs[k - 1], diffs[diffs.size - k])
    assert got.coverage == pytest.approx(1 - 2 * float(dist.norm_cdf((k - 0.5 - mean) / sd)))
    assert 0.95 <= got.coverage < 0.951


def test_a_confidence_no_order_reaches_gives_the_full_range_of_differences() -> None:
    """3 vs 834 values at 99.9%: the normal approximation's k is below 1; the interval is then the
    whole range of the pairwise differences, never an index past its end."""
    x = np.array([0.0, 1.0, 2.0])
    y = np.arange(834, dtype=float)
    got = ranks.shift_interval(x, y, confidence=0.999)
    assert (got.low, got.high) == (0.0 - 833.0, 2.0 - 0.0)


PRIMES_TO_47 = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47)


def test_strata_whose_lattice_outgrows_an_int64_are_not_enumerated() -> None:
    """2 L sum U_s/(N_s + 1) must fit an int64: with L the lcm of the N_s + 1 (here the primes to
    47 through strata with one side empty, L = 6.1e17), 2 L x 3 pairs = 3.7e18 fits under 2^62 and
    2 L x 4 pairs = 4.9e18 does not."""
    empty_sided = [(0, p - 1) for p in PRIMES_TO_47 if p != 5]
    fits = ranks.stratified_steps([(1, 3), *empty_sided])
    assert fits is not None and fits[0] == math.prod(PRIMES_TO_47) // 5  # L / (N + 1) for the (1, 3) stratum
    assert ranks.stratified_steps([(1, 4), *empty_sided, (0, 4)]) is None


def test_untied_null_of_strata_too_large_to_enumerate_says_so() -> None:
    with pytest.raises(ValueError, match=r"untied_null: strata \(\(60, 60\),\) are too large to enumerate"):
        ranks.untied_null(((60, 60),))
