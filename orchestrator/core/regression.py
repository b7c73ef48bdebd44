"""Nightly regression checks: is tonight's run of a matrix different from its recent nights? (PURE)

A team that runs the same matrix every night wants one question answered each morning: did a
cell move? Nights differ from each other even when nothing changed (restarts, GPU clocks,
neighbours), so a plain binomial test of tonight against the pooled history would cry wolf. The
rate test here treats the *night* as the unit of replication: the history's night-to-night
spread beyond the binomial (a quasi-binomial dispersion, floored at 1) widens the reference, and
the answer is never more confident than Fisher's exact test on the pooled counts. Numbers use a
rank test (Mann-Whitney) of tonight's trial values against the history's. One night checks many
cells and metrics at once, so the p-values are Holm-adjusted across all of them: the chance of
any false alarm on a night where nothing changed stays at most `alpha` (a simulation test pins it).

Those tests see trials, not nights. When nights themselves vary (a GPU clock, a neighbour, a
reboot shared by every trial of a night), tonight's trials move together, and no spread within a
night shows it: steady cells were flagged on 17% (rates) and 21% (numbers) of simulated nights
(tests/test_nightly_nights.py). So both kinds of metric also get a night-level test, in which
each earlier night is one observation: for rates, the beta-binomial tail of tonight's count
with the nights as clusters (`_rate_night_p`: night rates near 0 are too skewed for a t); for
numbers, Student's prediction test of tonight's mean trial value among the earlier nights'
means (`_prediction_p`). Each Change takes the larger p of that and the trial-level tests, so
the check is never more liberal than they were alone; with fewer than 2 earlier nights (or none
that differ) the night test does not apply and the Change's method does not name it. With a
single earlier night, a night effect is invisible: bench/bench_regression.py --night-icc shows
what that costs.

Every test here costs time bounded by the number of trials and nights, never by their
sessions: the index under `orch serve /` reruns the check on every request, and a summary.json
may say 10^9 sessions.
The exact beta-binomial tail is kept while its convolutions are small (about 20,000 sessions, or
a count or non-count of a few thousand at any size); beyond, a moment-matched beta stands in for
it, and a binomial test conditional on the pooled events stands in for Fisher's. Each Change
names the method it used.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchestrator.core import dist, ranks
from orchestrator.core.clustered import RHO_PRIOR
from orchestrator.core.stats import ALPHA, holm, pooled_test

LOOKBACK = 7  # earlier nights compared against (the newest ones)
# Multiply-adds of one exact tail's convolutions: (count + 1) x (sessions + trials) at most, so any
# 20,000 sessions fit (2.0 x 10^8: 0.06 s in 64 trials on a loaded 2-core machine; the old full
# convolution of 40,000 sessions took 1.4-12 s).
EXACT_WORK = 25 * 10**7
POOLED_BINOMIAL = "binomial test of tonight's share of pooled events (Fisher's, for this many sessions)"


Trials = tuple[tuple[int, int], ...]  # (k, n) per trial of one night


@dataclass(frozen=True)
class RateHistory:
    """One cell's proportion metric: (k, n) per trial of each earlier night (oldest first), and
    tonight's trials. Trials, not only night totals: every trial is a restart, so the spread of
    trials estimates restart-to-restart variation even when the history holds one night."""

    cell: str
    metric: str
    nights: tuple[Trials, ...]
    tonight: Trials


@dataclass(frozen=True)
class NumberHistory:
    """One cell's numeric metric: trial values per earlier night, and tonight's trial values."""

    cell: str
    metric: str
    nights: tuple[tuple[float, ...], ...]
    tonight: tuple[float, ...]


@dataclass(frozen=True)
class Change:
    """A checked (cell, metric): before/after in the metric's own terms, raw and adjusted p."""

    cell: str
    metric: str
    before: float
    after: float
    p: float
    p_holm: float = 1.0
    nights: int = 0
    method: str = ""
    unit: str = ""  # a number metric's declared unit, for the words (report.trends.change_text)

    @property
    def flagged(self) -> bool:
        return self.p_holm < ALPHA


def rate_change(h: RateHistory, rho: float | None = None) -> Change | None:
    """Tonight's rate against the history's; None when there is nothing to compare.

    The p-value is the largest of Fisher's exact test on pooled counts, a quasi-binomial test of
    the two rates with trials as clusters, and the beta-binomial tail of tonight's count (rare
    events are skewed). Their intra-trial correlation is a deliberately high estimate (the 90%
    upper confidence bound from the spread of trials around their rates): restarts vary, and a
    night's few trials cannot show how much, so the check assumes they may vary more than they
    seemed to. With 2 or more earlier nights the night-level tail (`_rate_night_p`) joins them:
    trials cannot show a night effect that all of a night's trials share."""
    nights, today = _observed(h)
    if not nights or not today:
        return None
    k, n = _total(today)
    trials = tuple(t for night in nights for t in night)
    big_k, big_n = _total(trials)
    p, method = _pooled_p(k, n, big_k, big_n)
    pooled = (big_k + k) / (big_n + n)
    if 0 < pooled < 1:
        rho = _icc_upper(_groups(h)) if rho is None else rho
        sizes = [m for _, m in today]
        quasi = _quasi_p(k / n - big_k / big_n, pooled, rho, sizes, [m for _, m in trials])
        past = big_k / big_n  # tonight's count against what the history predicts (skewed when rare)
        tail, how = _betabinom_p(k, sizes, past, rho) if 0 < past < 1 else (0.0, "")
        night, night_words = _rate_night_p(nights, k, n, past) if 0 < past < 1 else (0.0, "")
        p = max(p, quasi, tail, night)
        tests = f"quasi-binomial and beta-binomial ({how})" if how else "quasi-binomial"
        method = (
            f"{tests} with trials as clusters (intra-trial correlation up to {rho:.2g}), "
            f"{night_words}the largest p of those and {method}"
        )
    return Change(h.cell, h.metric, big_k / big_n, k / n, p, nights=len(nights), method=method)


def _rate_night_p(nights: Sequence[Trials], k: int, n: int, past: float) -> tuple[float, str]:
    """The night-level test of tonight's k of n: the beta-binomial tail of tonight's count with
    the *nights* as clusters, their intra-night correlation the 90% upper confidence bound from
    the spread of the earlier nights' totals around their pooled rate `past` (as `_icc_upper`
    bounds trials). With it, the method's words; (0.0, "") with fewer than 2 earlier nights.

    Not Student's prediction test on night rates: when nights vary, rates near 0 are strongly
    skewed (most nights low, a few high) and every false alarm is a high night. Measured over
    600-1000 simulated nights (4 cells, 2-4 trials of 40 sessions, 7 earlier nights), steady
    nights flagged at a between-night ICC of 0.05 / 0.1 at 5%, and 0.03 at 2%: a t on raw rates
    (within-night variance as a floor) 10% / 14% / -, a t on the arcsine scale 4.2% / 7.0% /
    7.8%, this tail 3.0% / 5.0% / 4.5%. It pays in power: a jump 2% -> 20% at ICC 0.02 was
    flagged in 54% of nights, 72% with the arcsine t. Its bound needs no variance floor: nights
    that agree give a chi-square of 0, which `_icc_upper` turns into its prior correlation, never
    0 or a division by 0, and a history rate of 0 (nights of 0/40) leaves the test to the others
    (the caller checks 0 < past < 1). Tonight's own within-night noise (its trials, their
    sessions) is inside the tail's variance at n sessions, so nothing is added for it."""
    if len(nights) < 2:
        return 0.0, ""
    rho = _icc_upper([([_total(night) for night in nights], past)])
    tail, how = _betabinom_p(k, [n], past, rho)
    return tail, (
        f"a night-level beta-binomial test over {len(nights)} nights ({how}, intra-night correlation up to {rho:.2g}), "
    )


def _prediction_p(
    tonight: float, nights: Sequence[float], tonight_within: float, within: Sequence[float]
) -> float | None:
    """Two-sided p of tonight's night-level value as one more night like the N earlier ones; None
    when those do not differ at all (a constant metric: no spread to judge by, so the rank test
    decides alone; a p of 0 would mean nothing).

    Student's prediction test: t = (tonight - mean) / sqrt(s^2 * (1 + 1/N) + extra) on N - 1
    degrees of freedom, s^2 the spread of the earlier nights. That spread already holds both the
    between-night variation and each night's within-night noise, so no floor from the within
    variance is added: a spread small by chance is what the t's degrees of freedom are for.
    `extra` is tonight's within-night variance beyond the earlier nights' mean (tonight ran fewer
    trials, so it is the noisier draw), never negative: a night of more trials is not credited.
    With `extra` > 0 the degrees of freedom are Satterthwaite's (only s^2 is estimated)."""
    count = len(nights)
    mean = math.fsum(nights) / count
    spread = math.fsum((v - mean) ** 2 for v in nights) / (count - 1) * (1 + 1 / count)
    if not spread > 0:
        return None
    var = spread + max(0.0, tonight_within - math.fsum(within) / count)
    t = abs(tonight - mean) / math.sqrt(var)
    return min(1.0, 2 * float(dist.t_sf(t, (count - 1) * (var / spread) ** 2)))


def _pooled_p(k: int, n: int, big_k: int, big_n: int) -> tuple[float, str]:
    """Fisher's exact p on the pooled counts, and its name; past stats.FISHER_SESSIONS the
    binomial test of tonight's share of the events stands in (stats.pooled_test says why)."""
    test = pooled_test(k, n, big_k, big_n)
    return test.p, "Fisher exact on pooled nights" if test.exact else POOLED_BINOMIAL


def _observed(h: RateHistory) -> tuple[list[Trials], Trials]:
    """The nights that have sessions (each without its empty trials), and tonight's trials."""
    nights = [tuple(t for t in night if t[1] > 0) for night in h.nights]
    return [night for night in nights if night], tuple(t for t in h.tonight if t[1] > 0)


def _groups(h: RateHistory) -> list[tuple[Sequence[tuple[int, int]], float]]:
    """The cell's trials in two groups, each with its own pooled rate: history, tonight."""
    nights, today = _observed(h)
    history = tuple(t for night in nights for t in night)
    groups: list[tuple[Sequence[tuple[int, int]], float]] = []
    for trials in (history, today):
        if trials:
            k, n = _total(trials)
            groups.append((trials, k / n))
    return groups


def _icc_upper(groups: Sequence[tuple[Sequence[tuple[int, int]], float]], confidence: float = 0.9) -> float:
    """An upper confidence bound of the intra-trial correlation, from the Pearson chi-square of
    each group's trials around the group's own rate (history around its pooled rate, tonight
    around tonight's: a real change must not read as noise); phi = 1 + (m - 1) * rho."""
    chi2, df, sizes = 0.0, 0, []
    for trials, rate in groups:
        sizes += [m for _, m in trials]
        if 0 < rate < 1 and len(trials) > 1:
            chi2 += sum((k - m * rate) ** 2 / (m * rate * (1 - rate)) for k, m in trials)
            df += len(trials) - 1
    if df < 1:
        return RHO_PRIOR
    phi = max(1.0, chi2 / float(dist.chi2_ppf(1 - confidence, df)))
    mean_m = sum(sizes) / len(sizes)
    return min(0.5, max(RHO_PRIOR, (phi - 1) / max(1.0, mean_m - 1)))


def _quasi_p(diff: float, rate: float, rho: float, today: Sequence[int], history: Sequence[int]) -> float:
    """Two-sided p of a difference of two rates whose sessions come in correlated trials: each
    side's variance is inflated by its trials' design effect 1 + (m - 1) * rho."""
    var = sum(_trial_var(m, rate, rho) for m in today) / sum(today) ** 2
    var += sum(_trial_var(m, rate, rho) for m in history) / sum(history) ** 2
    return min(1.0, 2 * float(dist.norm_sf(abs(diff) / math.sqrt(var))))


def _betabinom_p(k: int, sizes: Sequence[int], rate: float, rho: float) -> tuple[float, str]:
    """Two-sided tail at k of a sum of independent beta-binomial trials (mean `rate`, intra-trial
    correlation `rho`), and how it was computed: exact while its convolutions stay small (rare
    events, where the normal approximation is wrong, always are), else a moment-matched beta."""
    count = min(k, sum(sizes) - k)
    if (count + 1) * sum(min(m, count) + 1 for m in sizes) <= EXACT_WORK:
        return _betabinom_exact(k, sizes, rate, rho), "exact tail"
    return _betabinom_beta(k, sizes, rate, rho), "tail of a moment-matched beta"


def _betabinom_exact(k: int, sizes: Sequence[int], rate: float, rho: float) -> float:
    """The exact two-sided tail. P(X <= k) and P(X >= k) = 1 - P(X <= k - 1) need the pmf only up
    to k, so each trial's pmf is cut there (cost k^2 per trial, not sessions^2); above half the
    sessions the non-events (a sum of beta-binomials with a and b swapped) are counted instead.
    The far tail as 1 minus the near one is exact to about 1e-11, far below any alpha after Holm."""
    if 2 * k > sum(sizes):
        k, rate = sum(sizes) - k, 1 - rate
    a, b = rate * (1 - rho) / rho, (1 - rate) * (1 - rho) / rho
    pmf = np.ones(1)
    for m in sizes:
        pmf = np.convolve(pmf, dist.betabinom_pmf(np.arange(min(m, k) + 1), m, a, b))[: k + 1]
    low, high = float(pmf.sum()), 1.0 - float(pmf[:k].sum())
    return min(1.0, max(0.0, 2 * min(low, high)))


def _betabinom_beta(k: int, sizes: Sequence[int], rate: float, rho: float) -> float:
    """The tail of a beta on [0, sessions] with the sum's mean and variance, continuity-corrected.
    A beta-binomial trial of many sessions is its beta mixing scaled up, so this keeps the skew and
    the bounds that a normal misses (whose tail is off by orders of magnitude at rare rates).
    Measured against the exact tail at 10^4-4 x 10^5 sessions, intra-trial correlation up to 0.05:
    within 0.01 of p, and within 15% of p below 0.1 (tests/team/test_team_bounds.py pins it).
    Sums of several trials that vary wildly (correlation near 0.5) are near normal, not beta: the
    quasi-binomial test, whose p rate_change also takes, covers those."""
    n = sum(sizes)
    concentration = rate * (1 - rate) * n * n / sum(_trial_var(m, rate, rho) for m in sizes) - 1  # a + b
    a, b = rate * concentration, (1 - rate) * concentration
    low, high = float(dist.beta_cdf(min(1.0, (k + 0.5) / n), a, b)), float(dist.beta_sf(max(0.0, (k - 0.5) / n), a, b))
    return min(1.0, 2 * min(low, high))


def _trial_var(m: int, rate: float, rho: float) -> float:
    return m * rate * (1 - rate) * (1 + (m - 1) * rho)


def _total(trials: Trials) -> tuple[int, int]:
    return sum(k for k, _ in trials), sum(n for _, n in trials)


def number_change(h: NumberHistory) -> Change | None:
    """Tonight's trial values against every earlier night's (rank test); None if too few values.
    The p is the larger of that and the night-level prediction test of tonight's mean among the
    earlier nights' means: the rank test treats all earlier trials as independent draws, which
    they are not when nights vary."""
    before = [v for night in h.nights for v in night if math.isfinite(v)]
    after = [v for v in h.tonight if math.isfinite(v)]
    if len(before) < 2 or len(after) < 2:
        return None
    p = ranks.mann_whitney(before, after)
    nights = [finite for night in h.nights if (finite := [v for v in night if math.isfinite(v)])]
    night = _number_night_p(nights, after)
    method = "Mann-Whitney U, trial values"
    if night is not None:
        p = max(p, night)
        method += f", and a night-level prediction test over {len(nights)} nights, the larger p"
    medians = statistics.median(before), statistics.median(after)
    return Change(h.cell, h.metric, *medians, p, nights=len(h.nights), method=method)


def _number_night_p(nights: Sequence[Sequence[float]], tonight: Sequence[float]) -> float | None:
    """The night-level prediction test of tonight's mean trial value among the earlier nights'
    means; None with fewer than 2 earlier nights. Means, not medians: a mean's within-night
    variance is the trials' variance over their count, which `_prediction_p` needs to weigh a
    night of 2 trials against nights of 4 (a median of a few values has no such simple form).
    The trials' variance is pooled over every night with at least 2 of them, tonight's too (a
    shift moves a night's level, not its spread); without any, it is taken as 0 and the test is
    the plain one on the spread of the nights."""
    if len(nights) < 2:
        return None
    sigma2 = _pooled_within_variance([*nights, tonight])
    means = [math.fsum(night) / len(night) for night in nights]
    within = [sigma2 / len(night) for night in nights]
    return _prediction_p(math.fsum(tonight) / len(tonight), means, sigma2 / len(tonight), within)


def _pooled_within_variance(nights: Sequence[Sequence[float]]) -> float:
    """The variance of trial values around their own night's mean, pooled over nights; 0 if no
    night has 2 trials."""
    squares, df = 0.0, 0
    for night in nights:
        if len(night) > 1:
            mean = math.fsum(night) / len(night)
            squares += math.fsum((v - mean) ** 2 for v in night)
            df += len(night) - 1
    return squares / df if df else 0.0


def check_night(rates: Sequence[RateHistory], numbers: Sequence[NumberHistory] = ()) -> list[Change]:
    """Every testable (cell, metric) of tonight, Holm-adjusted together; flagged ones first.
    Restart-to-restart variation is a property of the deployment, not of one cell, so its bound
    is estimated from the trials of every cell at once (many more degrees of freedom)."""
    rho = _icc_upper([g for h in rates for g in _groups(h)]) if rates else None
    checked = [rate_change(h, rho) for h in rates] + [number_change(h) for h in numbers]
    changes = [c for c in checked if c is not None]
    adjusted = holm([c.p for c in changes])
    out = [Change(**{**c.__dict__, "p_holm": q}) for c, q in zip(changes, adjusted, strict=True)]
    return sorted(out, key=lambda c: (not c.flagged, c.p_holm, c.cell, c.metric))
