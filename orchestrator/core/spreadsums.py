"""PURE: the sums behind a pooled dispersion - each cell's spread of its trials' counts beyond the
binomial's, and phi pooled over cells with Satterthwaite's degrees of freedom (why a ratio of
sums: core/clustered.py's docstring, which builds its tests and intervals on them).

Apart from core/clustered.py so that the culprit hunt (core/huntspread.py) estimates its trials'
variation by the very sums the reports use without sitting above the reports' statistics.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


def cell_spread(k: npt.ArrayLike, n: npt.ArrayLike) -> tuple[Array, Array, Array]:
    """(A, B, df) of cells from their trials' counts k, n of shape (..., trials).

    A: the spread of k around the cell's pooled rate; B: the spread the binomial expects; df:
    trials - 1. All three are 0 for a cell that cannot inform phi. A trial with n == 0 is absent.
    """
    k_arr, n_arr = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    total_k, total_n = k_arr.sum(axis=-1), n_arr.sum(axis=-1)
    trials = (n_arr > 0).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(total_n > 0, total_k / total_n, 0.0)
        spread = ((k_arr - n_arr * p[..., None]) ** 2).sum(axis=-1)
        expected = p * (1 - p) * (total_n - (n_arr**2).sum(axis=-1) / total_n)
    informative = (trials >= 2) & (p > 0) & (p < 1)
    zero = np.zeros_like(p)
    return (
        np.where(informative, spread, zero),
        np.where(informative, expected, zero),
        np.where(informative, trials - 1, zero).astype(float),
    )


def pooled_dispersion(a: npt.ArrayLike, b: npt.ArrayLike, df: npt.ArrayLike) -> tuple[Array, Array]:
    """(phi, Satterthwaite df) from cells' (A, B, df) over the last axis; (nan, 0) without data."""
    a_arr, b_arr, d_arr = (np.asarray(x, dtype=float) for x in (a, b, df))
    total_b = b_arr.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = np.where(total_b > 0, a_arr.sum(axis=-1) / total_b, np.nan)
        weight = np.where(d_arr > 0, b_arr**2 / np.where(d_arr > 0, d_arr, 1.0), 0.0).sum(axis=-1)
        eff = np.where(total_b > 0, total_b**2 / weight, 0.0)
    return phi, eff
