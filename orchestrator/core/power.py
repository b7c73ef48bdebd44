"""Power of the design as run: exact, for the test the report uses (PURE).

Why: the old figure came from the arcsine normal approximation, which hits a cap at a 0%
baseline and printed "80% power only for differences of about 1.0 points" for 0/80 sessions,
where the true figure is about 10 points. Here power is exact: the two-sided Fisher test's
rejection region over every (k1, k2) table is computed once per design (n1, n2, alpha), and the
power for any pair of true rates is the binomial probability of landing in it. The difference
with 80% power is then solved in both directions (a rise and a fall from the baseline rate).

Numeric metrics are compared with Mann-Whitney, whose smallest two-sided p with m and n values
is 2/C(m+n, m) (ranks.mann_whitney_min_p): with 2 trials per cell it is 0.33, so a cell can never
differ significantly from the baseline however large the difference. plan and report say so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import gammaln

from orchestrator.core import dist
from orchestrator.core.stats import ALPHA

TARGET_POWER = 0.8
MAX_EXACT_N = 500  # sessions per side for the exact grid (0.2 s); beyond it the arcsine approximation (< 1 pt off)
_REL_ERR = 1 + 1e-7  # as scipy's fisher_exact: tables this close in probability count as "as extreme"


@lru_cache(maxsize=64)
def fisher_pvalues(n1: int, n2: int) -> np.ndarray:
    """Two-sided Fisher exact p of every table k1/n1 vs k2/n2, as an (n1+1) x (n2+1) array.

    For each margin t = k1 + k2, k1 is hypergeometric; p sums the probabilities of every table
    no more likely than the observed one (the same rule as scipy.stats.fisher_exact)."""
    if n1 < 0 or n2 < 0 or max(n1, n2) > MAX_EXACT_N:
        raise ValueError(f"fisher_pvalues: n1={n1}, n2={n2} outside 0..{MAX_EXACT_N}")
    table = np.ones((n1 + 1, n2 + 1))
    for t in range(n1 + n2 + 1):
        k1 = np.arange(max(0, t - n2), min(n1, t) + 1)
        pmf = _hypergeom_pmf(k1, n1, n2, t)
        ordered = np.sort(pmf)
        upto = np.searchsorted(ordered, pmf * _REL_ERR, side="right")  # tables no more likely
        table[k1, t - k1] = np.minimum(1.0, np.concatenate([[0.0], np.cumsum(ordered)])[upto])
    return table


def _hypergeom_pmf(k1: np.ndarray, n1: int, n2: int, t: int) -> np.ndarray:
    """P(k1 | margins) = C(n1, k1) C(n2, t - k1) / C(n1 + n2, t), in logs (scipy's pmf is slow per call)."""
    log = _log_comb(n1, k1) + _log_comb(n2, t - k1) - _log_comb(n1 + n2, np.array([t]))
    return np.asarray(np.exp(log), dtype=float)


def _log_comb(n: int, k: np.ndarray) -> np.ndarray:
    return np.asarray(gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1), dtype=float)


def fisher_power(n1: int, n2: int, p1: float, p2: float, alpha: float = ALPHA) -> float:
    """Probability that two-sided Fisher rejects (p < alpha) for true rates p1 (n1) and p2 (n2)."""
    reject = fisher_pvalues(n1, n2) < alpha
    return float(_binom_pmf(n1, p1) @ reject @ _binom_pmf(n2, p2))


def _binom_pmf(n: int, p: float) -> np.ndarray:
    """Binomial pmf over 0..n in logs (exact at p = 0 and 1; scipy's per-call overhead is 1 ms)."""
    k = np.arange(n + 1)
    if p <= 0.0 or p >= 1.0:
        return np.asarray(k == (0 if p <= 0.0 else n), dtype=float)
    return np.asarray(np.exp(_log_comb(n, k) + k * np.log(p) + (n - k) * np.log1p(-p)), dtype=float)


@dataclass(frozen=True)
class Detectable:
    """The smallest rise and fall from `baseline` detected with `power` (None: not even 0%/100%)."""

    n_cell: int
    n_baseline: int
    baseline: float
    alpha: float
    power: float
    rise: float | None  # rate points, cell rate - baseline rate
    fall: float | None  # rate points, baseline rate - cell rate


def detectable(
    n_cell: int, n_baseline: int, baseline: float, alpha: float = ALPHA, power: float = TARGET_POWER
) -> Detectable:
    """Differences from `baseline` that Fisher (cell vs baseline, at `alpha`) detects with `power`."""
    if not 0.0 <= baseline <= 1.0:
        raise ValueError(f"detectable: baseline rate {baseline} not in [0, 1]")
    if max(n_cell, n_baseline) > MAX_EXACT_N:
        rise, fall = _approximate(n_cell, n_baseline, baseline, alpha, power)
    else:
        rise = _solve(n_cell, n_baseline, baseline, 1.0, alpha, power)
        fall = _solve(n_cell, n_baseline, baseline, 0.0, alpha, power)
    return Detectable(n_cell, n_baseline, baseline, alpha, power, rise, fall)


def _approximate(n1: int, n2: int, p0: float, alpha: float, power: float) -> tuple[float | None, float | None]:
    """Arcsine (Cohen's h) normal approximation, each direction on its own (no cap mixing them):
    good to a fraction of a point with more than a thousand sessions per side."""
    h = (float(dist.norm_ppf(1 - alpha / 2)) + float(dist.norm_ppf(power))) * math.sqrt((1 / n1 + 1 / n2) / 4)
    angle = math.asin(math.sqrt(p0))
    rise = math.sin(angle + h) ** 2 - p0 if angle + h < math.pi / 2 else None
    fall = p0 - math.sin(angle - h) ** 2 if angle - h > 0 else None
    return rise, fall


def _solve(n1: int, n2: int, p0: float, end: float, alpha: float, power: float) -> float | None:
    """Bisection for the cell rate between p0 and `end` where power first reaches `power`."""
    if n1 <= 0 or n2 <= 0 or p0 == end or fisher_power(n1, n2, end, p0, alpha) < power:
        return None
    near, far = p0, end
    for _ in range(40):
        mid = (near + far) / 2
        near, far = (mid, far) if fisher_power(n1, n2, mid, p0, alpha) < power else (near, mid)
    return abs(far - p0)


def sessions_from_command(command: str) -> int | None:
    """The repro's `--sessions N` (how `orch plan` knows the sessions per trial), else None."""
    match = re.search(r"--sessions[ =](\d+)", command)
    return int(match.group(1)) if match else None


# ----------------------------------------------------------------------------- the quasi-binomial test
# With replicates the report compares a cell with the baseline by clustered.quasi_test, with the
# dispersion pooled over the sweep's cells (core.trialexact where it rests on too little). Its
# power has no closed form: it is simulated here with the report's own functions, on the design
# as run (cells, trials, sessions, the other cells' rates, the dispersion this run estimated as the
# truth), seeded and with common random numbers, so the bisection over the cell's rate sees a
# monotone curve.

SIM_SWEEPS = 3000
SOLVE_TOLERANCE = 0.0005  # of a rate: 0.05 points, finer than the one decimal the report prints
SIM_MAX_DRAWS = 8_000_000  # numbers a simulation holds at once: sweeps x trials x (sessions + cells)
SIM_MIN_SWEEPS = 200  # fewer would make the solved difference noisy: beyond, the large-sample limit
KEPT_RATES = 128  # p-value arrays one simulation keeps (a solve visits ~12 rates a direction)
# How far cell_counts' grid quantiles are trusted to bound a trial's (relative, absolute): the
# computed beta quantile steps back as u grows by up to 2.6e-13 of min(q, 1 - q) (one ulp near 1)
# and 1e-24 absolute near 0 (measured over ICC 1e-7..0.5, rates 1e-4..0.9999: tests/test_stats_fast_paths.py).
QUANTILE_SLACK, QUANTILE_FLOOR = 1e-9, 1e-12
SIM_MAX_OTHERS = 63  # other cells simulated: they only inform the pooled dispersion (see _bounded)


@dataclass(frozen=True)
class Design:
    """A replicated design as run: sessions per trial, trials per cell, the other cells' rates."""

    sessions: int
    trials: int
    other_rates: tuple[float, ...]  # cells besides the compared one and the baseline (they inform phi)
    phi: float = 1.0  # the trial-to-trial dispersion taken as true (1: binomial)


def quasi_power(design: Design, cell_rate: float, base_rate: float, alpha: float = ALPHA, seed: int = 0) -> float:
    """Probability that the report's quasi-binomial test (Fisher where phi cannot be estimated)
    rejects at `alpha` for these true rates."""
    return float(np.mean(_QuasiSim(_bounded(design), base_rate, seed).reject(cell_rate, alpha)))


def simulation_note(design: Design) -> str:
    """How quasi_detectable worked this design out, for the sentence that quotes its figure."""
    bounded = _bounded(design)
    sweeps = _sweeps(bounded)
    if sweeps < SIM_MIN_SWEEPS:
        return "its normal limit (the design is too large to simulate: the arcsine approximation on n / dispersion)"
    others = len(design.other_rates)
    cells = "the other cells at their observed rates"
    if others > len(bounded.other_rates):
        cells = f"{len(bounded.other_rates)} of the {others:,} other cells, an even spread of their observed rates"
    return f"{sweeps} sweeps, {cells}"


@lru_cache(maxsize=256)
def quasi_detectable(
    design: Design, base_rate: float, alpha: float = ALPHA, power: float = TARGET_POWER, seed: int = 0
) -> Detectable:
    """Differences from `base_rate` the quasi-binomial comparison detects with `power` (simulated).
    Seeded, so a pure function of its arguments: kept per process, since one run's report is built
    again for its summary, the index, a comparison and the webhook (~0.1 s of simulation each)."""
    design = _bounded(design)
    n = design.sessions * design.trials
    if _sweeps(design) < SIM_MIN_SWEEPS:  # 10^5 trials: the test is at its normal limit
        n_eff = max(1, int(n / max(design.phi, 1.0)))
        return Detectable(n, n, base_rate, alpha, power, *_approximate(n_eff, n_eff, base_rate, alpha, power))
    sim = _shared_sim(design, base_rate, seed)

    def solve(end: float) -> float | None:
        if base_rate == end or float(np.mean(sim.reject(end, alpha))) < power:
            return None
        near, far = base_rate, end
        while abs(far - near) > SOLVE_TOLERANCE:  # each step is a simulated sweep set (~0.03 s)
            mid = (near + far) / 2
            near, far = (mid, far) if float(np.mean(sim.reject(mid, alpha))) < power else (near, mid)
        return abs(far - base_rate)

    return Detectable(n, n, base_rate, alpha, power, solve(1.0), solve(0.0))


def _bounded(design: Design) -> Design:
    """The design with at most SIM_MAX_OTHERS other cells, an evenly spread sample of their rates.

    The other cells enter the comparison only through the pooled dispersion, on
    cells x (trials - 1) degrees of freedom; beyond 63 cells Student's t is within 1% of its
    normal limit, and fewer degrees of freedom only widen the test: the power stated can be a
    little lower than the design's, never higher. A 4,096-cell matrix otherwise simulated 3,000
    sweeps of every cell for each bisection step (minutes, gigabytes)."""
    others = design.other_rates
    if len(others) <= SIM_MAX_OTHERS:
        return design
    ranked = sorted(others)
    step = len(ranked) / SIM_MAX_OTHERS
    kept = tuple(ranked[int(i * step)] for i in range(SIM_MAX_OTHERS))
    return Design(design.sessions, design.trials, kept, design.phi)


def _sweeps(design: Design) -> int:
    """Sweeps simulated: SIM_SWEEPS, fewer where the design would hold more than SIM_MAX_DRAWS."""
    held = design.trials * (design.sessions + 1 + len(design.other_rates))
    return min(SIM_SWEEPS, SIM_MAX_DRAWS // max(1, held))


@lru_cache(maxsize=2)
def _shared_sim(design: Design, base_rate: float, seed: int) -> _QuasiSim:
    """One simulation for both of a report's solves of a design (its test's alpha and Holm's first
    step's, alpha / tests): the same seeded sweeps, so the second reuses the fixed cells' draws and
    every p-value the first worked out (their bisections share their first steps). Two kept: each
    holds up to SIM_MAX_DRAWS numbers."""
    return _QuasiSim(design, base_rate, seed)


class _QuasiSim:
    """Seeded sweeps: fixed draws for the baseline and the other cells; the compared cell's trials
    from fixed uniforms, so its counts grow monotonically with its rate.

    The fixed cells' spreads (clustered.cell_spread: per cell, over its trials) and sums are the
    same at every step of the bisection, so they are computed once here; each reject() works out
    only the compared cell's and joins them: the same arrays as cell_spread of every cell, a step
    ~3x faster on `orch plan`'s 64-cell design (tests/test_stats_fast_paths.py, bench/bench_plan.py)."""

    def __init__(self, design: Design, base_rate: float, seed: int) -> None:
        from orchestrator.core import clustered  # imported here: power's Fisher half needs none of it

        self.clustered = clustered
        self.design = design
        s, r = design.sessions, design.trials
        self.sweeps = max(1, _sweeps(design))
        rng = np.random.default_rng(seed)
        self.icc = min(max((design.phi - 1.0) / max(s - 1, 1), 0.0), 0.5)
        fixed = [base_rate, *design.other_rates]
        self.fixed_k = np.stack([self._draw(rng, p) for p in fixed], axis=1)  # (sweeps, cells, trials)
        self.trial_u = rng.random((self.sweeps, r))
        self.session_u = np.sort(rng.random((self.sweeps, r, s)), axis=-1)  # cell_counts needs them in order
        self.fixed_spread = clustered.cell_spread(self.fixed_k, np.full_like(self.fixed_k, float(s)))
        self.fixed_big_k = self.fixed_k.sum(axis=-1)
        self.cell_n = np.full((self.sweeps, 1, r), float(s))
        self.big_n = self.cell_n.sum(axis=-1)[:, 0]  # every cell's: sessions x trials
        self._kept: dict[float, np.ndarray] = {}  # cell rate -> each sweep's p (pvalues)
        self._grid = 1 << max(8, math.isqrt(self.trial_u.size * s).bit_length())  # cell_counts' G, a power of 2
        self._grid_cell = np.minimum((self.trial_u * self._grid).astype(np.int32), self._grid - 1)  # u*G exact

    def _draw(self, rng: np.random.Generator, p: float) -> np.ndarray:
        rates = self._trial_rates(p, rng.random((self.sweeps, self.design.trials)))
        return np.asarray(rng.binomial(self.design.sessions, rates), dtype=float)

    def _trial_rates(self, p: float, u: np.ndarray) -> np.ndarray:
        if self.icc <= 0 or p <= 0 or p >= 1:
            return np.full(u.shape, p)
        scale = (1 - self.icc) / self.icc
        return dist.beta_ppf(u, p * scale, (1 - p) * scale)

    def cell_counts(self, cell_rate: float) -> np.ndarray:
        """Each trial's sessions with an event at this rate of the compared cell: #(session
        uniforms < the trial's rate), that rate the beta quantile of the trial's uniform u.

        Why not every trial's quantile (~1.3 us each, 90% of a solve until 7556b0b): the quantile
        grows with u, so a trial's rate lies between the quantiles at the grid points i / G and
        (i + 1) / G around its u. Where no session uniform lies between those two its count is
        known; the first uniform at or above the lower one tells (they are kept sorted: a count is
        blind to their order). About sessions / G of the trials have one in between: they get
        their own quantile, the very number the full computation compares, so every count is the
        same. With G between sqrt(T x sessions) and twice it (T: the trials simulated), a step
        draws at most ~3 sqrt(T x sessions) quantiles instead of T (bench/bench_power_speed.py). The
        bounds are widened by QUANTILE_SLACK and QUANTILE_FLOOR, beyond the last-bit steps where
        the computed quantile is not monotone in u."""
        if self.icc <= 0 or cell_rate <= 0 or cell_rate >= 1:
            return np.asarray((self.session_u < cell_rate).sum(axis=-1))
        grid = self._trial_rates(cell_rate, np.arange(self._grid + 1) / self._grid)
        slack = QUANTILE_SLACK * grid + QUANTILE_FLOOR
        low, high = (grid - slack)[self._grid_cell], (grid + slack)[self._grid_cell + 1]
        counts = (self.session_u < low[..., None]).sum(axis=-1, dtype=np.int32)
        sessions = self.design.sessions
        above = np.take_along_axis(self.session_u, np.minimum(counts, sessions - 1)[..., None], axis=-1)[..., 0]
        unsure = np.nonzero((counts < sessions) & (above < high))  # the first uniform above low is below high
        rates = self._trial_rates(cell_rate, self.trial_u[unsure])
        counts[unsure] = (self.session_u[unsure] < rates[:, None]).sum(axis=-1)
        return np.asarray(counts)

    def reject(self, cell_rate: float, alpha: float) -> np.ndarray:
        return np.asarray(self.pvalues(cell_rate) < alpha)

    def pvalues(self, cell_rate: float) -> np.ndarray:
        """Each sweep's p of the comparison at this rate of the compared cell, kept per rate: the
        bisections at two alphas visit the same rates until their answers part (a step: the
        compared cell's counts, its spread and the test over every sweep, ~0.01-0.04 s)."""
        kept = self._kept.get(cell_rate)
        if kept is None:
            if len(self._kept) >= KEPT_RATES:
                self._kept.clear()
            kept = self._kept[cell_rate] = self._pvalues(cell_rate)
        return kept

    def _pvalues(self, cell_rate: float) -> np.ndarray:
        cell_k = self.cell_counts(cell_rate).astype(float)  # (sweeps, trials)
        own = self.clustered.cell_spread(cell_k[:, None, :], self.cell_n)
        spread = (
            np.concatenate([own[0], self.fixed_spread[0]], axis=1),
            np.concatenate([own[1], self.fixed_spread[1]], axis=1),
            np.concatenate([own[2], self.fixed_spread[2]], axis=1),
        )
        phi, df = self.clustered.pooled_dispersion(*spread)
        k1, k2 = cell_k.sum(axis=-1), self.fixed_big_k[:, 0]
        p = self.clustered.quasi_test(k1, self.big_n, k2, self.big_n, phi, df)
        fisher = df <= 0
        if fisher.any():
            total = int(self.big_n[0])
            if total <= MAX_EXACT_N:
                table = fisher_pvalues(total, total)
                p = np.where(fisher, table[k1.astype(int), k2.astype(int)], p)
        sparse = self.clustered.sparse_sweeps(spread, df)
        if sparse.any():  # phi on too little: the report's p comes from the trial-level test
            from orchestrator.core import trialexact

            design = (self.design.sessions,) * self.design.trials
            exact = trialexact.calibration(design, design).pvalues(cell_k[sparse], self.fixed_k[sparse, 0])
            p = p.copy()
            p[sparse] = exact
        return np.asarray(p)
