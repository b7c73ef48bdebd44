"""The definitions the fast paths of core.findings and core.power replaced, kept verbatim (not a
test module): tests/test_stats_fast_paths.py checks the fast paths give the same results, and
bench/bench_plan.py times both in one run.

- grid_terms: findings._Grid.terms as of 0276250 (strata by np.unique(axis=0) over rows, each
  (factor, level) mask computed per call).
- report_dispersion: report.build._dispersion as of 0276250 (the cells by pandas groupby).
- calibration_pvalue: trialexact.Calibration.pvalue as of 0276250 (every value searched in every row).
- quasi_reject: power._QuasiSim.reject as of 0276250 (clustered.cell_spread of every cell, the
  fixed ones included, at every bisection step).
- full_quantile_counts, FullQuantileSim, quasi_detectable_full_quantiles: power._QuasiSim's
  counts of the compared cell as of 7556b0b (every trial's beta quantile at every bisection step,
  before cell_counts' grid); bench/bench_power_speed.py times them beside the grid.
- homogeneity_null: stats._homogeneity_null as of d0e5505 (every table of the null drawn at once:
  draws x trials cells, 500 MB for a cell of 12,500 trials).
- trial_homogeneity: stats.trial_homogeneity as of d023944 (a fixed TRIAL_DRAWS tables for every
  p, numpy's "marginals" sampler, the null drawn in blocks, sorted and cached per design and events);
  bench/bench_homogeneity.py measures the sequential p against it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from orchestrator.core import clustered, findings, power, stats, trialexact

Change = findings.Change


def _is(grid: findings._Grid, factor: str, level: str) -> np.ndarray:
    code = grid.codes.get(factor, {}).get(level)
    if code is None:
        return np.zeros(len(grid.n), dtype=bool)
    return np.asarray(grid.grid[:, grid.columns[factor]] == code)


def grid_terms(
    grid: findings._Grid, changes: Sequence[Change], given: Mapping[str, str]
) -> tuple[list[tuple[float, float, float]], int]:
    rows = grid.n > 0
    for f, v in given.items():
        rows &= _is(grid, f, v)
    corner = np.zeros(len(grid.n), dtype=np.int64)
    for factor, ref, level in changes:
        up = _is(grid, factor, level)
        rows &= up | _is(grid, factor, ref)
        corner = corner * 2 + up
    picked = np.flatnonzero(rows)
    if not len(picked):
        return [], 0
    involved = {grid.columns[f] for f, _, _ in changes if f in grid.columns}
    others = [c for c in range(grid.grid.shape[1]) if c not in involved]
    _, first, stratum = np.unique(grid.grid[picked][:, others], axis=0, return_index=True, return_inverse=True)
    stratum = stratum.reshape(-1)
    counts = np.bincount(stratum)
    rank = np.empty_like(first)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))  # strata by their first cell
    keep = counts[stratum] == 2 ** len(changes)
    full = int(np.count_nonzero(counts == 2 ** len(changes)))
    chosen = picked[keep][np.lexsort((corner[picked[keep]], rank[stratum[keep]]))]
    signs = np.where((len(changes) - findings._bit_counts(corner[chosen])) % 2 == 0, 1.0, -1.0)
    return [
        (grid.k[r], float(grid.n[r]), sign / full) for r, sign in zip(chosen.tolist(), signs.tolist(), strict=True)
    ], full


def contrast_count(
    cells: Sequence[Mapping[str, str]],
    factors: Mapping[str, Sequence[str]],
    reference: Mapping[str, str],
    max_order: int = findings.MAX_ORDER,
) -> int:
    grid = findings._Grid({tuple(sorted(levels.items())): (0, 1) for levels in cells})
    wanted = findings._wanted(factors, reference, max_order)
    return sum(grid_terms(grid, changes, dict(given))[1] > 0 for changes, given in wanted)


def quasi_reject(sim: power._QuasiSim, cell_rate: float, alpha: float) -> np.ndarray:
    rates = sim._trial_rates(cell_rate, sim.trial_u)
    cell_k = (sim.session_u < rates[..., None]).sum(axis=-1).astype(float)
    k = np.concatenate([cell_k[:, None, :], sim.fixed_k], axis=1)
    n = np.full_like(k, float(sim.design.sessions))
    spread = sim.clustered.cell_spread(k, n)
    phi, df = sim.clustered.pooled_dispersion(*spread)
    big_k, big_n = k.sum(axis=-1), n.sum(axis=-1)
    p = sim.clustered.quasi_test(big_k[:, 0], big_n[:, 0], big_k[:, 1], big_n[:, 1], phi, df)
    fisher = df <= 0
    if fisher.any():
        total = int(big_n[0, 0])
        if total <= power.MAX_EXACT_N:
            table = power.fisher_pvalues(total, total)
            p = np.where(fisher, table[big_k[:, 0].astype(int), big_k[:, 1].astype(int)], p)
    sparse = sim.clustered.sparse_sweeps(spread, df)
    if sparse.any():  # phi on too little: the report's p comes from the trial-level test
        from orchestrator.core import trialexact

        design = (sim.design.sessions,) * sim.design.trials
        cal = trialexact.calibration(design, design)
        kc, kb = np.asarray(k[sparse, 0], dtype=np.int64), np.asarray(k[sparse, 1], dtype=np.int64)
        exact = calibration_pvalue(cal, cal.tables.statistic(kc, kb))
        p = p.copy()
        p[sparse] = exact
    return np.asarray(p < alpha)


def quasi_detectable(
    design: power.Design,
    base_rate: float,
    alpha: float = power.ALPHA,
    target: float = power.TARGET_POWER,
    seed: int = 0,
) -> power.Detectable:
    """power.quasi_detectable (uncached) with quasi_reject at each step."""

    def reject(sim: power._QuasiSim, rate: float) -> np.ndarray:
        return quasi_reject(sim, rate, alpha)

    return _solved(power._QuasiSim, reject, design, base_rate, alpha, target, seed)


def _solved(
    sim_class: type[power._QuasiSim],
    reject: Callable[[power._QuasiSim, float], np.ndarray],
    design: power.Design,
    base_rate: float,
    alpha: float,
    target: float,
    seed: int,
) -> power.Detectable:
    """power.quasi_detectable (uncached) on a `sim_class` simulation, `reject(sim, rate)` giving
    each sweep's rejection at a rate; a design too large to simulate as power itself answers it."""
    design = power._bounded(design)
    if power._sweeps(design) < power.SIM_MIN_SWEEPS:
        return power.quasi_detectable.__wrapped__(design, base_rate, alpha, target, seed)
    sim = sim_class(design, base_rate, seed)
    return _bisected(design.sessions * design.trials, base_rate, alpha, target, lambda rate: reject(sim, rate))


def _bisected(
    n: int, base_rate: float, alpha: float, target: float, reject: Callable[[float], np.ndarray]
) -> power.Detectable:
    """power.quasi_detectable's two bisections, `reject` giving each sweep's rejection at a rate."""

    def solve(end: float) -> float | None:
        if base_rate == end or float(np.mean(reject(end))) < target:
            return None
        near, far = base_rate, end
        while abs(far - near) > power.SOLVE_TOLERANCE:
            mid = (near + far) / 2
            near, far = (mid, far) if float(np.mean(reject(mid))) < target else (near, mid)
        return abs(far - base_rate)

    return power.Detectable(n, n, base_rate, alpha, target, solve(1.0), solve(0.0))


def full_quantile_counts(sim: power._QuasiSim, cell_rate: float) -> np.ndarray:
    """The compared cell's counts as power._QuasiSim._pvalues drew them at 7556b0b: every
    trial's beta quantile, then #(session uniforms < it)."""
    rates = sim._trial_rates(cell_rate, sim.trial_u)
    return np.asarray((sim.session_u < rates[..., None]).sum(axis=-1))


class FullQuantileSim(power._QuasiSim):
    """power._QuasiSim as of 7556b0b: the same seeded draws, every trial's quantile at every step."""

    def cell_counts(self, cell_rate: float) -> np.ndarray:
        return full_quantile_counts(self, cell_rate)


def quasi_detectable_full_quantiles(
    design: power.Design,
    base_rate: float,
    alpha: float = power.ALPHA,
    target: float = power.TARGET_POWER,
    seed: int = 0,
) -> power.Detectable:
    """power.quasi_detectable as of 7556b0b (uncached): its bisections on a FullQuantileSim."""
    return _solved(FullQuantileSim, lambda sim, rate: sim.reject(rate, alpha), design, base_rate, alpha, target, seed)


def calibration_pvalue(cal: trialexact.Calibration, t: np.ndarray) -> np.ndarray:
    """trialexact.Calibration.pvalue as of 0276250: every value looked up in every row."""
    values = np.asarray(t, dtype=float)
    flat = values.ravel() - trialexact.TOLERANCE * (1 + np.abs(np.nan_to_num(values.ravel(), neginf=0.0)))
    out = np.zeros(flat.shape)
    for rows, factor in ((cal.near, 1.0), (cal.far, trialexact.FAR_FACTOR)):
        draws = rows.shape[1]
        for row in rows:
            tail = (draws - np.searchsorted(row, flat, side="left") + 1) / (draws + 1)
            out = np.maximum(out, tail / factor)
    p: np.ndarray = np.where(np.isneginf(values.ravel()), 1.0, np.minimum(out, 1.0)).reshape(values.shape)
    return p


def report_dispersion(rows: pd.DataFrame) -> clustered.Dispersion:
    """report.build._dispersion as of 0276250: the cells by pandas groupby."""
    return clustered.dispersion(
        [list(zip(g.k.astype(int), g.n.astype(int), strict=True)) for _, g in rows.groupby("cell", sort=False)]
    )


def homogeneity_null(sessions: tuple[int, ...], events: int, draws: int) -> np.ndarray:
    rng = np.random.default_rng(stats.TRIAL_SEED)
    n = np.array(sessions, dtype=np.int64)
    total = int(n.sum())
    if total < stats.HYPERGEOMETRIC_MAX:
        tables = rng.multivariate_hypergeometric(n, events, size=draws)
    else:
        tables = rng.multinomial(events, n / total, size=draws)
    out: np.ndarray = np.sort(stats._spread(tables, n, events / total))
    return out


def trial_homogeneity(counts: Sequence[tuple[int, int]], draws: int = 5000) -> float | None:
    """stats.trial_homogeneity as of d023944: (1 + as extreme) / (1 + draws) over a fixed `draws`."""
    kept = [(k, n) for k, n in counts if n > 0]
    k = np.array([c[0] for c in kept], dtype=np.int64)
    n = np.array([c[1] for c in kept], dtype=np.int64)
    events, sessions = int(k.sum()), int(n.sum())
    if len(kept) < 2 or events == 0 or events == sessions:
        return None
    expected = n * events / sessions
    if min(expected.min(), (n - expected).min()) >= stats.MIN_EXPECTED:
        return stats.heterogeneity(kept)
    if len(kept) == 2:
        return stats.pooled_test(int(k[0]), int(n[0]), int(k[1]), int(n[1])).p
    null = _homogeneity_null_blocks(tuple(n.tolist()), events, draws)
    observed = stats._spread(k, n, events / sessions)
    extreme = null.size - int(np.searchsorted(null, observed * (1 - 1e-9), side="left"))
    return (1 + extreme) / (1 + draws)


@functools.lru_cache(maxsize=256)
def _homogeneity_null_blocks(sessions: tuple[int, ...], events: int, draws: int) -> np.ndarray:
    rng = np.random.default_rng(stats.TRIAL_SEED)
    n = np.array(sessions, dtype=np.int64)
    total = int(n.sum())
    spreads = np.empty(draws, dtype=np.float64)
    block = max(1, (1 << 20) // len(n))
    for start in range(0, draws, block):
        size = min(block, draws - start)
        if total < stats.HYPERGEOMETRIC_MAX:
            tables = rng.multivariate_hypergeometric(n, events, size=size)
        else:
            tables = rng.multinomial(events, n / total, size=size)
        spreads[start : start + size] = stats._spread(tables, n, events / total)
    spreads.sort()
    spreads.flags.writeable = False
    return spreads
