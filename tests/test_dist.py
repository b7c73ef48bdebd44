"""core.dist: each wrapper gives bit for bit what the scipy.stats call it replaces gives.

Not approximately: `np.array_equal(..., equal_nan=True)`, over grids that include the support's
edges (0, 1, +-inf), tiny and huge values, nan, degrees of freedom 1 and large, and arguments
scipy.stats calls invalid (nan there). If a scipy upgrade changes what scipy.stats calls, this
fails and dist.py follows it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats as sps

from orchestrator.core import dist

RNG = np.random.default_rng(20261203)
X = np.concatenate(
    [
        [-np.inf, -1e300, -40.0, -38.5, -8.3, -1.0, -1e-300, -0.0, 0.0, 5e-324, 1e-300, 1e-10, 0.5, 1.0, 1.96],
        [2.0, 8.3, 37.9, 38.0, 40.0, 1e10, 1e300, np.inf, np.nan],
        RNG.normal(0, 3, 200),
    ]
)
POSITIVE = np.concatenate([[0.0, 5e-324, 1e-300, 1e-10, 0.004, 0.5, 1.0, 3.84, 10.0, 161.4, 1e4, 1e300, np.inf]])
POSITIVE = np.concatenate([POSITIVE, RNG.exponential(5, 100), [-1.0, np.nan]])
Q = np.concatenate(
    [[0.0, 5e-324, 1e-300, 1e-17, 1e-10, 0.005, 0.025, 0.05, 0.1, 0.5, 0.8, 0.95, 0.975, 0.995, 1 - 1e-16, 1.0]],
)
Q = np.concatenate([Q, RNG.random(100), [-0.1, 1.1, np.nan]])
UNIT = np.concatenate([[-0.5, 0.0, 5e-324, 1e-300, 1e-10, 0.01, 0.5, 0.99, 1 - 1e-16, 1.0, 1.5, np.nan]])
UNIT = np.concatenate([UNIT, RNG.random(60)])
DF = [1e-3, 0.5, 1.0, 1.5, 2.0, 3.0, 7.3, 30.0, 1e3, 1e6, 1e12, np.inf, 0.0, -1.0, np.nan]
SHAPES = [1e-3, 0.02, 0.5, 1.0, 2.5, 40.0, 1e4, 0.0, -1.0, np.nan]


def check(ours: Callable[..., object], theirs: Callable[..., object], *args: object) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # boost's root-finding warnings at extreme shapes: both sides alike
        want, got = theirs(*args), ours(*args)
    g, w = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    bad = ~((g == w) | (np.isnan(g) & np.isnan(w)))
    assert g.shape == w.shape
    where = [a[bad] if np.ndim(a) else a for a in args]  # type: ignore[index]
    assert not bad.any(), f"{ours.__name__} differs at {where}: {g[bad]} vs {w[bad]}"


def test_norm() -> None:
    check(dist.norm_cdf, sps.norm.cdf, X)
    check(dist.norm_sf, sps.norm.sf, X)
    check(dist.norm_ppf, sps.norm.ppf, Q)
    check(dist.norm_isf, sps.norm.isf, Q)


@pytest.mark.parametrize("df", DF)
def test_t(df: float) -> None:
    check(dist.t_sf, sps.t.sf, X, df)
    check(dist.t_ppf, sps.t.ppf, Q, df)


@pytest.mark.parametrize("df", DF)
def test_chi2(df: float) -> None:
    check(dist.chi2_sf, sps.chi2.sf, POSITIVE, df)
    check(dist.chi2_ppf, sps.chi2.ppf, Q, df)


@pytest.mark.parametrize("dfn", [1.0, 2.0, 3.0, 10.0, 0.0, np.nan])
@pytest.mark.parametrize("dfd", DF)
def test_f(dfn: float, dfd: float) -> None:
    check(dist.f_sf, sps.f.sf, POSITIVE, dfn, dfd)


@pytest.mark.parametrize("a", SHAPES)
@pytest.mark.parametrize("b", SHAPES)
def test_beta(a: float, b: float) -> None:
    check(dist.beta_ppf, sps.beta.ppf, Q, a, b)
    check(dist.beta_cdf, sps.beta.cdf, UNIT, a, b)
    check(dist.beta_sf, sps.beta.sf, UNIT, a, b)


def test_beta_ppf_on_the_power_simulation_grid() -> None:
    """As power._QuasiSim calls it: uniforms of shape (sweeps, trials), the icc's scale."""
    u = RNG.random((300, 4))
    for p in (1e-4, 0.01, 0.16, 0.5, 0.99):
        for icc in (1e-3, 0.02, 0.05, 0.5):
            scale = (1 - icc) / icc
            check(dist.beta_ppf, sps.beta.ppf, u, p * scale, (1 - p) * scale)


@pytest.mark.parametrize("n", [0, 1, 2, 5, 6, 7, 10, 37, 100, 1000, 5000, 2.5, -1, np.nan])
def test_binom(n: float) -> None:
    k = np.array([-np.inf, -2, -1, -0.5, 0, 0.5, 1, 2, 3, 4.7, 5, 6, 9, 36, 99, 999, 4999, 5000, 1e6, np.inf, np.nan])
    for p in (0.0, 1e-10, 0.3, 0.5, 1.0, 1.5, np.nan):
        check(dist.binom_cdf, sps.binom.cdf, k, n, p)
        check(dist.binom_pmf, sps.binom.pmf, k, n, p)
        check(dist.binom_sf, sps.binom.sf, k, n, p)
        check(dist.binom_ppf, sps.binom.ppf, Q, n, p)


@pytest.mark.parametrize("n", [0, 1, 2, 5, 40, 1000, 2.5, -1, np.nan])
def test_betabinom(n: float) -> None:
    """core.regression's exact tail of a night's events (the trends of `orch serve`'s index, compare's
    nightly check): its only scipy.stats call was betabinom.pmf, ~1.5 s of import on a first view."""
    k = np.array([-np.inf, -1, -0.5, 0, 0.5, 1, 2, 3, 4.5, 5, 6, 39, 40, 41, 999, 1000, 1e6, np.inf, np.nan])
    for a in SHAPES:
        for b in (1e-3, 0.7, 3.0, 999.0, 0.0, np.nan):
            check(dist.betabinom_pmf, sps.betabinom.pmf, k, n, a, b)


# (M, n, N): population, good ones in it, drawn; the last four are invalid (nan from both)
HYPERGEOM = [(1, 0, 0), (1, 1, 1), (10, 3, 4), (10, 7, 9), (20, 20, 5), (20, 5, 20), (240, 40, 12), (2000, 1000, 999)]
HYPERGEOM += [(10**6, 1234, 56789), (0, 0, 0), (10, 11, 2), (10, 2, 11), (10.5, 2, 3)]


@pytest.mark.parametrize(("total", "good", "drawn"), HYPERGEOM)
def test_hypergeom(total: float, good: float, drawn: float) -> None:
    k = [-np.inf, -1, 0, 0.5, 1, 2, 3, 4, 5, 6.5, 9, 11, 12, 40, 500, 998, 999, 1000, 1234, 10**5, np.inf, np.nan]
    k = np.array(k)
    for ours, theirs in (
        (dist.hypergeom_pmf, sps.hypergeom.pmf),
        (dist.hypergeom_cdf, sps.hypergeom.cdf),
        (dist.hypergeom_sf, sps.hypergeom.sf),
    ):
        check(ours, theirs, k, total, good, drawn)


def test_scalars_give_0d_arrays_of_the_same_value() -> None:
    """The callers pass scalars too: float() of the 0-d result is scipy's number."""
    assert float(dist.norm_ppf(0.975)) == float(sps.norm.ppf(0.975))
    assert float(dist.t_ppf(0.975, 3.0)) == float(sps.t.ppf(0.975, 3.0))
    assert float(dist.t_sf(2.5, 7.0)) == float(sps.t.sf(2.5, 7.0))
    assert float(dist.f_sf(4.0, 1, 3.5)) == float(sps.f.sf(4.0, 1, 3.5))
    assert float(dist.chi2_sf(3.0, 1)) == float(sps.chi2.sf(3.0, 1))
    assert float(dist.binom_cdf(3, 10, 0.5)) == float(sps.binom.cdf(3, 10, 0.5))
    assert np.ndim(dist.norm_sf(1.0)) == 0


@pytest.mark.process
def test_the_statistics_modules_do_not_import_scipy_stats() -> None:
    """The point of core.dist: importing them (orch plan, the report) costs no scipy.stats."""
    import subprocess
    import sys

    modules = ["findings", "stats", "ranks", "power", "clustered", "regression", "sequential", "hunt", "trialexact"]
    code = (
        "import sys\n"
        + "".join(f"import orchestrator.core.{m}\n" for m in modules)
        + "print(sorted(m for m in sys.modules if m.startswith(('scipy.stats', 'statsmodels'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_ranks_constants_are_stats_ones() -> None:
    """ranks writes out stats' CONFIDENCE and Values (see ranks' imports): they must agree."""
    from orchestrator.core import ranks, stats

    assert ranks.CONFIDENCE == stats.CONFIDENCE
    assert ranks.Values == stats.Values


def test_the_exact_night_tail_needs_no_scipy_stats(monkeypatch: pytest.MonkeyPatch) -> None:
    """core.regression's exact beta-binomial tail runs with scipy.stats unimportable: `orch serve`'s
    first index view and `orch compare` paid its ~1.5 s import for this one pmf."""
    import sys

    import scipy

    from orchestrator.core import regression

    want = regression._betabinom_exact(3, [40, 40, 40], 0.02, 0.05)
    monkeypatch.delattr(scipy, "stats", raising=False)
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # type: ignore[arg-type]
    assert regression._betabinom_exact(3, [40, 40, 40], 0.02, 0.05) == want
