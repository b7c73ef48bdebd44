"""Factor effects and interactions with p-values, and the one multiplicity policy over findings (PURE).

Why: a 2x2x2 sweep yields ~20 effect and interaction intervals per metric. Read one by one at
95%, an A/A sweep (nothing differs) shows at least one "clear" interaction in 13-17% of runs
and a "clear" conditional effect in 34-39%. So every test the report could call a finding gets
a p-value, all of them - every metric of the report together - form one family, and Holm's
step-down correction over that family decides what is a finding (family-wise error <= alpha for
the whole report); the raw intervals stay on the page, labelled exploratory.

Contrasts. Every effect here is a signed sum of cell rates, averaged over the strata (levels of
the factors not involved) where all its cells were observed:
- main effect of factor F at level l: p(F=l) - p(F=ref);
- conditional effect: the same holding one other factor at a level;
- interaction of F1..Fk (k = 2 or 3): the k-th difference, sum over the 2^k corners of
  (-1)^(k - #changed) p(corner); a three-way interaction is what an AND of three flags (the DSV4
  mechanism) looks like. Each set of factors is listed once (A x B, never also B x A).
Intervals are MOVER-Wilson (stats.contrast_interval), and each p-value inverts that same
interval (the largest confidence whose interval still excludes 0), so "interval excludes 0" and
"p < 0.05" always agree.

Numeric metrics get main effects too: the Hodges-Lehmann shift with its exact Mann-Whitney
interval (ranks.shift_interval) and the Mann-Whitney p, pooled over matched strata when the
design is balanced; when cells ran unequal numbers of trials, pooling would confound the factor
with the strata that ran more, so van Elteren's stratified test weighs every stratum the same:
exact (its permutation distribution within strata) while the strata are small, the normal
approximation, labelled as such, when they are large.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from orchestrator.core import dist, ranks
from orchestrator.core.stats import ALPHA, CONFIDENCE, CellCount, Interval, holm

MAX_ORDER = 3  # interactions up to three-way (the DSV4 AND); higher orders are rarely readable
MAX_CONTRASTS = 400  # per metric; interactions of the highest order are dropped first beyond it
_Z_MAX = 38.0  # 2*sf(38) underflows: p is 0 to double precision beyond it

Change = tuple[str, str, str]  # (factor, reference level, level)
Pooled = dict[tuple[tuple[str, str], ...], tuple[int, int]]
K = TypeVar("K", bound=Hashable)
Reading = tuple[float, float, float, float, bool]  # a cell's term: k, n, weight, interval inflation m, stopped
# (k, n, m, z, stopped) -> (low, high), elementwise: a cell's interval at the normal quantile z
CellBounds = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Contrast:
    """One tested difference of rates: an effect (one change) or an interaction (2-3 changes)."""

    changes: tuple[Change, ...]
    given: tuple[tuple[str, str], ...]  # conditional effect: other factors held at these levels
    interval: Interval
    p: float
    strata: int

    @property
    def order(self) -> int:
        return len(self.changes)

    @property
    def clear(self) -> bool:
        """Raw (uncorrected) 95% interval excludes 0: exploratory, not a finding by itself."""
        return self.interval.excludes(0.0)


@dataclass(frozen=True)
class CellValues:
    """All values of a numeric metric in one cell (one per completed trial)."""

    levels: Mapping[str, str]
    values: tuple[float, ...]


@dataclass(frozen=True)
class ShiftEffect:
    """Main effect of a factor on a numeric metric: level's values vs the reference's."""

    factor: str
    reference: str
    level: str
    median_level: float
    median_reference: float
    n_level: int
    n_reference: int
    shift: ranks.CoveredInterval  # Hodges-Lehmann shift (level - reference); coverage exact, or approximate
    p: float  # two-sided Mann-Whitney (van Elteren's stratified test when `stratified`: stratified_p)
    strata: int
    stratified: bool = False  # cells ran unequal numbers of trials: each stratum weighed the same


# ----------------------------------------------------------------------------- proportions


def proportion_contrasts(
    cells: Sequence[CellCount],
    factors: Mapping[str, Sequence[str]],
    reference: Mapping[str, str],
    max_order: int = MAX_ORDER,
    phi: float = 1.0,
    df: float = 0.0,
) -> list[Contrast]:
    """Main effects, conditional effects and interactions (orders 2..max_order) with p-values.

    phi, df: the sweep's trial-to-trial dispersion (clustered.Dispersion) when df > 0. As the
    cell-vs-baseline quasi test does, each contrast is then also evaluated on the effective counts
    k/phi of n/phi with Student's t(df), and the more cautious reading wins (the larger p, the
    hull of the two intervals): never below the binomial, valid when trials disagree."""
    grid = _Grid(_pool(cells))
    built = [
        (changes, given, *grid.terms(changes, dict(given))) for changes, given in _wanted(factors, reference, max_order)
    ]
    kept = [(changes, given, terms, strata) for changes, given, terms, strata in built if strata]
    all_terms = [terms for _, _, terms, _ in kept]
    intervals, pvalues = mover_intervals(all_terms), mover_pvalues(all_terms)
    if df > 0 and phi > 0:
        scaled = [[(k / phi, n / phi, w) for k, n, w in terms] for terms in all_terms]
        quasi = mover_intervals(scaled, df=df)
        intervals = [_hull(a, b) for a, b in zip(intervals, quasi, strict=True)]
        pvalues = np.maximum(pvalues, mover_pvalues(scaled, df=df))
    return [
        Contrast(changes, given, interval, float(p), strata)
        for (changes, given, _, strata), interval, p in zip(kept, intervals, pvalues, strict=True)
    ]


def _wanted(
    factors: Mapping[str, Sequence[str]], reference: Mapping[str, str], max_order: int
) -> list[tuple[tuple[Change, ...], tuple[tuple[str, str], ...]]]:
    """Every contrast the report tests, in its order: each change (main, then conditional on each
    other factor's levels), then the interactions by order while the total stays <= MAX_CONTRASTS."""
    refs = {f: reference.get(f, levels[0] if levels else "") for f, levels in factors.items()}
    wanted: list[tuple[tuple[Change, ...], tuple[tuple[str, str], ...]]] = []
    for factor, levels in factors.items():
        for change in _changes(factor, levels, refs[factor]):
            wanted.append(((change,), ()))
            for other, other_levels in factors.items():
                if other != factor:
                    wanted.extend(((change,), ((other, lv),)) for lv in other_levels)
    for order in range(2, max_order + 1):
        batch = list(_interaction_sets(factors, refs, order))
        if len(wanted) + len(batch) > MAX_CONTRASTS:
            break
        wanted.extend((changes, ()) for changes in batch)
    return wanted


def tested_contrasts(
    cells: Sequence[Mapping[str, str]],
    factors: Mapping[str, Sequence[str]],
    reference: Mapping[str, str],
    max_order: int = MAX_ORDER,
) -> list[tuple[tuple[Change, ...], tuple[tuple[str, str], ...]]]:
    """The (changes, given) of each contrast proportion_contrasts tests on these cells (every cell
    observed), in its order, without their p-values: their part of the report's family (core.family)."""
    grid = _Grid({tuple(sorted(levels.items())): (0, 1) for levels in cells})
    return [(c, g) for c, g in _wanted(factors, reference, max_order) if grid.full_strata(c, dict(g)) > 0]


def contrast_terms(
    cells: Sequence[Mapping[str, str]], contrasts: Sequence[tuple[Sequence[Change], Sequence[tuple[str, str]]]]
) -> list[list[tuple[int, float]]]:
    """(index into `cells`, weight) of the terms proportion_contrasts sums for each (changes, given)
    over these cells (distinct levels, every one observed): which cells a contrast compares."""
    grid = _Grid({tuple(sorted(levels.items())): (i, 1) for i, levels in enumerate(cells)})
    return [[(int(k), w) for k, _, w in grid.terms(changes, dict(given))[0]] for changes, given in contrasts]


def contrast_count(
    cells: Sequence[Mapping[str, str]],
    factors: Mapping[str, Sequence[str]],
    reference: Mapping[str, str],
    max_order: int = MAX_ORDER,
) -> int:
    """How many contrasts proportion_contrasts tests on these cells (every cell observed)."""
    return len(tested_contrasts(cells, factors, reference, max_order))


def contrast_pvalues(
    k: np.ndarray,
    n: np.ndarray,
    cells: Sequence[Mapping[str, str]],
    factors: Mapping[str, Sequence[str]],
    reference: Mapping[str, str],
    phi: np.ndarray | None = None,
    df: np.ndarray | None = None,
    max_order: int = MAX_ORDER,
) -> tuple[list[tuple[tuple[Change, ...], tuple[tuple[str, str], ...]]], np.ndarray]:
    """The p-values proportion_contrasts gives, for many sweeps at once: k, n of shape (sweeps,
    cells) with every cell observed (n > 0) and distinct levels; phi, df per sweep. Returns the
    contrasts (changes, given) and their p of shape (sweeps, contrasts), in proportion_contrasts'
    order. For the simulation tests: the same arithmetic row by row (tests check they agree),
    without a Python loop over sweeps."""
    index: Pooled = {tuple(sorted(levels.items())): (i, 1) for i, levels in enumerate(cells)}
    wanted, grid = _wanted(factors, reference, max_order), _Grid(index)
    built = [(key, *grid.terms(key[0], dict(key[1]))) for key in wanted]
    names = [key for key, _, strata in built if strata]
    plan = [(terms, strata) for _, terms, strata in built if strata]
    width = max(len(terms) for terms, _ in plan)
    idx, w = np.zeros((len(plan), width), dtype=int), np.zeros((len(plan), width))
    for i, (terms, _) in enumerate(plan):
        for j, (cell, _, weight) in enumerate(terms):
            idx[i, j], w[i, j] = int(cell), weight
    real = np.arange(width)[None, :] < np.array([len(t) for t, _ in plan])[:, None]
    kk = np.where(real, np.asarray(k, dtype=float)[:, idx], 0.0)
    nn = np.where(real, np.asarray(n, dtype=float)[:, idx], 1.0)
    sweeps, count = kk.shape[0], len(plan)
    ww = np.broadcast_to(w, kk.shape).reshape(-1, width)
    p = _pvalues(kk.reshape(-1, width), nn.reshape(-1, width), ww, np.zeros(sweeps * count)).reshape(sweeps, count)
    if phi is None or df is None:
        return names, p
    f_phi, f_df = np.asarray(phi, dtype=float), np.asarray(df, dtype=float)
    ok = (f_df > 0) & (f_phi > 0)
    if ok.any():
        scale = np.where(ok, f_phi, 1.0)[:, None, None]
        rows = np.repeat(np.where(ok, f_df, 0.0), count)
        quasi = _pvalues((kk / scale).reshape(-1, width), (nn / scale).reshape(-1, width), ww, rows)
        p = np.where(ok[:, None], np.maximum(p, quasi.reshape(sweeps, count)), p)
    return names, p


def _changes(factor: str, levels: Sequence[str], ref: str) -> list[Change]:
    return [(factor, ref, level) for level in levels if level != ref]


def _interaction_sets(
    factors: Mapping[str, Sequence[str]], refs: Mapping[str, str], order: int
) -> list[tuple[Change, ...]]:
    """Every set of `order` factors once (matrix order), with every combination of their non-reference levels."""
    found: list[tuple[Change, ...]] = []
    for names in itertools.combinations(factors, order):
        per_factor = [_changes(f, factors[f], refs[f]) for f in names]
        found.extend(itertools.product(*per_factor))
    return found


def _hull(a: Interval, b: Interval) -> Interval:
    return Interval(a.estimate, min(a.low, b.low), max(a.high, b.high))


class _Grid:
    """The pooled cells as arrays (one row per cell, one column per factor: the level's code, -1
    where a cell lacks the factor), so each contrast's strata and corners are a few vectorised
    comparisons: a 4,096-cell sweep tests ~350 contrasts, and walking every cell in Python for
    each took seconds of every report and of `orch plan`.

    Each (factor, level) mask is computed once, and a stratum (the codes of the factors not
    involved) is one mixed-radix integer, so finding the strata is a 1-D np.unique, not
    np.unique(axis=0) over rows (a sort of row views: ~5 ms a contrast at 4,096 cells). The
    integers order as the rows do, so strata, their order and the terms are unchanged
    (tests/test_stats_fast_paths.py checks against the row-wise definition)."""

    def __init__(self, pooled: Pooled) -> None:
        keys = list(pooled)
        self.columns = {f: i for i, f in enumerate(sorted({f for key in keys for f, _ in key}))}
        self.codes: dict[str, dict[str, int]] = {f: {} for f in self.columns}
        self.grid = np.full((len(keys), len(self.columns)), -1, dtype=np.int64)
        for row, key in enumerate(keys):
            for f, v in key:
                self.grid[row, self.columns[f]] = self.codes[f].setdefault(v, len(self.codes[f]))
        self.k = [float(pooled[key][0]) for key in keys]
        self.n = np.array([pooled[key][1] for key in keys], dtype=float)
        self.radix = [len(self.codes[f]) + 1 for f in self.columns]  # codes -1..L-1 as digits 0..L
        self._masks: dict[tuple[str, str], np.ndarray] = {}

    def _is(self, factor: str, level: str) -> np.ndarray:
        mask = self._masks.get((factor, level))
        if mask is None:
            code = self.codes.get(factor, {}).get(level)
            if code is None:
                mask = np.zeros(len(self.n), dtype=bool)
            else:
                mask = np.asarray(self.grid[:, self.columns[factor]] == code)
            mask.flags.writeable = False  # shared by every contrast: never changed in place
            self._masks[(factor, level)] = mask
        return mask

    def _strata(
        self, changes: Sequence[Change], given: Mapping[str, str]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """(picked cells, their corner codes, their stratum, each stratum's first position), None
        when no cell is picked."""
        rows = self.n > 0
        for f, v in given.items():
            rows &= self._is(f, v)
        corner = np.zeros(len(self.n), dtype=np.int64)
        for factor, ref, level in changes:
            up = self._is(factor, level)
            rows &= up | self._is(factor, ref)
            corner = corner * 2 + up
        picked = np.flatnonzero(rows)
        if not len(picked):
            return None
        involved = {self.columns[f] for f, _, _ in changes if f in self.columns}
        others = [c for c in range(self.grid.shape[1]) if c not in involved]
        if math.prod(self.radix[c] for c in others) < 2**62:
            weights, place = np.zeros(len(others), dtype=np.int64), 1
            for j in range(len(others) - 1, -1, -1):  # the first column is the most significant digit
                weights[j], place = place, place * self.radix[others[j]]
            key = (self.grid[picked][:, others] + 1) @ weights
            _, first, stratum = np.unique(key, return_index=True, return_inverse=True)
        else:  # too many levels for one int64: the rows themselves
            _, first, stratum = np.unique(self.grid[picked][:, others], axis=0, return_index=True, return_inverse=True)
        return picked, corner, stratum.reshape(-1), first

    def full_strata(self, changes: Sequence[Change], given: Mapping[str, str]) -> int:
        """How many strata have every corner of the contrast observed: terms(...)[1], without the terms."""
        found = self._strata(changes, given)
        if found is None:
            return 0
        counts = np.bincount(found[2])
        return int(np.count_nonzero(counts == 2 ** len(changes)))

    def terms(
        self, changes: Sequence[Change], given: Mapping[str, str]
    ) -> tuple[list[tuple[float, float, float]], int]:
        """(k, n, weight) terms of the contrast and how many strata had every corner observed.

        Strata (the levels of the factors not involved) in the order their first cell comes, and
        each stratum's corners in order (the first change is the most significant bit): the same
        terms, in the same order, as walking the cells one by one."""
        found = self._strata(changes, given)
        if found is None:
            return [], 0
        picked, corner, stratum, first = found
        counts = np.bincount(stratum)
        rank = np.empty_like(first)
        rank[np.argsort(first, kind="stable")] = np.arange(len(first))  # strata by their first cell
        keep = counts[stratum] == 2 ** len(changes)
        full = int(np.count_nonzero(counts == 2 ** len(changes)))
        chosen = picked[keep][np.lexsort((corner[picked[keep]], rank[stratum[keep]]))]
        signs = np.where((len(changes) - _bit_counts(corner[chosen])) % 2 == 0, 1.0, -1.0)
        return [
            (self.k[r], float(self.n[r]), sign / full) for r, sign in zip(chosen.tolist(), signs.tolist(), strict=True)
        ], full


def _bit_counts(values: np.ndarray) -> np.ndarray:
    return np.array([int(v).bit_count() for v in values.tolist()], dtype=np.int64)


def _pool(cells: Sequence[CellCount]) -> Pooled:
    pooled: Pooled = {}
    for cell in cells:
        if cell.n < 0 or cell.k < 0 or cell.k > cell.n:
            raise ValueError(f"findings: invalid count k={cell.k}, n={cell.n} (need 0 <= k <= n)")
        key = tuple(sorted(cell.levels.items()))
        k, n = pooled.get(key, (0, 0))
        pooled[key] = (k + cell.k, n + cell.n)
    return pooled


# ----------------------------------------------------------------------------- MOVER, vectorized


def mover_intervals(
    contrasts: Sequence[Sequence[tuple[float, float, float]]], confidence: float = CONFIDENCE, df: float = 0.0
) -> list[Interval]:
    """MOVER-Wilson interval of each contrast (the same numbers as stats.contrast_interval)."""
    if not contrasts:
        return []
    k, n, w = _arrays(contrasts)
    z = dist.norm_ppf(0.5 + confidence / 2) if df <= 0 else dist.t_ppf(0.5 + confidence / 2, df)
    est, low, high = _mover(k, n, w, np.full((len(contrasts), 1), z))
    return [Interval(float(e), float(lo), float(hi)) for e, lo, hi in zip(est, low, high, strict=True)]


def mover_pvalues(contrasts: Sequence[Sequence[tuple[float, float, float]]], df: float = 0.0) -> np.ndarray:
    """Two-sided p of each contrast: 1 - the largest confidence whose MOVER-Wilson interval
    excludes 0 (bisection on the quantile, all contrasts at once; Student's t(df) when df is
    given, df > 0). 1.0 for an estimate of exactly 0."""
    if not contrasts:
        return np.zeros(0)
    k, n, w = _arrays(contrasts)
    return _pvalues(k, n, w, np.full(len(contrasts), float(df)))


def _pvalues(k: np.ndarray, n: np.ndarray, w: np.ndarray, df: np.ndarray) -> np.ndarray:
    """mover_pvalues on (rows x terms) arrays, one df per row (0: the normal quantile)."""
    est = np.sum(w * k / n, axis=1)
    lo = _largest_z(est, lambda z: _mover(k, n, w, z)[1:])
    student = df > 0
    p = 2.0 * dist.norm_sf(lo)
    if student.any():
        p = np.where(student, 2.0 * dist.t_sf(lo, np.where(student, df, 1.0)), p)
    return np.where(np.abs(est) < 1e-12, 1.0, np.minimum(p, 1.0))


def _largest_z(est: np.ndarray, interval_at: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Per row, the largest normal quantile z whose interval (interval_at(z): low, high per row,
    z of shape (rows, 1)) still excludes 0, by bisection on z, all rows at once."""
    sign = np.where(est >= 0, 1.0, -1.0)[:, None]
    lo, hi = np.zeros((len(est), 1)), np.full((len(est), 1), _Z_MAX)
    for _ in range(40):  # z to within 4e-11
        mid = (lo + hi) / 2
        low, high = interval_at(mid)
        excludes = np.where(sign[:, 0] > 0, low > 0, high < 0)[:, None]
        lo, hi = np.where(excludes, mid, lo), np.where(excludes, hi, mid)
    return lo[:, 0]


def stopped_mover(
    contrasts: Sequence[Sequence[Reading]], bounds: CellBounds, confidence: float = CONFIDENCE
) -> tuple[list[Interval], np.ndarray]:
    """Each contrast (a signed sum of cell rates) read off its cells' own intervals, as the cell
    table states them (`bounds`: clustered.cell_bounds, anytime-valid for a cell an adaptive rule
    stopped early; passed in, so this module stays below clustered), combined by MOVER: its
    interval at `confidence` and its two-sided p (1 - the largest confidence whose interval excludes 0).

    Why: a rule that stops a cell on its data stops it where its rate looks decided, so a
    fixed-sample interval of that rate is too narrow at the stop and a factor effect between
    stopped cells and cells that ran on is called too often (A/A reports of an adaptive run named a
    finding in 6.0% of runs, bench/bench_adaptive_honesty.py). A confidence sequence holds at any
    stop, so the contrast built on it does too, as far as MOVER's combination of the cells' limits
    holds. A reading: term = (k, n, weight, m, stopped), m the cell's interval inflation."""
    if not contrasts:
        return [], np.zeros(0)
    width = max(len(c) for c in contrasts)
    shape = (len(contrasts), width)
    k, n, w, m, stopped = np.zeros(shape), np.ones(shape), np.zeros(shape), np.ones(shape), np.zeros(shape, dtype=bool)
    for i, terms in enumerate(contrasts):
        for j, (kk, nn, ww, mm, ss) in enumerate(terms):
            k[i, j], n[i, j], w[i, j], m[i, j], stopped[i, j] = kk, nn, ww, mm, ss

    def interval_at(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        low, high = bounds(k, n, m, np.broadcast_to(z, shape), stopped)
        return _combine(k / n, low, high, w)[1:]

    est = np.sum(w * k / n, axis=1)
    z = dist.norm_ppf(0.5 + confidence / 2)
    low, high = interval_at(np.full((len(contrasts), 1), z))
    p = np.where(np.abs(est) < 1e-12, 1.0, np.minimum(2.0 * dist.norm_sf(_largest_z(est, interval_at)), 1.0))
    intervals = [Interval(float(e), float(lo), float(hi)) for e, lo, hi in zip(est, low, high, strict=True)]
    return intervals, p


def _arrays(contrasts: Sequence[Sequence[tuple[float, float, float]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pad to one (contrasts x terms) array each; padding is 0/1 with weight 0 (adds nothing)."""
    width = max(len(c) for c in contrasts)
    k, n, w = np.zeros((len(contrasts), width)), np.ones((len(contrasts), width)), np.zeros((len(contrasts), width))
    for i, terms in enumerate(contrasts):
        for j, (kk, nn, ww) in enumerate(terms):
            k[i, j], n[i, j], w[i, j] = kk, nn, ww
    return k, n, w


def _mover(k: np.ndarray, n: np.ndarray, w: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MOVER-Wilson (Zou & Donner 2008) for sum(w * k/n), one z per row; Wilson in closed form
    (the same as statsmodels' method="wilson", exact at 0 and n events)."""
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    low = np.where(k == 0, 0.0, np.maximum(center - half, 0.0))
    high = np.where(k == n, 1.0, np.minimum(center + half, 1.0))
    return _combine(p, low, high, w)


def _combine(
    p: np.ndarray, low: np.ndarray, high: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MOVER: the weighted sum of the terms' rates p and its limits from each term's (low, high)."""
    term, a, b = w * p, w * low, w * high
    est = term.sum(axis=1)
    down = np.sqrt(((term - np.minimum(a, b)) ** 2).sum(axis=1))
    up = np.sqrt(((np.maximum(a, b) - term) ** 2).sum(axis=1))
    return est, est - down, est + up


# ----------------------------------------------------------------------------- numbers


def number_effects(
    cells: Sequence[CellValues],
    factors: Mapping[str, Sequence[str]],
    reference: Mapping[str, str],
    confidence: float = CONFIDENCE,
) -> list[ShiftEffect]:
    """Main effect of each factor's non-reference level on a numeric metric, over the strata
    (levels of the other factors) where both levels were observed.

    When every stratum holds the same share of each side's trials (a balanced design), pooling
    the values adds noise but no bias, and the pooled Mann-Whitney test with its exact interval
    is used. Otherwise (adaptive stopping, exhausted retries) pooling confounds the factor with
    the strata that ran more often, so each stratum weighs the same: van Elteren's stratified
    rank-sum test (see _stratified_effect)."""
    found = []
    for factor, levels in factors.items():
        ref = reference.get(factor, levels[0] if levels else "")
        for level in (lv for lv in levels if lv != ref):
            effect = _number_effect(cells, factor, ref, level, confidence)
            if effect is not None:
                found.append(effect)
    return found


Stratum = tuple[np.ndarray, np.ndarray]  # (level's values, reference's values) in one stratum


def balanced(counts: Sequence[tuple[int, int]]) -> bool:
    """Does every stratum hold the same share of the level's trials as of the reference's?
    counts: (level's trials, reference's trials) per stratum where both were observed."""
    total_level, total_ref = sum(m for m, _ in counts), sum(r for _, r in counts)
    return all(m * total_ref == r * total_level for m, r in counts)


def _number_effect(
    cells: Sequence[CellValues], factor: str, ref: str, level: str, confidence: float
) -> ShiftEffect | None:
    strata: dict[tuple[tuple[str, str], ...], dict[str, list[float]]] = {}
    for cell in cells:
        value = cell.levels.get(factor)
        if value not in (ref, level) or not cell.values:
            continue
        stratum = tuple(sorted((f, v) for f, v in cell.levels.items() if f != factor))
        strata.setdefault(stratum, {}).setdefault(str(value), []).extend(cell.values)
    matched = [(np.array(s[level]), np.array(s[ref])) for s in strata.values() if ref in s and level in s]
    if not matched:
        return None
    if not balanced([(x.size, y.size) for x, y in matched]):
        return _stratified_effect(matched, factor, ref, level, confidence)
    x = np.concatenate([x for x, _ in matched])
    y = np.concatenate([y for _, y in matched])
    return ShiftEffect(
        factor=factor,
        reference=ref,
        level=level,
        median_level=float(np.median(x)),
        median_reference=float(np.median(y)),
        n_level=int(x.size),
        n_reference=int(y.size),
        shift=ranks.shift_interval(x, y, confidence),
        p=ranks.mann_whitney(x, y),
        strata=len(matched),
    )


def _stratified_effect(matched: Sequence[Stratum], factor: str, ref: str, level: str, confidence: float) -> ShiftEffect:
    """The effect with every stratum weighed the same, whatever its trial counts.

    Medians: of the equal-weight mixture of the strata (each stratum's values weigh 1/its count).
    p: van Elteren's stratified rank-sum test (1960), the sum over strata of Mann-Whitney U
    divided by the stratum's size plus one (stratified_p: exact for small strata).
    Shift and interval: the Hodges-Lehmann estimate and interval that invert that same test:
    the weighted median and quantiles of the within-stratum differences (weight 1/(N_s + 1)),
    with the exact coverage, or none stated when it is the normal approximation's."""
    return ShiftEffect(
        factor=factor,
        reference=ref,
        level=level,
        median_level=_mixture_median([x for x, _ in matched]),
        median_reference=_mixture_median([y for _, y in matched]),
        n_level=sum(int(x.size) for x, _ in matched),
        n_reference=sum(int(y.size) for _, y in matched),
        shift=stratified_shift(matched, confidence),
        p=stratified_p(matched),
        strata=len(matched),
        stratified=True,
    )


def van_elteren(strata: Sequence[Stratum]) -> float:
    """Two-sided p of van Elteren's test that the level's values are not shifted from the
    reference's within strata, by the normal approximation with ties corrected (no continuity
    correction); 1.0 when no stratum has any spread (every value tied). Holds its level for large
    strata only: stratified_p uses van_elteren_exact for small ones."""
    stat = mean = var = 0.0
    for x, y in strata:
        m, r = x.size, y.size
        n = m + r
        pooled = np.concatenate([x, y])
        ranked = ranks.midranks(pooled)
        u = float(ranked[:m].sum()) - m * (m + 1) / 2.0
        tie = ranks.tie_term(pooled) / (n * (n - 1)) if n > 1 else 0.0
        stat += u / (n + 1)
        mean += m * r / 2.0 / (n + 1)
        var += m * r * ((n + 1) - tie) / 12.0 / (n + 1) ** 2
    if var <= 0:
        return 1.0
    return min(1.0, 2.0 * float(dist.norm_sf(abs(stat - mean) / math.sqrt(var))))


def stratified_p(strata: Sequence[Stratum]) -> float:
    """Two-sided p of van Elteren's test: exact while the within-stratum relabellings can be
    enumerated, else the normal approximation (large strata, where it holds). With strata of 1 vs
    2 and 2 vs 2 trials the approximation rejected a true null 11% of the time at p < 0.05."""
    steps = ranks.stratified_steps(_sizes(strata))
    return van_elteren(strata) if steps is None else van_elteren_exact(strata, steps)


def van_elteren_exact(strata: Sequence[Stratum], steps: Sequence[int]) -> float:
    """Exact two-sided p of van Elteren's statistic: 2 x the smaller tail of its distribution over
    every relabelling within strata, given the values (midranks; the null is conditional on the
    ties), on the integer lattice of ranks.stratified_steps."""
    observed, ranked = 0, []
    for (x, y), step in zip(strata, steps, strict=True):
        pooled = np.concatenate([x, y])
        doubled = np.rint(2.0 * ranks.midranks(pooled)).astype(np.int64)  # midranks are halves
        observed += step * (int(doubled[: x.size].sum()) - x.size * (x.size + 1))
        ranked.append((doubled, x.size, y.size, np.unique(pooled).size < pooled.size))
    if not any(tied for *_, tied in ranked):  # the null depends on the sizes alone (cached)
        return ranks.untied_null(_sizes(strata)).p_two_sided(observed)
    pmfs = [ranks.tied_pmf(d, m) if tied else ranks.untied_pmf(m, r) for d, m, r, tied in ranked]
    return ranks.stratified_null(pmfs, steps).p_two_sided(observed)


def stratified_shift(strata: Sequence[Stratum], confidence: float) -> ranks.CoveredInterval:
    """Weighted Hodges-Lehmann shift (level - reference) with the interval inverting van Elteren's
    test: the shifts d at which the weighted count of differences above d is not rejected.

    Small strata: the exact test, and the exact coverage of the shifts it accepts (none when no
    set reaches `confidence`: strata of 1 vs 2 and 2 vs 2 trials give at most 88.9%, where the
    normal approximation stated 95% and covered 89%). Large strata: the normal approximation,
    its coverage left unstated (CoveredInterval.approximate)."""
    steps = ranks.stratified_steps(_sizes(strata))
    if steps is None:
        return _approximate_shift(strata, confidence)
    d, w, stratum = _differences(strata, None)
    estimate = _weighted_quantile(d, w, float(w.sum()) / 2.0, middle=True)
    accepted = ranks.untied_null(_sizes(strata)).acceptance(1.0 - confidence)  # at the true shift: no ties
    if accepted is None:
        return ranks.CoveredInterval(estimate, None, None, None)
    lowest, highest, coverage = accepted
    units = (2 * np.asarray(steps, dtype=np.int64))[stratum]  # one difference above d adds 2 steps
    # d is accepted while lowest <= (units of differences above d) <= highest
    low = d[int(np.searchsorted(np.cumsum(units), int(units.sum()) - highest, side="left"))]
    high = d[::-1][int(np.searchsorted(np.cumsum(units[::-1]), lowest, side="left"))]
    return ranks.CoveredInterval(estimate, float(low), float(high), coverage)


def _approximate_shift(strata: Sequence[Stratum], confidence: float) -> ranks.CoveredInterval:
    """stratified_shift by the normal approximation: the weighted count of differences above d
    within z standard deviations of its null mean. Sides are subsampled (seeded) so that all strata
    together hold about as many differences as ranks.shift_interval allows one pair of groups."""
    d, w, _ = _differences(strata, max(2, ranks.MAX_SIDE // len(strata)))
    var = sum(x.size * y.size * (x.size + y.size + 1) / 12.0 / (x.size + y.size + 1) ** 2 for x, y in strata)
    half = float(w.sum()) / 2.0
    estimate = _weighted_quantile(d, w, half, middle=True)
    reach = float(dist.norm_ppf(0.5 + confidence / 2)) * math.sqrt(var)
    if half - reach <= 0:
        return ranks.CoveredInterval(estimate, None, None, None)
    low = _weighted_quantile(d, w, half - reach)
    high = -_weighted_quantile(-d[::-1], w[::-1], half - reach)
    return ranks.CoveredInterval(estimate, low, high, None)  # coverage ~confidence, not known exactly


def _differences(strata: Sequence[Stratum], cap: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The within-stratum differences x - y sorted, each with its van Elteren weight 1/(N_s + 1) (a
    subsampled stratum's weigh as all its pairs) and its stratum. cap: values kept per side."""
    diffs, weights, index = [], [], []
    for s, (x, y) in enumerate(strata):
        a, b = (x, y) if cap is None else (_subsample(x, cap), _subsample(y, cap))
        d = np.subtract.outer(a, b).ravel()
        diffs.append(d)
        weights.append(np.full(d.size, (x.size * y.size / d.size) / (x.size + y.size + 1)))
        index.append(np.full(d.size, s))
    d, w, stratum = np.concatenate(diffs), np.concatenate(weights), np.concatenate(index)
    order = np.argsort(d, kind="stable")
    return d[order], w[order], stratum[order]


def _sizes(strata: Sequence[Stratum]) -> tuple[tuple[int, int], ...]:
    return tuple((int(x.size), int(y.size)) for x, y in strata)


def _subsample(values: np.ndarray, cap: int) -> np.ndarray:
    return values if values.size <= cap else np.random.default_rng(0).choice(values, cap, replace=False)


def _weighted_quantile(d: np.ndarray, w: np.ndarray, target: float, middle: bool = False) -> float:
    """The smallest sorted value whose cumulative weight reaches target (within rounding); with
    middle, the midpoint when target falls exactly between two values (as a median of an even count)."""
    cum = np.cumsum(w)
    tol = 1e-9 * float(cum[-1])
    i = min(int(np.searchsorted(cum, target - tol)), d.size - 1)
    if middle and abs(float(cum[i]) - target) <= tol and i + 1 < d.size:
        return float((d[i] + d[i + 1]) / 2.0)
    return float(d[i])


def _mixture_median(groups: Sequence[np.ndarray]) -> float:
    """Median of the mixture giving each group the same weight (a value weighs 1/its group's size)."""
    values = np.concatenate(groups)
    weights = np.concatenate([np.full(g.size, 1.0 / g.size) for g in groups])
    order = np.argsort(values, kind="stable")
    return _weighted_quantile(values[order], weights[order], float(weights.sum()) / 2.0, middle=True)


# ----------------------------------------------------------------------------- the policy


def adjust(pvalues: Mapping[K, float]) -> dict[K, float]:
    """Holm over the whole family: every test the report could call a finding, once each, every
    metric together (per-metric families would let a report with three metrics err up to three
    times alpha)."""
    keys = list(pvalues)
    return dict(zip(keys, holm([pvalues[k] for k in keys]), strict=True)) if keys else {}


FAMILY_PARTS = (
    "each cell vs the baseline",
    "each factor's main effect",
    "its conditional effects (another factor held fixed)",
    "every two-way interaction",
    "every three-way interaction",
    "the numeric effects",
    "the highest cell vs each cell one factor away",
)


def policy_sentence(
    tests: Mapping[str, int], alpha: float = ALPHA, *, lead: str = "", parts: Sequence[str] = FAMILY_PARTS
) -> str:
    """The one sentence the report states its multiplicity policy in (tests: family size per metric).
    `lead`: a finding the policy does not cover, said first (a hunt's verdict rests on its own rule);
    the policy then speaks of every other finding. `parts`: the kinds of test the family holds
    (core.family.parts; FAMILY_PARTS' wording and order), so a 2-factor run's sentence names no
    three-way interaction and a proportion-only run's no numeric effect."""
    sizes = ", ".join(f"{metric}: {n}" for metric, n in tests.items() if n)
    subject = f"{lead}; every other finding" if lead else "Every finding"
    scope = "among them" if lead else "anywhere in the report"
    return (
        f"{subject} survives Holm's correction over all the tests this report could call a finding, "
        f"every metric in one family ({sum(tests.values())} tests; {sizes}; {', '.join(parts)}), so the chance "
        f"of any false finding {scope} is at most {alpha:g}; raw 95% intervals are exploratory."
    )


def is_finding(p_holm: float | None, alpha: float = ALPHA) -> bool:
    return p_holm is not None and not math.isnan(p_holm) and p_holm < alpha
