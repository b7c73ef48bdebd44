"""The few distribution functions the statistics modules need, from scipy.special (PURE).

Why: `import scipy.stats` costs ~1.5 s (scipy.special ~0.5 s), paid by every process that
imports a statistics module (`orch plan`, each report render), and each scipy.stats call spends
~50-100 us in argument checks around one special-function call. These wrappers call the very
function scipy.stats calls underneath (scipy 1.17: norm -> ndtr/ndtri, t -> stdtr/stdtrit,
chi2 -> chdtrc/gammaincinv, f -> fdtrc, beta -> _beta_ppf/betainc/betaincc, binom ->
_binom_pmf/_binom_cdf/_binom_sf/_binom_ppf, hypergeom -> _hypergeom_pmf/_hypergeom_cdf/
_hypergeom_sf), with the same handling of the support's edges and of invalid arguments, so
results are bit-identical:
tests/test_dist.py checks each against the scipy.stats call it replaces. Where scipy.stats uses
a private ufunc (beta.ppf, binom: the public betaincinv and bdtr differ in the last bits;
hypergeom has no public one) that ufunc is used, and the test pins it.

Arguments broadcast as numpy arrays; results are float64 arrays (0-d for scalar arguments).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from scipy import special
from scipy.special import _ufuncs as _private  # beta.ppf and binom's own ufuncs (see above)

Array = npt.NDArray[np.float64]
_NAN = np.nan


def _f(x: npt.ArrayLike) -> Array:
    return np.asarray(x, dtype=float)


def _valid(*args: Array) -> npt.NDArray[np.bool_]:
    """scipy's default _argcheck: every shape parameter > 0 (nan fails)."""
    ok = np.ones(np.broadcast_shapes(*(a.shape for a in args)), dtype=bool)
    for a in args:
        ok = ok & (a > 0)
    return ok


def _sf(value: Array, x: Array, ok: npt.NDArray[np.bool_], low: float, high: float) -> Array:
    """rv_continuous.sf's edges: nan for bad arguments or x, 1 at or below the support, 0 at or
    above it (scipy computes the function only inside), else value."""
    inside = np.where(x <= low, 1.0, np.where(x >= high, 0.0, value))
    out: Array = np.where(ok & ~np.isnan(x), inside, _NAN)
    return out


def _ppf(value: Array, q: Array, ok: npt.NDArray[np.bool_], low: float, high: float) -> Array:
    """rv_continuous.ppf's edges: the support's ends at q = 0 and 1, nan outside [0, 1] or bad arguments."""
    inside = np.where(q == 0, low, np.where(q == 1, high, np.where((q > 0) & (q < 1), value, _NAN)))
    out: Array = np.where(ok, inside, _NAN)
    return out


def norm_cdf(x: npt.ArrayLike) -> Array:
    """scipy.stats.norm.cdf."""
    return np.asarray(special.ndtr(_f(x)), dtype=float)


def norm_sf(x: npt.ArrayLike) -> Array:
    """scipy.stats.norm.sf: ndtr(-x), as scipy computes it (not 1 - cdf)."""
    return np.asarray(special.ndtr(-_f(x)), dtype=float)


def norm_logsf(x: npt.ArrayLike) -> Array:
    """log of scipy.stats.norm.sf: log_ndtr(-x), finite far in the tail where sf underflows."""
    return np.asarray(special.log_ndtr(-_f(x)), dtype=float)


def norm_ppf(q: npt.ArrayLike) -> Array:
    """scipy.stats.norm.ppf."""
    f = _f(q)
    with np.errstate(invalid="ignore"):
        return _ppf(np.asarray(special.ndtri(f), dtype=float), f, np.ones(f.shape, dtype=bool), -np.inf, np.inf)


def norm_isf(q: npt.ArrayLike) -> Array:
    """scipy.stats.norm.isf: -ndtri(q); +inf at q = 0, -inf at q = 1, nan outside [0, 1]."""
    f = _f(q)
    with np.errstate(invalid="ignore"):
        inside = np.where((f > 0) & (f < 1), -special.ndtri(f), _NAN)
        out: Array = np.where(f == 0, np.inf, np.where(f == 1, -np.inf, inside))
    return out


def t_sf(x: npt.ArrayLike, df: npt.ArrayLike) -> Array:
    """scipy.stats.t.sf: stdtr(df, -x)."""
    fx, fd = _f(x), _f(df)
    with np.errstate(invalid="ignore"):
        return _sf(np.asarray(special.stdtr(fd, -fx), dtype=float), fx, _valid(fd), -np.inf, np.inf)


def t_ppf(q: npt.ArrayLike, df: npt.ArrayLike) -> Array:
    """scipy.stats.t.ppf: stdtrit(df, q)."""
    fq, fd = _f(q), _f(df)
    with np.errstate(invalid="ignore"):
        return _ppf(np.asarray(special.stdtrit(fd, fq), dtype=float), fq, _valid(fd), -np.inf, np.inf)


def chi2_sf(x: npt.ArrayLike, df: npt.ArrayLike) -> Array:
    """scipy.stats.chi2.sf: chdtrc(df, x)."""
    fx, fd = _f(x), _f(df)
    with np.errstate(invalid="ignore"):
        return _sf(np.asarray(special.chdtrc(fd, fx), dtype=float), fx, _valid(fd), 0.0, np.inf)


def chi2_ppf(q: npt.ArrayLike, df: npt.ArrayLike) -> Array:
    """scipy.stats.chi2.ppf: 2 gammaincinv(df / 2, q)."""
    fq, fd = _f(q), _f(df)
    with np.errstate(invalid="ignore"):
        return _ppf(np.asarray(2 * special.gammaincinv(fd / 2, fq), dtype=float), fq, _valid(fd), 0.0, np.inf)


def f_sf(x: npt.ArrayLike, dfn: npt.ArrayLike, dfd: npt.ArrayLike) -> Array:
    """scipy.stats.f.sf: fdtrc(dfn, dfd, x)."""
    fx, fn, fd = _f(x), _f(dfn), _f(dfd)
    with np.errstate(invalid="ignore"):
        return _sf(np.asarray(special.fdtrc(fn, fd, fx), dtype=float), fx, _valid(fn, fd), 0.0, np.inf)


def log_beta(a: npt.ArrayLike, b: npt.ArrayLike) -> Array:
    """log B(a, b): scipy.special.betaln (no scipy.stats counterpart)."""
    return np.asarray(special.betaln(_f(a), _f(b)), dtype=float)


def beta_ppf(q: npt.ArrayLike, a: npt.ArrayLike, b: npt.ArrayLike) -> Array:
    """scipy.stats.beta.ppf: scipy's own _beta_ppf (betaincinv differs in the last bits)."""
    fq, fa, fb = _f(q), _f(a), _f(b)
    with np.errstate(invalid="ignore"):
        return _ppf(np.asarray(_private._beta_ppf(fq, fa, fb), dtype=float), fq, _valid(fa, fb), 0.0, 1.0)


def beta_cdf(x: npt.ArrayLike, a: npt.ArrayLike, b: npt.ArrayLike) -> Array:
    """scipy.stats.beta.cdf: betainc(a, b, x); 0 at and below the support's bottom, 1 at and above its top."""
    fx, fa, fb = _f(x), _f(a), _f(b)
    with np.errstate(invalid="ignore"):
        value = np.where(fx >= 1, 1.0, np.where(fx > 0, special.betainc(fa, fb, fx), 0.0))  # as rv_continuous.cdf
        out: Array = np.where(_valid(fa, fb) & ~np.isnan(fx), value, _NAN)
    return out


def beta_sf(x: npt.ArrayLike, a: npt.ArrayLike, b: npt.ArrayLike) -> Array:
    """scipy.stats.beta.sf: betaincc(a, b, x); 1 at and below the support's bottom, 0 above its top."""
    fx, fa, fb = _f(x), _f(a), _f(b)
    with np.errstate(invalid="ignore"):
        return _sf(np.asarray(special.betaincc(fa, fb, fx), dtype=float), fx, _valid(fa, fb), 0.0, 1.0)


def _binom_ok(n: Array, p: Array) -> npt.NDArray[np.bool_]:
    out: npt.NDArray[np.bool_] = (n >= 0) & (n == np.floor(n)) & (p >= 0) & (p <= 1)
    return out


def binom_cdf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Array:
    """scipy.stats.binom.cdf: scipy's _binom_cdf(floor(k), n, p) inside 0 <= k < n, clipped to [0, 1]."""
    fk, fn, fp = _f(k), _f(n), _f(p)
    ok = _binom_ok(fn, fp)
    with np.errstate(invalid="ignore"):
        inside = (fk >= 0) & (fk < fn) & np.isfinite(fk)
        value = np.clip(_private._binom_cdf(np.floor(fk), fn, fp), 0, 1)
        out: Array = np.where(ok & ~np.isnan(fk), np.where(inside, value, np.where(fk >= fn, 1.0, 0.0)), _NAN)
    return out


def binom_pmf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Array:
    """scipy.stats.binom.pmf: scipy's _binom_pmf on the support's integers 0..n, 0 off them."""
    fk, fn, fp = _f(k), _f(n), _f(p)
    with np.errstate(invalid="ignore"):
        on = (fk >= 0) & (fk <= fn) & (np.floor(fk) == fk)
        value = np.clip(_private._binom_pmf(fk, fn, fp), 0, 1)
        out: Array = np.where(_binom_ok(fn, fp) & ~np.isnan(fk), np.where(on, value, 0.0), _NAN)
    return out


def betabinom_pmf(k: npt.ArrayLike, n: npt.ArrayLike, a: npt.ArrayLike, b: npt.ArrayLike) -> Array:
    """scipy.stats.betabinom.pmf: exp of scipy's own _logpmf, clipped to [0, 1], on the support's
    integers 0..n, 0 off them; nan where n is not a whole number >= 0 or a, b not > 0."""
    fk, fn, fa, fb = _f(k), _f(n), _f(a), _f(b)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ok = (fn >= 0) & (fn == np.floor(fn)) & _valid(fa, fb)
        on = (fk >= 0) & (fk <= fn) & (np.floor(fk) == fk)
        whole = np.floor(fk)
        log_comb = -np.log(fn + 1) - special.betaln(fn - whole + 1, whole + 1)
        value = np.clip(np.exp(log_comb + special.betaln(whole + fa, fn - whole + fb) - special.betaln(fa, fb)), 0, 1)
        out: Array = np.where(ok & ~np.isnan(fk), np.where(on, value, 0.0), _NAN)
    return out


def binom_sf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Array:
    """scipy.stats.binom.sf: scipy's _binom_sf(floor(k), n, p) inside 0 <= k < n, 1 below, 0 at and above n."""
    fk, fn, fp = _f(k), _f(n), _f(p)
    with np.errstate(invalid="ignore"):
        inside = (fk >= 0) & (fk < fn) & np.isfinite(fk)
        value = np.clip(_private._binom_sf(np.floor(fk), fn, fp), 0, 1)
        out: Array = np.where(
            _binom_ok(fn, fp) & ~np.isnan(fk), np.where(inside, value, np.where(fk < 0, 1.0, 0.0)), _NAN
        )
    return out


def binom_ppf(q: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Array:
    """scipy.stats.binom.ppf: scipy's _binom_ppf; -1 at q = 0 (the support's bottom - 1), n at q = 1."""
    fq, fn, fp = _f(q), _f(n), _f(p)
    with np.errstate(invalid="ignore"):
        value = np.asarray(_private._binom_ppf(fq, fn, fp), dtype=float)
        inside = np.where(fq == 0, -1.0, np.where(fq == 1, fn, np.where((fq > 0) & (fq < 1), value, _NAN)))
        out: Array = np.where(_binom_ok(fn, fp), inside, _NAN)
    return out


HypergeomArgs = tuple[Array, Array, Array, Array, npt.NDArray[np.bool_], Array, Array]


def _hypergeom_args(k: npt.ArrayLike, total: npt.ArrayLike, good: npt.ArrayLike, drawn: npt.ArrayLike) -> HypergeomArgs:
    """k, scipy's (M, n, N), whether they are valid, and the support's ends (rv_discrete's rules)."""
    fk, fm, fn, fd = _f(k), _f(total), _f(good), _f(drawn)
    with np.errstate(invalid="ignore"):
        ok = (fm > 0) & (fn >= 0) & (fd >= 0) & (fn <= fm) & (fd <= fm)
        ok = ok & (fm == np.round(fm)) & (fn == np.round(fn)) & (fd == np.round(fd))
        low, high = np.maximum(fd - (fm - fn), 0), np.minimum(fn, fd)
    return fk, fm, fn, fd, ok, low, high


def hypergeom_pmf(k: npt.ArrayLike, total: npt.ArrayLike, good: npt.ArrayLike, drawn: npt.ArrayLike) -> Array:
    """scipy.stats.hypergeom.pmf(k, M=total, n=good, N=drawn): _hypergeom_pmf on the support's
    integers, 0 off them, nan for invalid arguments."""
    fk, fm, fn, fd, ok, low, high = _hypergeom_args(k, total, good, drawn)
    with np.errstate(invalid="ignore"):
        on = (fk >= low) & (fk <= high) & (np.floor(fk) == fk)
        value = np.clip(_private._hypergeom_pmf(fk, fn, fd, fm), 0, 1)
        out: Array = np.where(~ok | np.isnan(fk), _NAN, np.where(on, value, 0.0))
    return out


def hypergeom_cdf(k: npt.ArrayLike, total: npt.ArrayLike, good: npt.ArrayLike, drawn: npt.ArrayLike) -> Array:
    """scipy.stats.hypergeom.cdf: _hypergeom_cdf inside [low, high), 0 below, 1 at and above high."""
    return _hypergeom_tail(_private._hypergeom_cdf, k, total, good, drawn, below=0.0, above=1.0)


def hypergeom_sf(k: npt.ArrayLike, total: npt.ArrayLike, good: npt.ArrayLike, drawn: npt.ArrayLike) -> Array:
    """scipy.stats.hypergeom.sf: _hypergeom_sf inside [low, high), 1 below, 0 at and above high."""
    return _hypergeom_tail(_private._hypergeom_sf, k, total, good, drawn, below=1.0, above=0.0)


def _hypergeom_tail(
    tail: Callable[..., npt.ArrayLike],
    k: npt.ArrayLike,
    total: npt.ArrayLike,
    good: npt.ArrayLike,
    drawn: npt.ArrayLike,
    *,
    below: float,
    above: float,
) -> Array:
    """rv_discrete.cdf's and .sf's edges around scipy's ufunc (clipped to [0, 1]): `below` under
    the support, `above` at and over its top, nan for invalid arguments or k."""
    fk, fm, fn, fd, ok, low, high = _hypergeom_args(k, total, good, drawn)
    with np.errstate(invalid="ignore"):
        inside = (fk >= low) & (fk < high) & np.isfinite(fk)
        value = np.clip(tail(fk, fn, fd, fm), 0, 1)
        out: Array = np.where(~ok | np.isnan(fk), _NAN, np.where(inside, value, np.where(fk >= high, above, below)))
    return out
