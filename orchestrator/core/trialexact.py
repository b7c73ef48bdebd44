"""A cell-vs-baseline test on the trials themselves, for sweeps whose dispersion rests on ~1 df.

Why: the quasi-binomial test (core.clustered) estimates the trial-to-trial dispersion phi from
the cells that saw events. When that is one cell of two trials (a 2x2x2 whose failure sits in one
cell; bench/bench_sparse_power.py), phi rests on one degree of freedom and the test needs
z^2 / phi > F(1, 1) = 161: it almost never rejects (0.2% power where Fisher has 80%). A test that
is valid for ANY phi cannot do better there, because one df cannot tell phi = 1 from phi = 3. This
one states a bound instead: the intra-trial correlation (ICC) is at most ICC_BOUND.

- statistic: the log likelihood ratio of each arm at its own rate with independent sessions
  (what a real difference without trial variation looks like) against ONE common rate whose
  trials vary beta-binomially, at the ICC (0-0.95) that fits best. Trials that agree within each
  arm and differ between arms score high; a spread that trial variation explains scores low.
- p-value: the largest probability, over the common rate p (0-1, the statistic is symmetric in
  events and non-events) and the ICC, that the statistic reaches the observed value, simulated
  on the design (each trial's sessions), seeded, once per design. For ICC <= ICC_BOUND that is
  the plain probability (A/A <= alpha); for larger ICC (0.1-0.95) it is divided by FAR_FACTOR,
  so there the A/A rate is at most FAR_FACTOR * alpha: graceful, never unbounded.
- a p-value is a tail count (count + 1) / (draws + 1): never 0, at least 1 / (DRAWS + 1).

Measured (bench/bench_sparse_power.py, 40 sessions a trial, ICC 0): events in one cell (9.7% vs
0), 2/3/4 trials: 77/94/99% power where Fisher has 80/98/100% (the quasi test: 0.2/43/79%).
Limits: with two trials a side no test that keeps the A/A rate <= 5% for every ICC up to 0.05
(both directions counted) has more than 66% power at 15% vs 2% (a linear programme over all such
tests), where Fisher has 82%; this one alone reaches 55%, the report (this where phi rests on under
2 df or on one cell's under 4, clustered.sparse; else the quasi test) 54-56%.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy import special

Array = npt.NDArray[np.float64]

ICC_BOUND = 0.05
NEAR_ICCS = (0.0, 0.01, 0.025, 0.05)  # the A/A rate is held at alpha here
FAR_ICCS = (0.1, 0.2, 0.5, 0.95)  # and at FAR_FACTOR * alpha here
FAR_FACTOR = 2.0
FIT_ICCS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 0.95)  # the common-rate fits the statistic tries
DRAWS = 3000  # simulated pairs per (common rate, ICC)
RATES = 24  # common rates searched
SEED = 20261201
TOLERANCE = 1e-9
MAX_TABLE = 4_000_000  # float entries of a design's look-up tables (32 MB)


def _binomial_ll(k: Array, n: Array, p: Array) -> Array:
    """Sum over trials of the binomial log likelihood, without log C(n, k) (it cancels)."""
    q = np.clip(p, 0.0, 1.0)
    out: Array = (special.xlogy(k, q) + special.xlog1py(n - k, -q)).sum(axis=-1)
    return out


def _beta_binomial_ll(k: Array, n: Array, p: Array, icc: float) -> Array:
    """Sum over trials of the beta-binomial log likelihood (mean p, correlation icc), without log C(n, k)."""
    if icc <= 0:
        return _binomial_ll(k, n, p)
    scale = (1 - icc) / icc
    q = np.clip(p, 1e-12, 1 - 1e-12)
    a, b = q * scale, (1 - q) * scale
    out: Array = (special.betaln(k + a, n - k + b) - special.betaln(a, b)).sum(axis=-1)
    return out


def statistic(kc: npt.ArrayLike, nc: npt.ArrayLike, kb: npt.ArrayLike, nb: npt.ArrayLike) -> Array:
    """The log likelihood ratio of trials (..., Tc) vs (..., Tb); -inf where no or every session saw it."""
    k1, n1, k2, n2 = (np.asarray(x, dtype=float) for x in (kc, nc, kb, nb))
    n1, n2 = np.broadcast_to(n1, k1.shape), np.broadcast_to(n2, k2.shape)
    s1, t1, s2, t2 = k1.sum(-1), n1.sum(-1), k2.sum(-1), n2.sum(-1)
    common = (s1 + s2) / (t1 + t2)
    apart = _binomial_ll(k1, n1, (s1 / t1)[..., None]) + _binomial_ll(k2, n2, (s2 / t2)[..., None])
    k, n = np.concatenate([k1, k2], axis=-1), np.concatenate([n1, n2], axis=-1)
    together = np.max([_beta_binomial_ll(k, n, common[..., None], icc) for icc in FIT_ICCS], axis=0)
    out: Array = np.where((common > 0) & (common < 1), apart - together, -np.inf)
    return out


def common_rates(total: int) -> Array:
    """The common rates the p-value searches: dense where events are rare (the zero arm's home)."""
    lowest = min(0.002, 0.5 / max(total, 1))
    half = RATES * 2 // 5
    return np.concatenate([np.geomspace(lowest, 0.05, half), np.linspace(0.065, 0.5, RATES - half)])


class _Tables:
    """statistic() for one design as table look-ups: every rate it evaluates is a count over a fixed
    number of sessions (an arm's total, the pair's total), so each trial's log likelihood is a
    table of (that count, the trial's k). Same value as statistic(), ~50x faster. Designs whose
    tables would pass MAX_TABLE entries (thousands of sessions a trial) use statistic() itself."""

    def __init__(self, cell: Sequence[int], base: Sequence[int]) -> None:
        self.cell, self.base = np.asarray(cell, dtype=np.int64), np.asarray(base, dtype=np.int64)
        self.total = int(self.cell.sum() + self.base.sum())
        sizes = {*self.cell.tolist(), *self.base.tolist()}
        self.direct = (self.total + 1) * sum(m + 1 for m in sizes) * len(FIT_ICCS) > MAX_TABLE
        if self.direct:
            return
        common = np.arange(self.total + 1) / self.total
        self.together = {m: self._fits(m, common) for m in {*self.cell.tolist(), *self.base.tolist()}}
        self.apart = [self._own(int(self.cell.sum()), m) for m in self.cell] + [
            self._own(int(self.base.sum()), m) for m in self.base
        ]

    @staticmethod
    def _fits(m: int, common: Array) -> Array:
        """(fits, common count, k): the beta-binomial log likelihood of k of m at each fit."""
        k = np.arange(m + 1, dtype=float)[None, :, None]
        rate = common[:, None, None]
        return np.stack(
            [_beta_binomial_ll(k, np.full_like(k, m), np.broadcast_to(rate, (len(common), 1, 1)), i) for i in FIT_ICCS]
        )

    @staticmethod
    def _own(total: int, m: int) -> Array:
        """(arm count, k): the binomial log likelihood of k of m at the arm's own rate."""
        k = np.arange(m + 1, dtype=float)[None, :, None]
        rate = (np.arange(total + 1) / total)[:, None, None]
        return _binomial_ll(k, np.full_like(k, m), rate)

    def statistic(self, kc: npt.NDArray[np.int64], kb: npt.NDArray[np.int64]) -> Array:
        """kc (..., Tc), kb (..., Tb) integer counts of this design's trials."""
        if self.direct:
            return statistic(kc, self.cell, kb, self.base)
        s1, s2 = kc.sum(-1), kb.sum(-1)
        common = s1 + s2
        apart = np.zeros(common.shape)
        together = np.zeros((len(FIT_ICCS), *common.shape))
        for arm, own, sessions, offset in ((kc, s1, self.cell, 0), (kb, s2, self.base, len(self.cell))):
            for i, m in enumerate(sessions.tolist()):
                k = arm[..., i]
                table = self.apart[offset + i]
                apart += table.ravel()[own * table.shape[1] + k]
                fits = self.together[m]
                together += fits.reshape(len(FIT_ICCS), -1)[:, common * (m + 1) + k]
        out: Array = np.where((common > 0) & (common < self.total), apart - together.max(axis=0), -np.inf)
        return out


@dataclass(frozen=True)
class Calibration:
    """The simulated null distribution of the statistic for one design, per (common rate, ICC)."""

    tables: _Tables
    near: Array  # (rows, DRAWS) sorted statistics, ICC <= ICC_BOUND
    far: Array  # (rows, DRAWS) sorted statistics, larger ICC

    def pvalue(self, t: npt.ArrayLike) -> Array:
        """The sup-over-nuisance p of observed statistics t (any shape).

        Each distinct value is looked up once: a simulation's thousands of sweeps hold a few
        dozen distinct tables (power.quasi_detectable's steps spent ~70% here), and a value's p
        depends on that value alone, so the p of the distinct values, spread back, is the same."""
        values = np.asarray(t, dtype=float)
        flat = values.ravel() - TOLERANCE * (1 + np.abs(np.nan_to_num(values.ravel(), neginf=0.0)))
        distinct, back = np.unique(flat, return_inverse=True)
        out = np.zeros(distinct.shape)
        for rows, factor in ((self.near, 1.0), (self.far, FAR_FACTOR)):
            draws = rows.shape[1]
            for row in rows:
                tail = (draws - np.searchsorted(row, distinct, side="left") + 1) / (draws + 1)
                out = np.maximum(out, tail / factor)
        p: Array = np.where(np.isneginf(values.ravel()), 1.0, np.minimum(out[back.reshape(-1)], 1.0))
        return p.reshape(values.shape)

    def pvalues(self, kc: npt.ArrayLike, kb: npt.ArrayLike) -> Array:
        """p of trials kc (..., Tc) vs kb (..., Tb) of this design (vectorised: the simulations)."""
        return self.pvalue(self.tables.statistic(np.asarray(kc, dtype=np.int64), np.asarray(kb, dtype=np.int64)))


def _simulate(rng: np.random.Generator, tables: _Tables, icc: float, rates: Array) -> Array:
    """Sorted statistics of DRAWS null pairs per common rate, trials drawn beta-binomially."""
    sessions = np.concatenate([tables.cell, tables.base])
    shape = (len(rates), DRAWS, len(sessions))
    p = np.broadcast_to(rates[:, None, None], shape)
    if icc > 0:
        scale = (1 - icc) / icc
        p = rng.beta(p * scale, (1 - p) * scale)
    k = rng.binomial(np.broadcast_to(sessions, shape), p)
    stats = tables.statistic(k[..., : len(tables.cell)], k[..., len(tables.cell) :])
    return np.sort(stats, axis=-1)


@lru_cache(maxsize=64)
def calibration(cell: tuple[int, ...], base: tuple[int, ...]) -> Calibration:
    """The null distribution for trials of these sessions (cell, baseline), sorted tuples; seeded."""
    rng = np.random.default_rng(SEED)
    tables = _Tables(cell, base)
    rates = common_rates(tables.total)
    near = np.concatenate([_simulate(rng, tables, icc, rates) for icc in NEAR_ICCS])
    far = np.concatenate([_simulate(rng, tables, icc, rates) for icc in FAR_ICCS])
    return Calibration(tables, near, far)


def design(cell: Sequence[int], base: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The calibration key: each arm's sessions sorted (the statistic ignores trial order), arms
    ordered (it is symmetric in the arms), trials without sessions dropped."""
    a = tuple(sorted(int(x) for x in cell if x > 0))
    b = tuple(sorted(int(x) for x in base if x > 0))
    return (a, b) if a <= b else (b, a)


def pair_pvalue(cell: Sequence[tuple[int, int]], base: Sequence[tuple[int, int]]) -> float:
    """Two-sided p of a cell's trials [(k, n)] against the baseline's (the report's entry point)."""
    c = [(int(k), int(n)) for k, n in cell if n > 0]
    b = [(int(k), int(n)) for k, n in base if n > 0]
    if not c or not b:
        return 1.0
    c, b = sorted(c, key=lambda t: t[1]), sorted(b, key=lambda t: t[1])
    key = design([n for _, n in c], [n for _, n in b])
    if key[0] != tuple(n for _, n in c):  # the key put the baseline first
        c, b = b, c
    return float(calibration(*key).pvalues([k for k, _ in c], [k for k, _ in b]))
