"""Distribution-free intervals for numeric metrics, each with the coverage it really has (PURE).

Why: a numeric metric is one value per trial, so a cell holds a handful of values. The sample
range of 2 values covers the median only half the time, and labelling it "95% CI" claims a
certainty the data do not have. Here every interval comes from order statistics, its exact
coverage is computed (not assumed), and when no order statistic reaches the asked-for coverage
there is no interval at all.

- median_interval: [x_(j), x_(n+1-j)] covers the median with probability 1 - 2*Binom(j-1; n, 1/2)
  for any continuous distribution (n >= 6 for 95%).
- shift_interval: the Hodges-Lehmann shift between two groups with the interval that inverts the
  exact Mann-Whitney test (Lehmann 1963): [d_(k), d_(mn+1-k)] of the m*n pairwise differences.
- mann_whitney_min_p: the smallest two-sided p an exact Mann-Whitney test can give, 2/C(m+n, m):
  with 2 trials per cell it is 0.33, so no difference can ever be significant.
- stratified_steps, untied_null, tied_pmf, stratified_null: the exact permutation distribution of
  van Elteren's stratified statistic sum_s U_s/(N_s + 1) while the within-stratum relabellings can
  be enumerated (findings uses it for the p-value and the shift interval of small strata, where
  the normal approximation rejected a true null 11% of the time at 0.05 and its "95%" interval
  covered 89%).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy import special

from orchestrator.core import dist

# core.stats' CONFIDENCE and Values, written out rather than imported: stats now sits above
# core.dist, and ranks -> stats -> dist made the import chain one level deeper than
# tests/test_layers.py allows (tests/test_dist.py checks the two agree)
CONFIDENCE = 0.95
Values = Sequence[float] | npt.NDArray[np.float64]

EXACT_MAX_PAIRS = 2500  # m*n above this: the normal approximation of U (error < 0.1% coverage)
# m*n above this: mann_whitney's p from the normal approximation even with a side of <= 8 untied
# values, where scipy's "auto" takes the exact null. Why: that null costs O((m*n)^2) (scipy's too):
# 8 values against 25,000 took 2.9 s, against 100,000 ~45 s, per test; 50,000 pairs ~0.7 s at most.
MWU_EXACT_MAX_PAIRS = 50_000
EXACT_MAX_PERMUTATIONS = 1_000_000  # within-stratum relabellings up to which van Elteren's test is exact
_LATTICE_MAX = 2**62  # the stratified statistic's integer lattice must fit an int64
MAX_SIDE = 1000  # values per side for the shift: more are subsampled (seeded); 10^6 differences at most


@dataclass(frozen=True)
class CoveredInterval:
    """An estimate with an interval and the coverage that interval really has (no interval: too few values)."""

    estimate: float
    low: float | None
    high: float | None
    coverage: float | None  # with an interval, None: its exact coverage is unknown (normal approximation)

    @property
    def approximate(self) -> bool:
        """An interval at the asked-for confidence of a normal approximation, not of an exact distribution."""
        return self.low is not None and self.coverage is None


def median_coverage(n: int, j: int) -> float:
    """Probability that [x_(j), x_(n+1-j)] of n values contains the population median."""
    if not 1 <= j <= n // 2 + n % 2:
        raise ValueError(f"median_coverage: order {j} not in 1..{(n + 1) // 2} for n={n}")
    return float(1.0 - 2.0 * dist.binom_cdf(j - 1, n, 0.5))


def median_interval(values: Values, confidence: float = CONFIDENCE) -> CoveredInterval:
    """The median with the narrowest order-statistic interval covering it with >= `confidence`.

    No interval (low/high/coverage None) when even the full range covers less: n < 6 at 95%."""
    data = np.sort(np.asarray(values, dtype=float))
    n = int(data.size)
    if n == 0:
        return CoveredInterval(math.nan, None, None, None)
    median = float(np.median(data))
    order = _median_order(n, confidence)
    if order is None:
        return CoveredInterval(median, None, None, None)
    j, coverage = order
    return CoveredInterval(median, float(data[j - 1]), float(data[n - j]), coverage)


@lru_cache(maxsize=1024)
def _median_order(n: int, confidence: float) -> tuple[int, float] | None:
    """(j, coverage) of the narrowest order-statistic interval reaching `confidence`; None if none does."""
    if median_coverage(n, 1) < confidence:
        return None
    # binom.ppf gives the smallest j - 1 with cdf >= alpha/2; step down to the last j that still covers
    j = int(dist.binom_ppf((1.0 - confidence) / 2.0, n, 0.5))
    while j > 1 and median_coverage(n, j) < confidence:
        j -= 1
    j = max(j, 1)
    return j, median_coverage(n, j)


EXACT_COMB_LIMIT = 2000  # m + n up to which the smallest p is computed from the exact integer


def mann_whitney_min_p(m: int, n: int) -> float:
    """Smallest two-sided p-value an exact Mann-Whitney test of m vs n values can give."""
    if m <= 0 or n <= 0:
        return 1.0
    if m + n <= EXACT_COMB_LIMIT:
        return min(1.0, 2 / math.comb(m + n, m))  # int / int: 2.0 / comb() overflowed past m + n ~ 1030
    # in logs: comb(200000, 100000) is a 60,000-digit integer that takes seconds to build
    log_comb = math.lgamma(m + n + 1) - math.lgamma(m + 1) - math.lgamma(n + 1)
    return min(1.0, math.exp(math.log(2) - log_comb))


def mann_whitney_floor(m: int, n: int) -> float:
    """Smallest p mann_whitney gives for m vs n distinct values (every value of one side above every
    value of the other): the exact floor 2/C(m+n, m) where it uses the exact null, else the normal
    approximation's at that separation, which is far larger (12 vs 12: 3.7e-5, not 7.4e-7; 9 vs 9:
    4.1e-4, above 8 vs 8's exact 1.6e-4). Why: `orch plan` states what the report's test can reach,
    and the exact floor promised 50 times less than the demo's own run got."""
    if m <= 0 or n <= 0:
        return 1.0
    if not (m > 8 and n > 8) and m * n <= MWU_EXACT_MAX_PAIRS:
        return mann_whitney_min_p(m, n)
    spread = math.sqrt(m * n / 12 * (m + n + 1))
    return min(max(2 * float(dist.norm_sf((m * n / 2 - 0.5) / spread)), 0.0), 1.0)


@lru_cache(maxsize=1024)
def mann_whitney_can_reach(m: int, n: int, alpha: float) -> bool:
    """Whether m vs n values can give mann_whitney a p below `alpha` (a finding needs p < alpha), ties
    included: the one rule for a test that could never be significant by design, which the report's
    Holm family (core.family.unreachable) and orch compare's (report.compare) both leave out. Asked
    once per cell (4,095 times for a 4,096-cell plan) of a few (m, n): cached, as is the next."""
    return mann_whitney_min_p(m, n) < alpha or mann_whitney_smallest_p(m, n) < alpha


@lru_cache(maxsize=1024)
def mann_whitney_smallest_p(m: int, n: int) -> float:
    """Smallest p mann_whitney can return for m vs n values, ties included. Ties switch it to the
    normal approximation, which can go below the exact test's floor: 3 vs 3 values, each side all
    tied and apart, give 0.047 where the exact floor is 0.1. So a row is called unable to reach
    significance only when neither can (checked against every pattern of 3 distinct values)."""
    if m <= 0 or n <= 0:
        return 1.0
    return min(mann_whitney_min_p(m, n), mann_whitney([1.0] * m, [0.0] * n))


@lru_cache(maxsize=256)
def _u_cdf(m: int, n: int) -> tuple[float, ...]:
    """P(U <= u) for u = 0..m*n under the null (no ties), by the standard recursion on probabilities:
    P_{m,n}(u) = m/(m+n) P_{m-1,n}(u-n) + n/(m+n) P_{m,n-1}(u)."""
    previous = [np.ones(1) for _ in range(n + 1)]  # row a-1 of the table, one pmf per b
    for a in range(1, m + 1):
        row = [np.ones(1)]
        for b in range(1, n + 1):
            pmf = np.zeros(a * b + 1)
            left = previous[b]
            pmf[b : b + left.size] += a / (a + b) * left
            right = row[b - 1]
            pmf[: right.size] += b / (a + b) * right
            row.append(pmf)
        previous = row
    return tuple(float(x) for x in np.cumsum(previous[n]))


def _shift_order(m: int, n: int, confidence: float) -> tuple[int, float] | None:
    """(k, coverage): [d_(k), d_(mn+1-k)] has exact coverage >= confidence; None if impossible."""
    alpha = 1.0 - confidence
    if m * n <= EXACT_MAX_PAIRS:
        cdf = _u_cdf(m, n)
        k = 0  # the largest k with P(U <= k-1) <= alpha/2
        while k < len(cdf) and cdf[k] <= alpha / 2 + 1e-12:
            k += 1
        if k == 0:
            return None
        return k, 1.0 - 2.0 * cdf[k - 1]
    mean, sd = m * n / 2.0, math.sqrt(m * n * (m + n + 1) / 12.0)
    k = max(1, int(math.floor(mean - dist.norm_ppf(1 - alpha / 2) * sd)))
    return k, 1.0 - 2.0 * float(dist.norm_cdf((k - 0.5 - mean) / sd))


def _bounded(values: np.ndarray) -> np.ndarray:
    """At most MAX_SIDE values (a seeded subsample): the m*n pairwise differences of a 100,000-trial
    run would not fit in memory, and a subsample's interval is still exact, only wider."""
    if values.size <= MAX_SIDE:
        return values
    return np.random.default_rng(0).choice(values, MAX_SIDE, replace=False)


def shift_interval(x: Values, y: Values, confidence: float = CONFIDENCE) -> CoveredInterval:
    """Hodges-Lehmann shift x - y (median of pairwise differences) with its exact Mann-Whitney
    interval and that interval's coverage; no interval when no order reaches `confidence`."""
    a, b = _bounded(np.asarray(x, dtype=float)), _bounded(np.asarray(y, dtype=float))
    if a.size == 0 or b.size == 0:
        return CoveredInterval(math.nan, None, None, None)
    diffs = np.sort(np.subtract.outer(a, b).ravel())
    estimate = float(np.median(diffs))
    order = _shift_order(int(a.size), int(b.size), confidence)
    if order is None:
        return CoveredInterval(estimate, None, None, None)
    k, coverage = order
    return CoveredInterval(estimate, float(diffs[k - 1]), float(diffs[diffs.size - k]), coverage)


# ----------------------------------------------------------------------------- stratified, exact


@dataclass(frozen=True)
class LatticeNull:
    """An exact null distribution on an integer lattice: distinct sorted values, their probabilities."""

    values: np.ndarray
    probs: np.ndarray

    def p_two_sided(self, observed: int) -> float:
        """2 x the smaller tail at the observed value (each tail including it), at most 1."""
        below = float(self.probs[: int(np.searchsorted(self.values, observed, side="right"))].sum())
        above = float(self.probs[int(np.searchsorted(self.values, observed, side="left")) :].sum())
        return min(1.0, 2.0 * min(below, above))

    def acceptance(self, alpha: float) -> tuple[int, int, float] | None:
        """(lowest, highest accepted value, coverage) when each tail of mass <= alpha/2 is rejected;
        None when an extreme value alone weighs more (no tail can be rejected: no bounded interval)."""
        below = int(np.searchsorted(np.cumsum(self.probs), alpha / 2 + 1e-12, side="right"))
        above = int(np.searchsorted(np.cumsum(self.probs[::-1]), alpha / 2 + 1e-12, side="right"))
        if below == 0 or above == 0:
            return None
        rejected = float(self.probs[:below].sum()) + float(self.probs[self.probs.size - above :].sum())
        return int(self.values[below]), int(self.values[self.values.size - 1 - above]), 1.0 - rejected


def midranks(values: Values) -> npt.NDArray[np.float64]:
    """Ranks 1..n, ties given the mean of the ranks they span: scipy.stats.rankdata(values) (its
    default "average" method), by the same steps (a stable sort, then each run of equal values
    takes the midpoint of its positions), so the ranks are the same numbers; nan anywhere gives
    all nan, as rankdata's default does. Why not rankdata itself: ~0.2 ms of argument handling
    per call, on arrays of 2-20 trial values, and van Elteren's test ranks every stratum of every
    number effect (tests/test_stratified_shift.py checks both agree on random arrays with ties)."""
    x = np.ravel(np.asarray(values, dtype=float))
    if np.isnan(x).any():
        return np.full(x.size, np.nan)
    order = np.argsort(x, kind="mergesort")
    position = np.empty(x.size, dtype=np.intp)
    position[order] = np.arange(x.size, dtype=np.intp)
    ordered = x[order]
    starts = np.concatenate(([True], ordered[1:] != ordered[:-1]))
    group = np.cumsum(starts)[position]
    bounds = np.append(np.flatnonzero(starts), x.size)
    ranks: npt.NDArray[np.float64] = 0.5 * (bounds[group] + bounds[group - 1] + 1)
    return ranks


def mann_whitney(a: Values, b: Values) -> float:
    """Two-sided Mann-Whitney U p-value; 1.0 when either side is empty, all values tie or a value
    is nan (scipy gives nan there).

    scipy.stats.mannwhitneyu(a, b, alternative="two-sided") (method "auto", continuity
    corrected), by its steps: midranks of the pooled values, U = max(U1, U2), then the exact null
    distribution (_mwu_sf) when a side has at most 8 values and nothing ties, else the normal
    approximation with the tie correction. The same p to the bit (tests/test_stratified_shift.py
    compares them on random samples with and without ties), except past MWU_EXACT_MAX_PAIRS,
    where the normal approximation (scipy's method="asymptotic", to the bit) replaces an exact
    null that would take minutes. Why not call it: a report with a
    number metric imported scipy.stats (~1 CPU-s, a third of the render) for this test alone."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    pooled = np.concatenate([x, y])
    if x.size == 0 or y.size == 0 or np.isnan(pooled).any() or np.all(pooled == pooled[0]):
        return 1.0
    n1, n2 = x.size, y.size
    u1 = np.sum(midranks(pooled)[:n1]) - n1 * (n1 + 1) / 2
    u = np.maximum(u1, n1 * n2 - u1)
    ties = tie_term(pooled)
    if (n1 > 8 and n2 > 8) or ties > 0 or n1 * n2 > MWU_EXACT_MAX_PAIRS:
        n = n1 + n2
        spread = np.sqrt(n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))))
        p = float(dist.norm_sf((u - n1 * n2 / 2 - 0.5) / spread))
    else:
        p = _mwu_sf(min(n1, n2), max(n1, n2), int(u))
    return min(max(2 * p, 0.0), 1.0)


def tie_term(values: Values) -> float:
    """sum(t^3 - t) over the groups of t equal values: the rank tests' tie correction (0: no ties)."""
    _, sizes = np.unique(np.asarray(values, dtype=float), return_counts=True)
    return float(np.sum(sizes.astype(float) ** 3 - sizes))


def _mwu_sf(n1: int, n2: int, k: int) -> float:
    """P(U >= k) under the null without ties, n1 <= n2: scipy's _MWU.sf (stats._mannwhitneyu)."""
    complement = n1 * n2 - k
    if k < complement:
        pmfs = _mwu_pmfs(n1, n2, k)
        return float(1.0 - np.cumsum(pmfs)[k] + pmfs[k])
    return float(np.cumsum(_mwu_pmfs(n1, n2, complement))[complement])


@lru_cache(maxsize=64)
def _mwu_pmfs(n1: int, n2: int, maxu: int) -> npt.NDArray[np.float64]:
    """P(U = u) for u = 0..maxu: scipy's _MWU.build_u_freqs_array, step for step (the counts of
    configurations by the recursion on sigma, uint64 until they outgrow it, then floats).
    Remembered for the simulations that repeat a design; 64 arrays of at most 25,001 floats
    (MWU_EXACT_MAX_PAIRS / 2 + 1) hold 13 MB at most."""
    sigma = np.zeros(maxu + 1, dtype=int)
    for d in np.arange(1, n1 + 1):
        sigma[np.arange(d, maxu + 1, d)] += d
    for d in np.arange(n2 + 1, n2 + n1 + 1):
        sigma[np.arange(d, maxu + 1, d)] -= d
    sigma = sigma[1:]
    counts = np.zeros(maxu + 1, dtype=np.uint64)
    still_uint = True
    uint_max = np.iinfo(np.uint64).max
    counts[0] = 1
    for u in np.arange(1, maxu + 1):
        value = np.dot(counts[:u], sigma[u - 1 :: -1]) / u
        if value > uint_max and still_uint:
            counts = counts.astype(float)
            still_uint = False
        counts[u] = value
    pmfs: npt.NDArray[np.float64] = counts / special.binom(n1 + n2, n1)
    return pmfs


def stratified_steps(sizes: Sequence[tuple[int, int]]) -> tuple[int, ...] | None:
    """Per stratum of (m, r) values, the lattice units of a half count of U: L/(N_s + 1), L the lcm
    of the N_s + 1, so that 2L sum_s U_s/(N_s + 1) is an integer and equal statistics compare equal.
    None when the strata are too large to enumerate, where the normal approximation holds."""
    pairs = sum(m * r for m, r in sizes)
    if not sizes or pairs > EXACT_MAX_PAIRS:  # first: bounds m + r, so the combs below stay small
        return None
    if math.prod(math.comb(m + r, m) for m, r in sizes) > EXACT_MAX_PERMUTATIONS:
        return None
    lcm = math.lcm(*(m + r + 1 for m, r in sizes))
    if 2 * lcm * pairs >= _LATTICE_MAX:
        return None
    return tuple(lcm // (m + r + 1) for m, r in sizes)


def stratified_null(pmfs: Sequence[np.ndarray], steps: Sequence[int]) -> LatticeNull:
    """Distribution of sum_s steps[s] * V_s for independent V_s, pmfs[s] over 0..len - 1: the strata
    are relabelled independently. Sparse (distinct values only): the lattice can be wide."""
    values: np.ndarray = np.zeros(1, dtype=np.int64)
    probs: np.ndarray = np.ones(1)
    for pmf, step in zip(pmfs, steps, strict=True):
        support = np.flatnonzero(pmf > 0)
        total = (values[:, None] + step * support[None, :]).ravel()
        values, inverse = np.unique(total, return_inverse=True)
        probs = np.bincount(inverse.reshape(-1), weights=(probs[:, None] * pmf[support][None, :]).ravel())
    return LatticeNull(values, probs)


def untied_pmf(m: int, r: int) -> np.ndarray:
    """pmf of 2U (index 0..2mr) of m vs r values without ties (odd indices 0), from _u_cdf."""
    pmf = np.zeros(2 * m * r + 1)
    pmf[::2] = np.diff(np.asarray(_u_cdf(m, r)), prepend=0.0)
    return pmf


@lru_cache(maxsize=256)
def untied_null(sizes: tuple[tuple[int, int], ...]) -> LatticeNull:
    """The stratified statistic's null without ties: a function of the strata's sizes only (cached;
    the report asks for it once per numeric metric and factor)."""
    steps = stratified_steps(sizes)
    if steps is None:
        raise ValueError(f"untied_null: strata {sizes} are too large to enumerate")
    null = stratified_null([untied_pmf(m, r) for m, r in sizes], steps)
    null.values.flags.writeable = null.probs.flags.writeable = False  # shared by every caller
    return null


def tied_pmf(doubled: np.ndarray, m: int) -> np.ndarray:
    """pmf of 2U (index 0..2mr) of the first m of these values given their doubled midranks, every
    choice of m of them equally likely: the null conditional on the ties. Counts subsets by size
    and rank sum, one vectorised update per value, for the smaller side (U of the other is mr - U)."""
    n = int(doubled.size)
    k = min(m, n - m)
    width = k * (2 * n - k + 1) + 1  # past the largest doubled rank sum of k values
    counts = np.zeros((k + 1, width))
    counts[0, 0] = 1.0
    for q in doubled.tolist():
        counts[1:, q:] = counts[1:, q:] + counts[:-1, : width - q]
    low = k * (k + 1)
    pmf = counts[k, low : low + 2 * m * (n - m) + 1] / math.comb(n, k)
    return pmf if k == m else pmf[::-1]
