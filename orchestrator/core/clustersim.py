"""Simulated sweeps whose trials vary (beta-binomial), analysed the old way and the clustered way.

Why here and not in a test: the simulation test (tests/test_clustered_stats.py) pins the error
rates and bench/bench_stats.py prints the full table; both must run the same simulation through
the same decision code the report and the runner use (orchestrator.core.clustered and
orchestrator.core.sequential), so it lives once, in the core. Pure: numpy in, numpy out, seeded
by the caller's Generator; vectorised over simulated sweeps.

A sweep has C cells (cell 0 is the baseline), T trials per cell of n sessions. A trial's rate is
drawn from Beta with mean p and intra-trial correlation icc (icc = 0: every trial at p), then
k ~ Binomial(n, rate): the variance of k is n p (1 - p) (1 + (n - 1) icc).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from orchestrator.core import clustered, power, sequential, stats, trialexact

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def beta_binomial_trials(
    rng: np.random.Generator, sweeps: int, rates: Sequence[float], trials: int, sessions: int, icc: float
) -> IntArray:
    """k of shape (sweeps, cells, trials): events per trial, trials varying with correlation icc."""
    p = np.broadcast_to(np.asarray(rates, dtype=float)[None, :, None], (sweeps, len(rates), trials))
    if icc > 0:
        inside = p[(p > 0) & (p < 1)]
        scale = (1 - icc) / icc
        drawn = rng.beta(np.maximum(inside, 1e-12) * scale, np.maximum(1 - inside, 1e-12) * scale)
        p = p.copy()
        p[(p > 0) & (p < 1)] = drawn
    out: IntArray = rng.binomial(sessions, p).astype(np.int64)
    return out


def unique_rows(rows: IntArray) -> tuple[IntArray, IntArray]:
    """np.unique(rows, axis=0, return_inverse=True) with the inverse flat: the same rows in the
    same (lexicographic) order, found as one int64 key per row when the columns' ranges fit in
    63 bits (np.unique over axis 0 sorts a structured view, several times slower), else by numpy's."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.ndim == 2 and rows.shape[0] and rows.shape[1]:
        low, high = rows.min(axis=0), rows.max(axis=0)
        spans = [int(h) - int(lo) + 1 for lo, h in zip(low, high, strict=True)]
        if np.prod([float(x) for x in spans]) < 2.0**62:
            key = np.zeros(rows.shape[0], dtype=np.int64)
            for column, span in enumerate(spans):  # row order == key order: column 0 is the most significant
                key = key * span + (rows[:, column] - low[column])
            _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
            return rows[first], inverse.ravel().astype(np.int64)
    unique, inverse = np.unique(rows, axis=0, return_inverse=True)
    return unique, inverse.ravel().astype(np.int64)


@lru_cache(maxsize=65536)
def _fisher(k1: int, n1: int, k2: int, n2: int) -> float:
    return stats.fisher_exact(k1, n1, k2, n2)


def fisher_p(k1: IntArray, n1: IntArray, k2: IntArray, n2: IntArray) -> npt.NDArray[np.float64]:
    """Fisher's exact p on summed counts, elementwise.

    Looked up in power.fisher_pvalues' table of every (k1, k2) of a design (the same p as
    scipy's fisher_exact to 1e-9: tests/test_power.py checks it), one table per distinct (n1, n2);
    scipy per distinct table beyond power.MAX_EXACT_N sessions a side."""
    shape = np.broadcast_shapes(k1.shape, n1.shape, k2.shape, n2.shape)
    a, b, c, d = (np.broadcast_to(x, shape).ravel().astype(np.int64) for x in (k1, n1, k2, n2))
    out = np.empty(a.shape, dtype=float)
    sizes, which = unique_rows(np.stack([b, d], axis=1))
    for i, (size1, size2) in enumerate(sizes):
        rows = which == i
        if max(size1, size2) <= power.MAX_EXACT_N and min(size1, size2) >= 0:
            out[rows] = power.fisher_pvalues(int(size1), int(size2))[a[rows], c[rows]]
            continue
        unique, inverse = unique_rows(np.stack([a[rows], c[rows]], axis=1))
        values = np.array([_fisher(int(x), int(size1), int(y), int(size2)) for x, y in unique])
        out[rows] = values[inverse]
    return out.reshape(shape)


def cell_p_values(
    k: IntArray, sessions: int, with_old: bool = True, cells: slice = slice(1, None)
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(old, new) p of the non-baseline cells `cells` vs the baseline, shape (sweeps, len(cells)).

    old: Fisher on the summed counts (the report before the trial became the unit). new: what
    the report does now: the quasi-binomial test with phi pooled over ALL the sweep's cells,
    the trial-level test (core.trialexact) where phi rests on too little (clustered.sparse),
    Fisher where phi cannot be estimated. with_old=False skips the old p (nan) where new does
    not need it (Fisher is the slow part).
    """
    n = np.full_like(k, sessions)
    big_k, big_n = k.sum(axis=-1), n.sum(axis=-1)
    spread = clustered.cell_spread(k, n)
    phi, df = clustered.pooled_dispersion(*spread)
    kc, nc, kb, nb = big_k[:, cells], big_n[:, cells], big_k[:, :1], big_n[:, :1]
    quasi = clustered.quasi_test(kc, nc, kb, nb, phi[:, None], df[:, None])
    rows = np.ones(k.shape[0], dtype=bool) if with_old else df <= 0
    old = np.full(quasi.shape, np.nan)
    if rows.any():
        old[rows] = fisher_p(kc[rows], nc[rows], kb[rows], nb[rows])
    new = np.where(df[:, None] > 0, quasi, old)
    sparse = clustered.sparse_sweeps(spread, df)
    if sparse.any():
        trials = k[sparse][:, cells]
        base = np.broadcast_to(k[sparse][:, :1], trials.shape)
        design = (sessions,) * k.shape[-1]
        new[sparse] = trialexact.calibration(design, design).pvalues(trials, base)
    return old, new


def adaptive_different(
    k: IntArray, sessions: int, policy: sequential.SequentialPolicy, clustered_rule: bool
) -> BoolArray:
    """Which non-baseline cells adaptive stopping calls "different", shape (sweeps, cells - 1)
    (adaptive_replay)."""
    return adaptive_replay(k, sessions, policy, clustered_rule)[0]


def adaptive_replay(
    k: IntArray, sessions: int, policy: sequential.SequentialPolicy, clustered_rule: bool
) -> tuple[BoolArray, BoolArray]:
    """Which non-baseline cells adaptive stopping calls "different", shape (sweeps, cells - 1), and
    which trials ran, shape (sweeps, cells, trials): what the report's fixed analysis then sees.

    Replays what sweep.adaptive.AdaptiveSource does before each round r = 1 .. T-1 with the
    paired rounds before r: clustered_rule=False is the old rule (a look from one round on,
    sessions independent); True the new one (a look from two rounds on, sessions weighed by the
    variance inflation estimated from every cell's trials of those rounds). A cell stops at its
    first decision (either state), as in the runner.
    """
    sweeps, cells, trials = k.shape
    n = np.full_like(k, sessions)
    log_ratio = np.zeros((sweeps, cells - 1, sequential.mixture_size(policy.effect)))
    log_up = np.zeros((sweeps, cells - 1))
    log_down = np.zeros((sweeps, cells - 1))
    open_ = np.ones((sweeps, cells - 1), dtype=bool)
    ran = np.ones((sweeps, cells), dtype=bool)[..., None].repeat(trials, axis=-1)  # a decided cell runs no more
    different = np.zeros((sweeps, cells - 1), dtype=bool)
    for r in range(1, trials):  # the look before round r sees rounds 0 .. r-1
        _add_round(policy.effect, k[:, :, :r], sessions, log_ratio, log_up, log_down)
        if clustered_rule and r < 2:
            continue
        m = np.ones(sweeps)
        if clustered_rule:  # the spread of the trials that ran, every cell pooled
            seen = ran[:, :, :r]
            m = clustered.inflation(
                *clustered.pooled_dispersion(*clustered.cell_spread(k[:, :, :r] * seen, n[:, :, :r] * seen))
            )
        state = _states(policy, r, log_ratio, log_up, log_down, m)
        different |= open_ & (state == "different")
        open_ &= state == "continue"
        ran[:, 1:, r] = open_
        ran[:, 0, r] = open_.any(axis=1)
    return different, ran


def _add_round(
    effect: float, k: IntArray, sessions: int, log_ratio: np.ndarray, log_up: np.ndarray, log_down: np.ndarray
) -> None:
    """Add the last round of k (sweeps, cells, r) to every cell's running evidence, in place.

    Each distinct (history, round) is computed once through sequential's own functions."""
    kc = k[:, 1:, -1]
    kb = np.broadcast_to(k[:, :1, -1], kc.shape)
    before_c = k[:, 1:, :-1].sum(axis=-1)
    before_b = np.broadcast_to(k[:, :1, :-1].sum(axis=-1), kc.shape)
    done = (k.shape[-1] - 1) * sessions
    rows = np.stack([kc.ravel(), kb.ravel(), before_c.ravel(), before_b.ravel()], axis=1)
    unique, inverse = unique_rows(rows)
    rounds, which = unique_rows(unique[:, :2])
    ratios = np.array([sequential.round_log_ratios(effect, int(c), sessions, int(b), sessions) for c, b in rounds])
    size = len(unique)
    before = (unique[:, 2], np.full(size, done), unique[:, 3], np.full(size, done))
    now = (unique[:, 0], np.full(size, sessions), unique[:, 1], np.full(size, sessions))
    up, down = sequential.equivalence_rounds_batch(effect, before, now)
    bets = np.stack([up, down], axis=1)
    log_ratio += ratios[which[inverse]].reshape(log_ratio.shape)
    log_up += bets[inverse, 0].reshape(log_up.shape)
    log_down += bets[inverse, 1].reshape(log_down.shape)


def _states(
    policy: sequential.SequentialPolicy,
    rounds: int,
    log_ratio: np.ndarray,
    log_up: np.ndarray,
    log_down: np.ndarray,
    m: np.ndarray,
) -> npt.NDArray[np.str_]:
    lower, higher = sequential.mixture_e_values(policy.effect, log_ratio, m[:, None])
    evidence = {"both": lower + higher, "lower": 2.0 * lower, "higher": 2.0 * higher}[policy.direction]
    up, down = np.exp(np.minimum(log_up / m[:, None], 700.0)), np.exp(np.minimum(log_down / m[:, None], 700.0))
    ruled_out = {"both": np.minimum(up, down), "lower": down, "higher": up}[policy.direction]
    out: npt.NDArray[np.str_] = sequential.stop_states(policy, rounds, evidence, ruled_out)
    return out
