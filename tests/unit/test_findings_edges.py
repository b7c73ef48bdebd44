"""Edges of core/findings.py the report relies on but no design of the other tests reached
(mutation testing: bench/README.md, "Fourth round")."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.core import clustered, findings


def test_a_level_mask_shared_by_every_contrast_cannot_be_changed_in_place() -> None:
    """_Grid keeps one mask per (factor, level) for every contrast of the sweep; a caller writing
    into it (an `&=` on the mask itself rather than a copy) would silently drop cells from every
    later contrast. It is read-only, and a second ask returns the same, unchanged mask."""
    cells = {(("a", "off"),): (1, 10), (("a", "on"),): (4, 10)}
    grid = findings._Grid(cells)
    mask = grid._is("a", "on")
    assert mask.tolist() == [False, True]
    with pytest.raises(ValueError):
        mask &= False
    assert grid._is("a", "on") is mask and mask.tolist() == [False, True]
    unknown = grid._is("a", "missing")
    assert unknown.tolist() == [False, False] and not unknown.flags.writeable


def test_no_contrast_to_read_off_stopped_cells_gives_none() -> None:
    """stopped_mover of no contrasts: no interval and no p (not a crash on an empty max)."""
    intervals, p = findings.stopped_mover([], clustered.cell_bounds)
    assert intervals == [] and isinstance(p, np.ndarray) and p.shape == (0,)


def test_the_large_sample_shift_estimate_is_the_median_of_the_differences() -> None:
    """One stratum of 1,000 vs 1,000 values (the normal approximation's path, no subsample): the
    Hodges-Lehmann estimate the report prints is the median of the 10^6 differences, numpy's.
    The median of an even count falls between two differences; the cumulative weights reach half
    only within their rounding (2.5e-9 short here), which the midpoint's tolerance must absorb."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=1000), rng.normal(size=1000) + 0.3
    shifted = findings.stratified_shift([(x, y)], 0.95)
    assert shifted.estimate == pytest.approx(float(np.median(np.subtract.outer(x, y))), abs=1e-12)
    assert shifted.low is not None and shifted.high is not None and shifted.low < shifted.estimate < shifted.high


def test_strata_too_small_for_the_confidence_state_no_interval() -> None:
    """1 vs 2 and 2 vs 2 trials: no set of shifts reaches 95% (at most 88.9%): an estimate, and
    no low, high or coverage at all (None, which the page prints as no interval)."""
    strata = [(np.array([1.0]), np.array([0.0, 0.5])), (np.array([2.0, 3.0]), np.array([0.0, 1.0]))]
    shifted = findings.stratified_shift(strata, 0.95)
    assert shifted.estimate is not None
    assert (shifted.low, shifted.high, shifted.coverage) == (None, None, None)
