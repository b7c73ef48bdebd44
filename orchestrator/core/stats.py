"""Statistics for sweeps: rates with intervals, tests between cells, effects of factors, drift.

Why this module exists: the DSV4 team lost days to noise (15%, 18%, then 2% corruption between
runs of one configuration). A rate without an interval invites that mistake, so every number the
report prints comes from here with its uncertainty attached. Library methods are used wherever
one exists (statsmodels, scipy); the arithmetic written here is MOVER, the standard way to put an
interval on a sum of independent rates (Newcombe's difference interval is its two-term case, and
the tests check the two agree), and the library calls every report makes (Wilson, Newcombe and
the drift check's trend test from statsmodels, Fisher's exact test from scipy.stats), written
out with the libraries' own operations so that rendering a report imports neither library: the
tests compare each with the library call, to the bit.

Everything here is pure: numbers in, numbers out. Failed trials never reach this module; the
report passes only completed trials.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from orchestrator.core import dist

# scipy.stats and statsmodels (which imports scipy.stats) cost ~1.5 s to import: each function
# that needs one imports it when called (median_ci's bootstrap for `orch compare`, the power
# solver), so `orch plan` and a report never pay it: the calls a report makes are written out
# (here: _wilson_bounds, _fisher_p, _ordinal_association; ranks.mann_whitney).

ALPHA = 0.05
CONFIDENCE = 0.95
# Bootstrap is exact enough and cheap for the sample sizes of a normal sweep; beyond this many
# values the order-statistic interval (same target, no resampling) keeps big runs fast.
BOOTSTRAP_MAX_N = 2000
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval."""

    estimate: float
    low: float
    high: float

    def excludes(self, value: float = 0.0) -> bool:
        return value < self.low or value > self.high


Values = Sequence[float] | npt.NDArray[np.float64]  # a metric's values: a list, or a column as an array


def wilson_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval for k successes in n; (0, 1) when n is 0 (nothing is known).

    Wilson rather than Wald because sweeps live near 0% (a clean cell): Wald gives [0, 0] for
    0/40, which claims a certainty the data do not have.
    """
    _check_counts(k, n)
    if n == 0:
        return (0.0, 1.0)
    low, high = _wilson_bounds(k, n, confidence)
    # exact at the edges: float noise gives 8e-20 for 0/500000, which would print as a bound
    low = 0.0 if k == 0 else low
    high = 1.0 if k == n else high
    return (low, high)


def _wilson_bounds(k: int, n: int, confidence: float) -> tuple[float, float]:
    """statsmodels' proportion_confint(k, n, alpha=1 - confidence, method="wilson"), the same
    operations in the same order, so the same floats (tests/test_stats.py compares them).

    Why not call it: importing statsmodels.stats.proportion (and the scipy.stats it imports)
    costs ~0.6 CPU-s, once in every process that renders a report, and these lines and
    Newcombe's (rate_difference_ci) were all a report used of it."""
    alpha = (1 - confidence) / 2.0
    crit = float(dist.norm_isf(alpha))
    crit2 = crit**2
    q, nobs = float(k) / float(n), float(n)
    denom = 1 + crit2 / nobs
    center = (q + crit2 / (2 * nobs)) / denom
    half = crit * math.sqrt(q * (1.0 - q) / nobs + crit2 / (4.0 * nobs**2))
    half /= denom
    return (min(max(center - half, 0.0), 1.0), min(max(center + half, 0.0), 1.0))


def rate(k: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """The observed rate k/n with its Wilson interval (estimate is nan when n is 0)."""
    low, high = wilson_interval(k, n, confidence)
    return Interval(k / n if n else math.nan, low, high)


def fisher_exact(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided Fisher exact p for k1/n1 vs k2/n2; 1.0 when either side has no data.

    Exact rather than chi-square because cells often have 0-5 events, where the chi-square
    approximation is poor.
    """
    _check_counts(k1, n1)
    _check_counts(k2, n2)
    if n1 == 0 or n2 == 0:
        return 1.0
    return _fisher_p(int(k1), int(n1), int(k2), int(n2))


@functools.lru_cache(maxsize=65536)
def _fisher_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """scipy.stats.fisher_exact's two-sided p for [[k1, n1 - k1], [k2, n2 - k2]], remembered: a
    pure function of four small integers, and one report asks it for the same tables again and
    again (a power simulation draws thousands of tables from a few dozen; the nightly checks test
    each night against the same pooled counts).

    scipy's algorithm (scipy 1.17, stats._stats_py.fisher_exact) on core.dist's hypergeometric
    functions, which call the ufuncs scipy.stats calls: the same p to the bit (tests/test_stats.py
    compares them over hundreds of tables), without importing scipy.stats (~0.5 CPU-s in every
    report process; ranks.mann_whitney was its other call)."""
    if k1 + k2 == 0 or k1 + k2 == n1 + n2:
        return 1.0  # a column without sessions: only one table has these margins
    total, col = n1 + n2, k1 + k2

    def pmf(x: int) -> float:
        return float(dist.hypergeom_pmf(x, total, n1, col))

    mode = int(float((col + 1) * (n1 + 1)) / float(total + 2))
    pexact, pmode = pmf(k1), pmf(mode)
    gamma = 1 + FISHER_EPSILON
    if abs(pexact - pmode) / max(pexact, pmode) <= FISHER_EPSILON:
        return 1.0
    if k1 < mode:
        plower = float(dist.hypergeom_cdf(k1, total, n1, col))
        if pmf(col) > pexact * gamma:
            return min(plower, 1.0)
        guess = _last_at_most(lambda x: -pmf(x), -pexact * gamma, mode, col)
        return min(plower + float(dist.hypergeom_sf(guess, total, n1, col)), 1.0)
    pupper = float(dist.hypergeom_sf(k1 - 1, total, n1, col))
    if pmf(0) > pexact * gamma:
        return min(pupper, 1.0)
    guess = _last_at_most(pmf, pexact * gamma, 0, mode)
    return min(pupper + float(dist.hypergeom_cdf(guess, total, n1, col)), 1.0)


FISHER_EPSILON = 1e-14  # scipy's: tables this close in probability to the observed one count as it


def _last_at_most(f: Callable[[int], float], d: float, lo: int, hi: int) -> int:
    """scipy's binary search (stats._binomtest._binary_search_for_binom_tst): i in [lo, hi] with
    f(i) <= d < f(i + 1), f ascending there; the other tail's edge of a two-sided exact test."""
    while lo < hi:
        mid = lo + (hi - lo) // 2
        value = f(mid)
        if value < d:
            lo = mid + 1
        elif value > d:
            hi = mid - 1
        else:
            return mid
    return lo if f(lo) <= d else lo - 1


# Sessions in both sides of a pooled two-rate test: Fisher's hypergeometric costs time linear in
# them when events are few (5 and 7 events in 10^10 sessions a side: 25 s a test, scipy's too; a
# report of 8 such trials took 3m39s); beyond, the binomial test of the first side's share of the
# events replaces it (the same p to 3 digits at 10^7, a hair larger: no finite-population
# correction, so never more confident).
FISHER_SESSIONS = 10**7


@dataclass(frozen=True)
class PooledTest:
    """Two pooled rates compared: p, and whether it is Fisher's exact p (else the binomial test)."""

    p: float
    exact: bool


def pooled_test(k1: int, n1: int, k2: int, n2: int) -> PooledTest:
    """k1/n1 vs k2/n2 with sessions independent: Fisher's exact p up to FISHER_SESSIONS, beyond
    it the binomial test of side 1's share of the events (or of the non-events, the fewer) at
    side 1's share of the sessions, which Fisher's converges to as the sessions grow."""
    if n1 + n2 <= FISHER_SESSIONS:
        return PooledTest(fisher_exact(k1, n1, k2, n2), True)
    _check_counts(k1, n1)
    _check_counts(k2, n2)
    events, total = k1 + k2, n1 + n2
    if 2 * events > total:
        k1, events = n1 - k1, total - events
    if events == 0:
        return PooledTest(1.0, False)
    return PooledTest(binomial_test(k1, events, n1 / total), False)


def binomial_test(k: int, n: int, p: float) -> float:
    """scipy.stats.binomtest(k, n, p).pvalue (two-sided), by its steps on core.dist's binomial
    functions (scipy's ufuncs): the same p to the bit (tests/test_stats.py), without scipy.stats."""

    def pmf(x: int) -> float:
        return float(dist.binom_pmf(x, n, p))

    if k == p * n:
        return 1.0
    d, rerr = pmf(k), 1 + 1e-7
    if k < p * n:
        ix = _last_at_most(lambda x: -pmf(x), -d * rerr, math.ceil(p * n), n)
        y = n - ix + int(d * rerr == pmf(ix))
        pval = float(dist.binom_cdf(k, n, p)) + float(dist.binom_sf(n - y, n, p))
    else:
        ix = _last_at_most(pmf, d * rerr, 0, math.floor(p * n))
        y = ix + 1
        pval = float(dist.binom_cdf(y - 1, n, p)) + float(dist.binom_sf(k - 1, n, p))
    return min(1.0, pval)


def rate_difference_ci(k1: int, n1: int, k2: int, n2: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Newcombe (hybrid Wilson score) interval for k1/n1 - k2/n2; (-1, 1) without data."""
    _check_counts(k1, n1)
    _check_counts(k2, n2)
    if n1 == 0 or n2 == 0:
        return (-1.0, 1.0)
    low1, high1 = _wilson_bounds(k1, n1, confidence)
    low2, high2 = _wilson_bounds(k2, n2, confidence)
    # statsmodels' confint_proportions_2indep(method="newcomb", compare="diff"), written out as
    # its six lines are, on the same Wilson bounds (see _wilson_bounds for why not call it)
    p1, p2 = k1 / n1, k2 / n2
    diff = p1 - p2
    low = diff - math.sqrt((p1 - low1) ** 2 + (high2 - p2) ** 2)
    high = diff + math.sqrt((p2 - low2) ** 2 + (high1 - p1) ** 2)
    return (float(low), float(high))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (controls the family-wise error of many cell-vs-baseline tests).

    Written out (it is four lines) rather than calling statsmodels' multipletests, which runs a
    full gc.collect() on every call: 0.4 s each with a 100,000-trial run in memory. The tests
    check it against multipletests(method="holm") on random inputs.
    """
    values = np.asarray(pvalues, dtype=float)
    order = np.argsort(values, kind="stable")
    m = values.size
    stepped = np.maximum.accumulate((m - np.arange(m)) * values[order])
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(stepped, 1.0)
    return [float(p) for p in adjusted]


def contrast_interval(
    counts: Sequence[tuple[int, int]], weights: Sequence[float], confidence: float = CONFIDENCE
) -> Interval:
    """Interval for sum(w_i * k_i/n_i) over independent proportions, by MOVER-Wilson.

    MOVER (Zou & Donner 2008) recovers the variance of each term from its Wilson limits, so it
    behaves at 0 events where Wald intervals collapse. With weights (1, -1) it is exactly
    Newcombe's difference interval. Factor effects and interactions are such sums.
    """
    if len(counts) != len(weights):
        raise ValueError("contrast_interval: counts and weights differ in length")
    estimate, down, up = 0.0, 0.0, 0.0
    for (k, n), w in zip(counts, weights, strict=True):
        if n == 0:
            raise ValueError("contrast_interval: a term has n=0 (drop empty cells first)")
        p = k / n
        low, high = wilson_interval(k, n, confidence)
        term, a, b = w * p, w * low, w * high
        estimate += term
        down += (term - min(a, b)) ** 2
        up += (max(a, b) - term) ** 2
    return Interval(estimate, estimate - math.sqrt(down), estimate + math.sqrt(up))


def median_ci(values: Values, confidence: float = CONFIDENCE, seed: int = 0) -> Interval:
    """Median with a seeded percentile-bootstrap interval (order-statistic interval for big n).

    Seeded so a re-rendered report prints the same numbers. With one value, or all values equal,
    the interval is the value itself; with none, everything is nan.
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return Interval(math.nan, math.nan, math.nan)
    median = float(np.median(data))
    if data.size == 1 or np.all(data == data[0]):
        return Interval(median, median, median)
    from scipy import stats as sps  # see the imports

    if data.size > BOOTSTRAP_MAX_N:
        ci = sps.quantile_test(data, q=median, p=0.5).confidence_interval(confidence)
        return Interval(median, float(ci.low), float(ci.high))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples warn; the interval is still right
        result = sps.bootstrap(
            (data,),
            np.median,
            n_resamples=BOOTSTRAP_RESAMPLES,
            confidence_level=confidence,
            method="percentile",
            vectorized=True,
            rng=np.random.default_rng(seed),
        )
    ci = result.confidence_interval
    return Interval(median, float(ci.low), float(ci.high))


def min_detectable_difference(n_per_cell: int, baseline_rate: float, alpha: float = ALPHA, power: float = 0.8) -> float:
    """Smallest rise over baseline_rate that n_per_cell sessions per cell detect with `power`.

    Uses the arcsine (Cohen's h) normal approximation, two-sided. The report tests with Fisher,
    which is a little more conservative at small counts, so read this as a lower bound: a
    smaller difference is unlikely to be seen, a somewhat larger one may still be missed.
    """
    if n_per_cell <= 0:
        return 1.0 - baseline_rate
    if not 0.0 <= baseline_rate < 1.0:
        raise ValueError(f"min_detectable_difference: baseline_rate {baseline_rate} not in [0, 1)")
    from statsmodels.stats.power import NormalIndPower  # see the imports

    h = NormalIndPower().solve_power(effect_size=None, nobs1=n_per_cell, alpha=alpha, power=power, ratio=1.0)
    angle = math.asin(math.sqrt(baseline_rate)) + float(h) / 2
    if angle >= math.pi / 2:
        return 1.0 - baseline_rate
    return math.sin(angle) ** 2 - baseline_rate


def heterogeneity(counts: Sequence[tuple[int, int]], phi: float = 1.0, df: float = math.inf) -> float:
    """Chi-square test that several k/n share one rate; 1.0 when it cannot be rejected at all.

    Used across trials of one cell (trial-to-trial noise beyond the binomial, which would make the
    pooled intervals too narrow), and, given the dispersion phi of the trials estimated on df
    degrees of freedom, across rounds (drift) and testbeds: sums of whole trials vary phi times
    the binomial, so a session-level test there is a test of trial-to-trial variation (quasi_p).
    """
    table = _two_column_table(counts)
    if table is None:
        return 1.0
    statistic, p = pearson_chi2(table)
    return quasi_p(p, statistic, len(table) - 1, phi, df)


def one_way_f(groups: Sequence[Values]) -> float | None:
    """One-way analysis of variance: do the groups share one mean? scipy.stats.f_oneway written out
    (the tests compare the two). Why F and not a rank test: with the few trials a group usually has
    (4 a testbed), no rank test can be significant after Holm over several cells (Mann-Whitney's
    smallest two-sided p at 4 vs 4 is 2/70 = 0.029). None when nothing measures the spread within
    groups (fewer than two groups, or one value each); with no spread within, 0 if the means differ."""
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g)]
    total = sum(a.size for a in arrays)
    if len(arrays) < 2 or total <= len(arrays):
        return None
    grand = np.concatenate(arrays).mean()
    between = sum(a.size * (a.mean() - grand) ** 2 for a in arrays)
    within = sum(float(((a - a.mean()) ** 2).sum()) for a in arrays)
    if within == 0:
        return 0.0 if between > 0 else 1.0
    statistic = (between / (len(arrays) - 1)) / (within / (total - len(arrays)))
    return float(dist.f_sf(statistic, len(arrays) - 1, total - len(arrays)))


# Cochran's rule: below this smallest expected count a chi-square's p is too confident, and the
# tests here and in core.clustered take an exact (or simulated) one instead
MIN_EXPECTED = 5.0
TRIAL_DRAWS = 5000  # most Monte Carlo tables for trial_homogeneity: its smallest p is 1 / 5001
TRIAL_SEED = 20261205  # fixed: the same report twice gives the same p
HYPERGEOMETRIC_MAX = 10**9  # numpy's multivariate_hypergeometric needs fewer sessions than this
# numpy's "count" sampler fills a temporary of 8 bytes a session once per call, then costs ~0.015-0.09 us
# per event (or non-event, the fewer) drawn; "marginals" ~0.15-0.4 us per trial. 12,500 trials of 40
# sessions, 2,500 events: 0.13-0.17 vs 2.4-4.3 ms a table.
COUNT_MAX_SESSIONS = 1 << 22  # a 32 MB temporary at most
COUNT_DRAWS_PER_TRIAL = 4  # "count" where it draws at most this many sessions per trial of the table
# Tables of the null drawn at once, in cells (draws x trials): a cell of 12,500 trials drew 5,000 x
# 12,500 at once (500 MB, and three temporaries as large: `orch report` of 100,000 trials peaked at
# 1.9 GB, growing with the trials). In blocks, ~8 MB an array.
NULL_BLOCK_CELLS = 1 << 20


def trial_homogeneity(counts: Sequence[tuple[int, int]], draws: int = TRIAL_DRAWS) -> float | None:
    """p that a cell's trials share one rate, against more spread than the binomial: exact given the
    cell's events. None when it cannot be tested (fewer than 2 trials, no event or only events).

    Why not heterogeneity(): Pearson's chi-square on a (trials x 2) table with expected counts of
    0.25 (8 trials of 40 sessions at 0.5%) is far from its chi-square law; it flagged 27% of
    pure-binomial demo runs. Given K events in the cell, one rate makes the trials' counts
    multivariate hypergeometric (sessions as colours, K drawn) whatever the rate, so:
    - all expected counts >= MIN_EXPECTED (Cochran's rule): Pearson's chi-square, valid there, any p;
    - 2 trials: Fisher's exact test (pooled_test), exact;
    - else Pearson's statistic against tables drawn from that law (seeded; past HYPERGEOMETRIC_MAX
      sessions the multinomial with the trials' shares, the law it converges to), by Besag &
      Clifford's (1991) sequential Monte Carlo p (_sequential_p): valid at any number of draws.

    Why sequential: `draws` tables for every p cost draws x trials table cells a test: a 100,000-trial
    report spent ~40 of its ~45 CPU-s here (3 cells of 12,500 trials, 5,000 tables each). Most
    cells are homogeneous, and their p is settled long before: the draws stop at the h-th table as
    extreme (p = h / L), else go on to `draws` (the fixed test's p). h = _exceedances(draws), 251 of
    5,000: the least h with which every p at most ALPHA is the fixed test's own (on the same tables),
    so every decision the report makes (Holm over the cells tested, thresholds ALPHA / m to ALPHA)
    and every p it prints as evidence are the fixed test's; only p above ALPHA stop early: a
    homogeneous cell draws 140-1,290 tables (mean 780) instead of 5,000, with numpy's "count"
    sampler 0.12-0.38 s for 12,500 trials instead of 8-12 s. Measured (bench/bench_homogeneity.py,
    bench/README.md): h = 10 or 20, as Besag & Clifford suggest, drew ~50-100 tables but moved
    single designs' rejections by up to 3.5 points from the fixed test's at 0.05 and 2.3 at 0.00625
    (Holm over 8 cells; p = h / L is coarse where it stops), and put one design's level at 0.05 at
    6.8% at h = 20 (a seeded test's level for a given design rests on the h / 0.05 tables it reads
    there); h = 50 is the fixed test below 0.01 only. Not worth the ~0.13 s a big cell they saved.
    Not taken: a budget of table cells (fewer tables for more trials) lifts the floor 1 / (draws + 1)
    towards Holm's thresholds where the evidence is strongest, and the "count" sampler (_null_tables)
    already makes the costliest case seconds (12,500 trials that vary: 1-5 s); the normal law of the
    statistic over many sparse trials (Haldane 1937, Zelterman 1987) is too light in the tail Holm's
    thresholds read (0.67-0.77% beyond its 0.00625 quantile at 12,500 trials, 0.9-1.2% at 500)."""
    kept = [(k, n) for k, n in counts if n > 0]
    k = np.array([c[0] for c in kept], dtype=np.int64)
    n = np.array([c[1] for c in kept], dtype=np.int64)
    events, sessions = int(k.sum()), int(n.sum())
    if len(kept) < 2 or events == 0 or events == sessions:
        return None
    expected = n * events / sessions
    if min(expected.min(), (n - expected).min()) >= MIN_EXPECTED:
        return heterogeneity(kept)
    if len(kept) == 2:
        return pooled_test(int(k[0]), int(n[0]), int(k[1]), int(n[1])).p
    observed = float(_spread(k, n, events / sessions))
    h = _exceedances(draws)
    return _sequential_p(_null_spreads(n, events, draws, h), observed, draws, h)


def _exceedances(draws: int) -> int:
    """Besag & Clifford's h for at most `draws` tables: the least with which every p at most ALPHA is
    the fixed test's. A stop at draw L <= draws gives h / L >= h / draws > ALPHA; without one the p
    is the fixed test's (1 + g) / (1 + draws), and g >= h makes both above ALPHA."""
    return math.ceil(ALPHA * (draws + 1))


def _sequential_p(null: Iterator[np.ndarray], observed: float, draws: int, h: int) -> float:
    """Besag & Clifford's sequential Monte Carlo p over the null's statistics in draw order: h / L
    when the h-th as extreme as `observed` is draw L, else (1 + as extreme) / (1 + draws) after all
    draws. P(p <= u) <= u at every u, as for the fixed number of draws (h >= draws is that test).
    Ties count as extreme (a relative 1e-9: the same table summed in another order)."""
    seen = extreme = 0
    for spreads in null:
        at = np.flatnonzero(spreads >= observed * (1 - 1e-9))
        if extreme + at.size >= h:
            return h / (seen + int(at[h - extreme - 1]) + 1)
        extreme += int(at.size)
        seen += spreads.size
    return (extreme + 1) / (draws + 1)


def _null_spreads(n: np.ndarray, events: int, draws: int, first: int) -> Iterator[np.ndarray]:
    """Pearson's spread of `draws` tables of one cell under one rate given its events, in draw order,
    in blocks: `first` (h: no p is settled sooner), then as many as drawn so far (at most twice the
    tables a p needs, or one block more), never more than NULL_BLOCK_CELLS table cells at once.
    Seeded: the same cell gives the same tables, hence the same p (the "count" sampler's tables
    depend on the blocks, not their law; the blocks depend on the design only)."""
    rng = np.random.default_rng(TRIAL_SEED)
    cap = max(1, NULL_BLOCK_CELLS // len(n))
    size, done = max(1, min(first, cap)), 0
    while done < draws:
        size = min(size, draws - done)
        yield _spread(_null_tables(rng, n, events, size), n, events / int(n.sum()))
        done += size
        size = min(done, cap)


def _null_tables(rng: np.random.Generator, n: np.ndarray, events: int, size: int) -> np.ndarray:
    """`size` tables of the trials' events under one rate given `events`: the multivariate
    hypergeometric, by the cheaper of numpy's two samplers (same law, see COUNT_MAX_SESSIONS), or
    past HYPERGEOMETRIC_MAX sessions the multinomial."""
    total = int(n.sum())
    if total >= HYPERGEOMETRIC_MAX:
        return rng.multinomial(events, n / total, size=size)
    drawn = min(events, total - events)
    count = total <= COUNT_MAX_SESSIONS and drawn <= COUNT_DRAWS_PER_TRIAL * len(n)
    return rng.multivariate_hypergeometric(n, events, size=size, method="count" if count else "marginals")


def _spread(k: np.ndarray, n: np.ndarray, rate: float) -> np.ndarray:
    """Pearson's statistic over trials times rate (1 - rate), constant given the events: sum of (k - n rate)^2 / n."""
    result: np.ndarray = (((k - n * rate) ** 2) / n).sum(axis=-1)
    return result


def pearson_chi2(table: np.ndarray) -> tuple[float, float]:
    """scipy.stats.chi2_contingency(table, correction=False): Pearson's statistic and its p, by
    scipy's own steps (expected counts from the margins, the terms summed over the flattened
    table, chdtrc for the tail), so both are the same numbers (tests/test_stats.py checks it on
    random tables). Why not the call: ~0.5 ms of argument handling around a few array operations,
    and a report's trial, round and testbed checks call it once per cell, metric and check. The
    table must have no empty row or column (_two_column_table makes it so)."""
    observed = np.asarray(table, dtype=np.float64)
    dof = (observed.shape[0] - 1) * (observed.shape[1] - 1)
    if dof == 0:
        return 0.0, 1.0
    expected = observed.sum(axis=1, keepdims=True) * observed.sum(axis=0, keepdims=True) / observed.sum()
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return statistic, float(dist.chi2_sf(statistic, dof))


def trend(
    counts: Sequence[tuple[int, int]], scores: Sequence[float] | None = None, phi: float = 1.0, df: float = math.inf
) -> float:
    """Linear-by-linear (Cochran-Armitage type) trend test of k/n over ordered scores (z^2 / phi
    against F(1, df) given a dispersion, as heterogeneity)."""
    table = _two_column_table(counts)
    if table is None:
        return 1.0
    kept = [i for i, (_, n) in enumerate(counts) if n > 0]
    row_scores = np.asarray(scores if scores is not None else range(len(counts)), dtype=float)
    zscore, p = _ordinal_association(table, row_scores[kept], np.array([0.0, 1.0]))
    if math.isnan(p):
        return 1.0
    return quasi_p(p, zscore**2, 1, phi, df)


def _ordinal_association(table: np.ndarray, row_scores: np.ndarray, col_scores: np.ndarray) -> tuple[float, float]:
    """statsmodels' Table(table).test_ordinal_association(row_scores, col_scores): (z, p), its
    operations in its order, so the same floats (tests/test_stats.py compares them), zero cells
    counted as 0.5 as Table does by default. Why not call it: statsmodels' import (~0.5 CPU-s,
    scipy.stats with it) in every report process, for one dot product and a normal tail; every
    run with two rounds or more checks its baseline for drift with this."""
    t = np.array(table, dtype=np.float64)
    if t.min() == 0:
        t[t == 0] = 0.5
    statistic = np.dot(row_scores, np.dot(t, col_scores))
    n_obs = t.sum()
    rtot, ctot = t.sum(1), t.sum(0)
    um, u2m = np.dot(row_scores, rtot), np.dot(row_scores**2, rtot)
    vn, v2n = np.dot(col_scores, ctot), np.dot(col_scores**2, ctot)
    e_stat = um * vn / n_obs
    v_stat = (u2m - um**2 / n_obs) * (v2n - vn**2 / n_obs) / (n_obs - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        zscore = (statistic - e_stat) / np.sqrt(v_stat)
    return float(zscore), float(2 * dist.norm_cdf(-np.abs(zscore)))


def quasi_p(binomial_p: float, statistic: float, dof: int, phi: float, df: float) -> float:
    """The larger of the binomial p and the quasi-binomial one, (statistic / dof) / phi against
    F(dof, df): phi estimated on df degrees of freedom keeps the error at alpha when trials vary,
    and the max never makes a test more liberal than the binomial (phi < 1 is noise, not news).
    df = inf: phi is taken as known (chi-square on statistic / phi); df <= 0: the binomial p alone
    (the caller must say the test assumes independent sessions)."""
    if df <= 0 or (math.isinf(df) and phi <= 1.0):
        return binomial_p  # exactly the binomial test (phi <= 1 known: the max would pick it anyway)
    scaled = statistic / max(phi, 1.0)  # phi < 1 (or 0: every trial at its rate) is noise, not news
    quasi = dist.chi2_sf(scaled, dof) if math.isinf(df) else dist.f_sf(scaled / dof, dof, df)
    return max(binomial_p, float(quasi))


@dataclass(frozen=True)
class RoundCount:
    round: int
    k: int
    n: int


@dataclass(frozen=True)
class DriftCheck:
    """Did the baseline move across randomized rounds? (It recurs once per round.)

    separable False: trial-to-trial variation could not be estimated, so a drift cannot be told
    apart from it; the p-values are then the binomial ones and the check is never flagged."""

    rounds: tuple[RoundCount, ...]
    p_homogeneity: float
    p_trend: float
    flagged: bool
    separable: bool = True


def drift_check(
    rounds: Sequence[RoundCount], alpha: float = ALPHA, spread: tuple[float, float] | None = None
) -> DriftCheck:
    """Homogeneity plus trend across rounds; flagged when either is below alpha/2.

    Two tests, so each gets alpha/2 (Bonferroni): a drifting baseline means time, not the
    factors, may explain differences, and the report says so rather than hiding it. A round of
    the baseline is one trial (or a few), so its k/n vary by trial-to-trial variation as well:
    `spread` is (phi, df) of the trials around a cell + round fit (clustered.round_dispersion),
    and each statistic is tested against it (quasi_p). None: sessions are independent (nothing
    varies between trials), the binomial tests alone.
    """
    ordered = tuple(sorted((r for r in rounds if r.n > 0), key=lambda r: r.round))
    phi, df = spread if spread is not None else (1.0, math.inf)
    if len(ordered) < 2:
        return DriftCheck(ordered, 1.0, 1.0, False)
    counts = [(r.k, r.n) for r in ordered]
    p_hom = heterogeneity(counts, phi, df)
    p_trend = trend(counts, [r.round for r in ordered], phi, df)
    separable = df > 0
    return DriftCheck(ordered, p_hom, p_trend, separable and min(p_hom, p_trend) < alpha / 2, separable)


# ----------------------------------------------------------------------------- factor effects


@dataclass(frozen=True)
class CellCount:
    """Pooled k/n of one cell (all completed trials of that combination of levels)."""

    levels: Mapping[str, str]
    k: int
    n: int


@dataclass(frozen=True)
class Effect:
    """Effect of setting `factor` to `level` instead of `reference`, in rate points.

    `given` empty: main effect, averaged over every combination of the other factors where both
    levels were observed (equal weights, as in a factorial design). `given` set: the same,
    holding those factors at the stated levels (a conditional effect).
    """

    factor: str
    level: str
    reference: str
    given: tuple[tuple[str, str], ...]
    interval: Interval
    strata: int

    @property
    def clear(self) -> bool:
        """True when the interval excludes zero."""
        return self.interval.excludes(0.0)


@dataclass(frozen=True)
class Interaction:
    """How much the effect of `factor` changes when `moderator` moves off its reference level.

    interval = effect(factor | moderator=moderator_level) - effect(factor | moderator=reference).
    """

    factor: str
    level: str
    reference: str
    moderator: str
    moderator_level: str
    moderator_reference: str
    interval: Interval

    @property
    def clear(self) -> bool:
        return self.interval.excludes(0.0)


@dataclass(frozen=True)
class FactorEffects:
    main: tuple[Effect, ...]
    conditional: tuple[Effect, ...]
    interactions: tuple[Interaction, ...]


def factor_effects(
    cells: Sequence[CellCount],
    factors: Mapping[str, Sequence[str]],
    reference: Mapping[str, str],
    confidence: float = CONFIDENCE,
) -> FactorEffects:
    """Main effects, conditional effects and two-way interactions of every factor.

    Each non-reference level is compared with the factor's reference (baseline) level. The
    conditional effects are what let the report say "overlap matters when CUDA graph is on" (and,
    with it off, that its effect was not shown): the effect of overlap within each level of each
    other factor. Rate differences (not log-odds) because a cell at 0 events makes logistic models
    diverge, and points of rate are what the team reads.
    """
    pooled = _pool(cells)
    main: list[Effect] = []
    conditional: list[Effect] = []
    interactions: list[Interaction] = []
    for factor, levels in factors.items():
        ref = reference.get(factor, levels[0] if levels else "")
        for level in (lv for lv in levels if lv != ref):
            effect = _effect(pooled, factor, level, ref, {}, confidence)
            if effect is not None:
                main.append(effect)
            for other, other_levels in factors.items():
                if other == factor:
                    continue
                by_level = {lv: _effect(pooled, factor, level, ref, {other: lv}, confidence) for lv in other_levels}
                conditional.extend(e for e in by_level.values() if e is not None)
                interactions.extend(
                    _interactions(pooled, factor, level, ref, other, other_levels, reference.get(other, ""), confidence)
                )
    return FactorEffects(tuple(main), tuple(conditional), tuple(interactions))


def _interactions(
    pooled: Mapping[tuple[tuple[str, str], ...], tuple[int, int]],
    factor: str,
    level: str,
    ref: str,
    moderator: str,
    moderator_levels: Sequence[str],
    moderator_ref: str,
    confidence: float,
) -> list[Interaction]:
    base_terms = _contrast_terms(pooled, factor, level, ref, {moderator: moderator_ref})
    if not base_terms:
        return []
    found = []
    for mod_level in (lv for lv in moderator_levels if lv != moderator_ref):
        terms = _contrast_terms(pooled, factor, level, ref, {moderator: mod_level})
        if not terms:
            continue
        combined = terms + [(k, n, -w) for k, n, w in base_terms]
        interval = contrast_interval([(k, n) for k, n, _ in combined], [w for _, _, w in combined], confidence)
        found.append(Interaction(factor, level, ref, moderator, mod_level, moderator_ref, interval))
    return found


def _effect(
    pooled: Mapping[tuple[tuple[str, str], ...], tuple[int, int]],
    factor: str,
    level: str,
    ref: str,
    given: Mapping[str, str],
    confidence: float,
) -> Effect | None:
    terms = _contrast_terms(pooled, factor, level, ref, given)
    if not terms:
        return None
    interval = contrast_interval([(k, n) for k, n, _ in terms], [w for _, _, w in terms], confidence)
    return Effect(factor, level, ref, tuple(sorted(given.items())), interval, len(terms) // 2)


def _contrast_terms(
    pooled: Mapping[tuple[tuple[str, str], ...], tuple[int, int]],
    factor: str,
    level: str,
    ref: str,
    given: Mapping[str, str],
) -> list[tuple[int, int, float]]:
    """(k, n, weight) terms: +1/S for each `level` cell, -1/S for its `ref` twin, S strata."""
    strata: dict[tuple[tuple[str, str], ...], dict[str, tuple[int, int]]] = {}
    for key, (k, n) in pooled.items():
        levels = dict(key)
        if n == 0 or any(levels.get(f) != v for f, v in given.items()):
            continue
        if levels.get(factor) not in (level, ref):
            continue
        stratum = tuple((f, v) for f, v in key if f != factor)
        strata.setdefault(stratum, {})[levels[factor]] = (k, n)
    pairs = [s for s in strata.values() if level in s and ref in s]
    weight = 1.0 / len(pairs) if pairs else 0.0
    terms: list[tuple[int, int, float]] = []
    for pair in pairs:
        terms.append((*pair[level], weight))
        terms.append((*pair[ref], -weight))
    return terms


def _pool(cells: Sequence[CellCount]) -> dict[tuple[tuple[str, str], ...], tuple[int, int]]:
    pooled: dict[tuple[tuple[str, str], ...], tuple[int, int]] = {}
    for cell in cells:
        _check_counts(cell.k, cell.n)
        key = tuple(sorted(cell.levels.items()))
        k, n = pooled.get(key, (0, 0))
        pooled[key] = (k + cell.k, n + cell.n)
    return pooled


def _two_column_table(counts: Sequence[tuple[int, int]]) -> np.ndarray | None:
    """[[k, n-k], ...] without empty rows; None when no test is possible (all 0 or all n)."""
    rows = [(k, n - k) for k, n in counts if n > 0]
    if len(rows) < 2:
        return None
    table = np.asarray(rows, dtype=float)
    if table[:, 0].sum() == 0 or table[:, 1].sum() == 0:
        return None
    return table


def _check_counts(k: int, n: int) -> None:
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"stats: invalid count k={k}, n={n} (need 0 <= k <= n)")
