"""Rates and cell-vs-baseline tests that treat the TRIAL, not the session, as the unit of replication.

Why: sessions of one trial share a restart, a warm-up and a GPU state, so a deployment that
varies from restart to restart (the DSV4 seeds saw 15%, 18%, then 2% on one configuration)
makes k/n summed over a cell's trials far noisier than the binomial says. Fisher's test on the
summed counts then calls 11-40% of A/A comparisons "different" at a nominal 5% (2 trials per
cell, intra-trial correlation 0.02-0.05). This module is the quasi-binomial answer:

- dispersion phi: the trial-to-trial variance of k over the binomial variance. A common
  intra-trial correlation gives every cell the same phi, so it is POOLED over the cells of the
  sweep: phi = sum_c A_c / sum_c B_c, with A_c = sum over trials (k - n p_c)^2 (the spread seen)
  and B_c = p_c (1 - p_c) (N_c - sum n^2 / N_c) (the spread the binomial expects). The ratio of
  sums, not the mean of per-cell chi-squares: a sparse cell (2% of 40 sessions) has a Pearson
  chi-square near 1 whatever phi is, and averaging such cells pulled phi towards 1 (A/A 5.4-7.6%
  instead of 5%); in the ratio of sums a cell weighs by the information it carries. Its degrees
  of freedom are Satterthwaite's, (sum B_c)^2 / sum(B_c^2 / (trials_c - 1)): the nominal sum of
  (trials - 1) when cells are alike, fewer when a few cells carry the estimate. A cell with one
  trial, or whose trials saw no event (or only events), says nothing about the spread.
- test: the two-sample score statistic z^2 (Pearson's chi-square on the summed 2x2 table). The
  p-value is the larger of the binomial one (chi-square(1) on z^2: never more liberal than the
  binomial) and the quasi one (F(1, df) on z^2 / phi: phi estimated on df degrees of freedom, so
  the error stays at alpha when trials vary). Equivalently, the variance is inflated by
  m = max(1, phi t(df)^2 / z^2), the same factor the intervals use.
- interval: Wilson's interval on the effective counts k/m of n/m (effective sample size n/m);
  the difference from the baseline by MOVER on those limits (Newcombe's form when m = 1).

With one trial per cell, or no trial that saw the event (df = 0), trial-to-trial variation cannot
be estimated: the report keeps Fisher's exact test, labelled as assuming independent sessions, but
its rate intervals (what gates certify) still assume the least intra-trial correlation orch assumes
anywhere, RHO_PRIOR (design effect 1 + (mean sessions per trial - 1) * RHO_PRIOR): zero-event
trials are the commonest data of a clean cell, and the commoner the more trials vary, so pooled
Wilson there would pass an `upper:` gate on independence nobody checked.
With phi on fewer than SPARSE_DF df, or one cell of 2-4 trials carrying it alone (a failure in
one cell of a 2x2x2), the quasi test needs z^2 / phi > F(1, df) = 161, 18.5, 10.1 for 1, 2, 3 df and
falls far behind Fisher (power 0.2%, 43%, 79% vs 80%, 98%, 100% there); the report's
p-values then come from core.trialexact (a likelihood ratio on the trials, its error held for an
intra-trial correlation up to 0.05), the intervals still from here.

The array functions are vectorised (numpy broadcasting) so the simulation test and the bench
run the very code the report runs, over thousands of simulated sweeps at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from orchestrator.core import dist, stats
from orchestrator.core.spreadsums import cell_spread as cell_spread
from orchestrator.core.spreadsums import pooled_dispersion as pooled_dispersion
from orchestrator.core.words import counted

Array = npt.NDArray[np.float64]
CONFIDENCE = 0.95
SPARSE_DF = 2.0  # below this the cell test's p comes from core.trialexact (see above)
LONE_CELL_DF = 4.0  # and below this when one cell alone carries phi
RHO_PRIOR = 0.005  # the least trial-to-trial correlation assumed: restarts are never identical
ASSUMED_NOTE = f"assuming at least ICC {RHO_PRIOR:g}: trial-to-trial variation not estimable"
ONE_TRIAL = (
    "one trial per cell cannot separate a flag's effect from trial-to-trial variation, as each cell is one restart "
    "and restarts differ"
)
NOT_MEASURED = "no completed trial measured it"


@dataclass(frozen=True)
class Dispersion:
    """phi pooled over a sweep's cells, with the data it rests on."""

    phi: float  # the estimate (1.0 when nothing can be estimated); may be < 1 (the tests floor it)
    df: float  # Satterthwaite degrees of freedom, not always whole (0: not estimable)
    trials: int  # trials in the informative cells
    cells: int  # informative cells (>= 2 trials, some but not all sessions with the event)
    most_trials: int = 0  # the most trials any cell has (1: no replicates at all)
    sessions_per_trial: float = 0.0  # mean sessions of every trial given (0: unknown, no prior widening)

    @property
    def estimable(self) -> bool:
        return self.df > 0

    @property
    def sparse(self) -> bool:
        """phi rests on too little for the quasi test: the cell test's p comes from core.trialexact."""
        return bool(sparse(self.df, self.cells))

    def inflation(self, confidence: float = CONFIDENCE) -> float:
        """m: the factor the binomial variance is multiplied by (1 when not estimable)."""
        if not self.estimable:
            return 1.0
        return float(inflation(self.phi, self.df, confidence))

    def interval_inflation(self, sessions_per_trial: float | None = None, confidence: float = CONFIDENCE) -> float:
        """m for the rate intervals: inflation() where phi is estimable, else the design effect of
        the least intra-trial correlation assumed (RHO_PRIOR) for trials of `sessions_per_trial`
        (default: the sweep's mean), never the binomial's 1 with trials of unknown spread. Not used
        by the tests between cells (they say what they assume)."""
        size = self.sessions_per_trial if sessions_per_trial is None else sessions_per_trial
        if self.estimable:
            return trial_bounded(self.inflation(confidence), size)
        return prior_inflation(size)

    def method(self) -> str:
        """One sentence the report prints: which test, and on what it rests."""
        if self.most_trials == 0:
            return f"no test: {NOT_MEASURED}"
        if not self.estimable:
            return (
                f"Fisher's exact test on sessions pooled over trials, assuming independent sessions "
                f"({self.unestimable_reason()}); {self.interval_note()}"
            )
        cells = counted(self.cells, "cell")
        quasi = (
            f"quasi-binomial, dispersion {self.phi:.2f} estimated from {self.trials} trials in {cells} "
            f"({self.df:.1f} df; trial = unit of replication, never below the binomial)"
        )
        if not self.sparse:
            return quasi
        return (
            f"{quasi} for the intervals; p-values by a likelihood ratio on the trials, as {self.df:.1f} df are too "
            "few for the quasi test (its error rate held at 5% for intra-trial correlation up to 0.05, at most "
            "10% beyond)"
        )

    def unestimable_reason(self) -> str:
        """Why trial-to-trial variation cannot be estimated here (meant for when not estimable).
        Only a cell of two or more trials can show it (a cell of one trial that saw the event in
        some sessions says nothing about the spread between trials), hence the words."""
        if self.most_trials == 0:
            return NOT_MEASURED
        if self.most_trials < 2:
            return "with one trial per cell, trial-to-trial variation cannot be estimated"
        return (
            "no cell with two or more trials both saw and missed the event, so trial-to-trial variation cannot be "
            "estimated"
        )

    def untested_reason(self, planned_per_cell: int = 1, *, unfinished: bool = False) -> str:
        """Why a metric's differences are not tested, with what to do about it: the one sentence the
        report, `orch compare` (and, before the sweep, `orch plan`: ONE_TRIAL) give. Why: a cell's sum
        of trials varies with the restarts, not only with the sessions; with nothing to measure that by,
        a test on the pooled sessions calls noise a finding (report.build._untested).

        The advice is for the run as planned and as far as it got: a plan with two or more trials per
        cell is never told to rerun with replicates >= 2 (a run cut off after its first round, or whose
        later trials failed, has them planned already), nor a run not finished (running, stale,
        interrupted) to rerun at all: the rest of its plan is what it lacks."""
        if self.most_trials == 0:
            return NOT_MEASURED
        if self.most_trials < 2 and planned_per_cell >= 2:
            why = "the rest of the run's plan" if unfinished else "a rerun (its other trials did not complete)"
            so_far = f"at most one trial per cell completed of the {planned_per_cell} planned"
            return f"{so_far}, and {ONE_TRIAL}; {why} would give the test"
        if self.most_trials < 2:
            return f"{ONE_TRIAL}; rerun with replicates >= 2"
        spread = f"{self.unestimable_reason()} and a flag's effect cannot be separated from it"
        return (
            f"{spread} yet; the rest of the run's plan may" if unfinished else f"{spread}; rerun with more replicates"
        )

    def interval_note(self) -> str:
        """How the rate intervals are widened when phi is not estimable (the assumed design effect)."""
        return (
            f"rate intervals widened by the design effect 1 + (sessions per trial - 1) x {RHO_PRIOR:g} "
            f"({self.interval_inflation():.2f} at the mean {self.sessions_per_trial:.0f}; {ASSUMED_NOTE})"
        )


def prior_inflation(sessions_per_trial: float) -> float:
    """1 + (m - 1) * RHO_PRIOR for trials of m sessions: the least design effect orch assumes."""
    return 1.0 + max(0.0, sessions_per_trial - 1.0) * RHO_PRIOR


def sparse(df: npt.ArrayLike, cells: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """Where phi rests on under SPARSE_DF df, or on one cell's under LONE_CELL_DF (elementwise)."""
    d, c = np.asarray(df, dtype=float), np.asarray(cells)
    out: npt.NDArray[np.bool_] = (d > 0) & ((d < SPARSE_DF) | ((c == 1) & (d < LONE_CELL_DF)))
    return out


def sparse_sweeps(spread: tuple[Array, Array, Array], df: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """sparse() of simulated sweeps, from their cells' cell_spread (a cell informs phi when its df > 0)
    and pooled df: the simulations' twin of Dispersion.sparse."""
    return sparse(df, (np.asarray(spread[2]) > 0).sum(axis=-1))


def dispersion(cells: Sequence[Sequence[tuple[int, int]]]) -> Dispersion:
    """phi of a sweep from its cells' trial counts [(k, n) per trial] (the report's entry point)."""
    spreads = [cell_spread(*np.asarray(c, dtype=float).reshape(-1, 2).T) for c in cells if len(c)]
    a, b, d = (np.array([s[i] for s in spreads], dtype=float) for i in range(3))
    phi, eff = pooled_dispersion(a, b, d)
    informative = d > 0
    most = max((len(c) for c in cells), default=0)
    estimate = float(phi) if float(eff) > 0 else 1.0
    sizes = [n for c in cells for _, n in c if n > 0]
    mean = sum(sizes) / len(sizes) if sizes else 0.0
    return Dispersion(estimate, float(eff), int((d[informative] + 1).sum()), int(informative.sum()), most, mean)


def round_dispersion(k: npt.ArrayLike, n: npt.ArrayLike) -> tuple[float, float]:
    """(phi, df) of a sweep's counts by cell and round, shape (cells, rounds), n = 0 where a cell
    missed a round: the spread around a logit fit of cell + round over the binomial's, on its
    residual df ((C - 1)(R - 1) for a full table). What a drift check is tested against: a round
    of the baseline is one trial, so its spread is trial-to-trial variation, and a drift that moves
    every cell of a round lands in the round term, not in phi. A ratio of sums, as in the module
    docstring, scaled by entries / df: the mean of Pearson terms fell to 2.2 for a true 2.95 with
    sparse cells (2% of 40 sessions) and blew up where a fitted rate neared 0, calling drift in 12%
    of A/A runs instead of 5% (4.6% so). Cells and rounds without an event (or with nothing else)
    say nothing and are left out. (1.0, 0.0) when not estimable."""
    k_arr, n_arr = _informative_table(np.asarray(k, dtype=float), np.asarray(n, dtype=float))
    present = n_arr > 0
    df = float(present.sum() - (k_arr.shape[0] + k_arr.shape[1] - 1)) if k_arr.size else 0.0
    if df <= 0:
        return 1.0, 0.0
    p = _additive_logit_fit(k_arr, n_arr)
    seen = np.where(present, (k_arr - n_arr * p) ** 2, 0.0).sum()
    expected = np.where(present, n_arr * p * (1 - p), 0.0).sum()
    return float(seen / expected * present.sum() / df), df


def _informative_table(k: Array, n: Array) -> tuple[Array, Array]:
    """The table without cells and rounds whose sessions all agree (dropping one can empty another)."""
    while k.size:
        rows = (k.sum(axis=1) > 0) & (k.sum(axis=1) < n.sum(axis=1))
        cols = (k.sum(axis=0) > 0) & (k.sum(axis=0) < n.sum(axis=0))
        if rows.all() and cols.all():
            break
        k, n = k[rows][:, cols], n[rows][:, cols]
    return k, n


def _additive_logit_fit(k: Array, n: Array, iterations: int = 200) -> Array:
    """Fitted rates of logit(p) = cell + round by alternating Newton steps (block Fisher scoring:
    each block is diagonal, so a step is two sums, and a big table costs no matrix solve)."""
    present = n > 0
    rate = k.sum(axis=1, keepdims=True) / n.sum(axis=1, keepdims=True)  # 0 < rate < 1: informative
    eta = np.broadcast_to(np.log(rate / (1 - rate)), k.shape).copy()  # start at each cell's own rate
    for _ in range(iterations):
        worst = 0.0
        for axis in (1, 0):
            p = 1 / (1 + np.exp(-eta))
            score = np.where(present, k - n * p, 0.0).sum(axis=axis, keepdims=True)
            info = np.where(present, n * p * (1 - p), 0.0).sum(axis=axis, keepdims=True)
            eta = np.clip(eta + score / np.maximum(info, 1e-12), -30.0, 30.0)
            worst = max(worst, float(np.abs(score).max()))
        if worst < 1e-8:
            break
    fitted: Array = 1 / (1 + np.exp(-eta))
    return fitted


def inflation(phi: npt.ArrayLike, df: npt.ArrayLike, confidence: float = CONFIDENCE) -> Array:
    """m = max(1, phi t(df)^2 / z^2): the variance factor that makes the quasi test and the
    intervals hold with phi estimated on df degrees of freedom; 1 where df is 0."""
    f_phi, f_df = np.asarray(phi, dtype=float), np.asarray(df, dtype=float)
    ok = f_df > 0
    z = dist.norm_ppf(0.5 + confidence / 2)
    t = dist.t_ppf(0.5 + confidence / 2, np.where(ok, f_df, 1.0))
    m: Array = np.where(ok, np.maximum(1.0, np.nan_to_num(f_phi, nan=1.0) * t * t / (z * z)), 1.0)
    return m


def score_z2(k1: npt.ArrayLike, n1: npt.ArrayLike, k2: npt.ArrayLike, n2: npt.ArrayLike) -> Array:
    """Pearson's chi-square of the summed 2x2 table (nan where the pooled rate is 0 or 1)."""
    a1, b1, a2, b2 = (np.asarray(x, dtype=float) for x in (k1, n1, k2, n2))
    with np.errstate(divide="ignore", invalid="ignore"):
        pooled = (a1 + a2) / (b1 + b2)
        z2: Array = (a1 / b1 - a2 / b2) ** 2 / (pooled * (1 - pooled) * (1 / b1 + 1 / b2))
    return np.where((b1 > 0) & (b2 > 0) & (pooled > 0) & (pooled < 1), z2, np.nan)


def quasi_test(
    k1: npt.ArrayLike, n1: npt.ArrayLike, k2: npt.ArrayLike, n2: npt.ArrayLike, phi: npt.ArrayLike, df: npt.ArrayLike
) -> Array:
    """Two-sided p of k1/n1 vs k2/n2 (summed over trials), phi estimated on df degrees of freedom.

    max(binomial, F(1, df).sf(z^2 / phi)): never below the test that takes sessions as
    independent, and valid for any true phi. That binomial floor is the score test's chi2(1).sf(z^2)
    where the summed table's expected counts are all at least stats.MIN_EXPECTED, and at least the mid-p
    of Fisher's exact test where one is smaller: there the chi-square is far too confident (one
    event in 40 sessions against none in 320: p 0.005 for the score test, 0.11 for Fisher's, 0.056
    for its mid-p), and one event must not make a finding. 1 where there is nothing to compare (a
    side without sessions, a pooled rate of 0 or 1) or df is 0 (use Fisher then: the caller decides).
    """
    z2 = score_z2(k1, n1, k2, n2)
    f_phi, f_df = np.asarray(phi, dtype=float), np.asarray(df, dtype=float)
    ok = np.isfinite(z2) & (f_df > 0)
    stat = np.where(ok, z2, 0.0)
    binomial = np.maximum(dist.chi2_sf(stat, 1), _exact_where_sparse(k1, n1, k2, n2, ok))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(ok, stat / np.where(np.isfinite(f_phi) & (f_phi > 0), f_phi, 1.0), 0.0)
    quasi = dist.f_sf(ratio, 1, np.where(f_df > 0, f_df, 1.0))
    p: Array = np.where(ok, np.maximum(binomial, quasi), 1.0)
    return p


def _exact_where_sparse(
    k1: npt.ArrayLike, n1: npt.ArrayLike, k2: npt.ArrayLike, n2: npt.ArrayLike, ok: npt.NDArray[np.bool_]
) -> Array:
    """Fisher's mid-p (_mid_p) where the summed 2x2 table has an expected count under
    stats.MIN_EXPECTED and `ok`; 0 elsewhere. Once per distinct table: a power simulation asks
    thousands of times about a few dozen tables."""
    a1, b1, a2, b2 = np.broadcast_arrays(*(np.rint(np.asarray(x, dtype=float)) for x in (k1, n1, k2, n2)))
    with np.errstate(divide="ignore", invalid="ignore"):
        events, total = a1 + a2, b1 + b2
        smallest = np.minimum(events, total - events) * np.minimum(b1, b2) / total
    sparse = np.broadcast_to(ok, a1.shape) & (smallest < stats.MIN_EXPECTED)
    out = np.zeros(a1.shape)
    if not sparse.any():
        return out
    tables = np.stack([a1[sparse], b1[sparse], a2[sparse], b2[sparse]], axis=1).astype(np.int64)
    unique, inverse = np.unique(tables, axis=0, return_inverse=True)
    values = np.array([_mid_p(*(int(x) for x in row)) for row in unique])
    out[sparse] = values[inverse.ravel()]
    return out


def _mid_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """Lancaster's mid-p of Fisher's exact test: its p less half the observed table's own
    probability. Fisher's p is conservative on few events (its size falls well under alpha);
    the mid-p keeps close to alpha without the score test's overconfidence. Past
    stats.FISHER_SESSIONS, stats.pooled_test's binomial test as it is."""
    found = stats.pooled_test(k1, n1, k2, n2)
    if not found.exact or found.p >= 1.0:
        return found.p
    own = float(dist.hypergeom_pmf(k1, n1 + n2, n1, k1 + k2))
    return max(found.p - own / 2, 0.0)


def wilson_inflated(
    k: npt.ArrayLike, n: npt.ArrayLike, m: npt.ArrayLike, confidence: float = CONFIDENCE
) -> tuple[Array, Array]:
    """Wilson's interval on the effective counts k/m of n/m; m = 1 is Wilson's; n == 0 gives (0, 1)."""
    return wilson_at(k, n, m, dist.norm_ppf(0.5 + confidence / 2))


def wilson_at(k: npt.ArrayLike, n: npt.ArrayLike, m: npt.ArrayLike, z: npt.ArrayLike) -> tuple[Array, Array]:
    """wilson_inflated at the normal quantile z (elementwise: one z per count, for the tests that
    invert an interval over its confidence)."""
    k_arr, n_arr, m_arr = (np.asarray(x, dtype=float) for x in (k, n, m))
    z = np.asarray(z, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ne = n_arr / m_arr
        p = k_arr / n_arr
        centre = (p + z * z / (2 * ne)) / (1 + z * z / ne)
        half = z / (1 + z * z / ne) * np.sqrt(p * (1 - p) / ne + z * z / (4 * ne * ne))
    low = np.where(k_arr == 0, 0.0, np.clip(centre - half, 0.0, 1.0))
    high = np.where(k_arr == n_arr, 1.0, np.clip(centre + half, 0.0, 1.0))
    empty = n_arr <= 0
    return np.where(empty, 0.0, low), np.where(empty, 1.0, high)


@dataclass(frozen=True)
class Comparison:
    """One cell against the baseline under the dispersion: p, difference and its interval."""

    p: float
    diff: float
    low: float
    high: float


def compare(k1: int, n1: int, k2: int, n2: int, disp: Dispersion, confidence: float = CONFIDENCE) -> Comparison:
    """Cell (k1/n1) vs baseline (k2/n2): quasi test p and a MOVER interval for the difference."""
    if n1 <= 0 or n2 <= 0:
        raise ValueError(f"clustered.compare: a side has no sessions ({k1}/{n1} vs {k2}/{n2})")
    p = float(quasi_test(k1, n1, k2, n2, disp.phi, disp.df))
    m = disp.inflation(confidence)
    r1, r2 = k1 / n1, k2 / n2
    l1, u1 = (float(x) for x in wilson_inflated(k1, n1, m, confidence))
    l2, u2 = (float(x) for x in wilson_inflated(k2, n2, m, confidence))
    d = r1 - r2
    return Comparison(p, d, d - math.hypot(r1 - l1, u2 - r2), d + math.hypot(u1 - r1, r2 - l2))


def widened_rate(k: int, n: int, disp: Dispersion | None, trials: int = 0) -> stats.Interval:
    """k/n with Wilson's interval widened for trial-to-trial variation: by `disp`'s estimate where it
    has one, else by the least design effect orch assumes for the cell's `trials` (0: the sweep's
    mean trial), so a clean cell's zero-event trials never certify a gate as if they were
    independent sessions. The one interval the report shows and the gates check, and orch compare's
    and the runs index's for a run's cell."""
    interval = stats.rate(k, n)
    if disp is None or not n:
        return interval
    low, high = wilson_inflated(k, n, disp.interval_inflation(n / trials if trials else None))
    return stats.Interval(interval.estimate, float(low), float(high))


def stopped_rate(k: int, n: int, disp: Dispersion | None, trials: int = 0) -> stats.Interval:
    """k/n with an anytime-valid interval (a confidence sequence), for a cell whose trials a rule
    stopped on its own data (adaptive stopping). Why: Wilson's interval holds at a number of
    sessions fixed in advance; at a stop the data chose, the rate leans toward the side that
    stopped it and Wilson's interval held the true rate in 47-89% of such cells (A/A at 10-15%, ICC
    0.03-0.10: bench/bench_adaptive_honesty.py). This one holds at any stop, whatever the rule: every p whose
    mixture e-value (anytime_log_evidence) stays under 1 / (1 - CONFIDENCE). Trial-to-trial
    variation weighs the sessions as widened_rate's: counts divided by its inflation m."""
    estimate = stats.rate(k, n).estimate
    if not n:
        return stats.Interval(estimate, 0.0, 1.0)
    m = cell_inflation(disp, n, trials)
    low, high = anytime_bounds(k, n, m, math.log(1.0 / (1.0 - CONFIDENCE)))
    return stats.Interval(estimate, float(low), float(high))


def cell_inflation(disp: Dispersion | None, n: int, trials: int = 0) -> float:
    """m of a cell's interval, either choice of cell_rate's: the dispersion's, for trials of the cell's
    mean sessions (0 trials: the sweep's mean); 1 without a dispersion."""
    return 1.0 if disp is None else disp.interval_inflation(n / trials if trials else None)


def cell_rate(k: int, n: int, disp: Dispersion | None, trials: int = 0, *, stopped: bool = False) -> stats.Interval:
    """A cell's rate with the interval every view of it states (the report, its gates, orch compare,
    the runs index's trends): stopped_rate for a cell an adaptive rule stopped early
    (report.build.stopped_cells decides which), else widened_rate. One function, so no view shows a
    stopped cell the narrower fixed-sample interval its own report refuses it."""
    return (stopped_rate if stopped else widened_rate)(k, n, disp, trials)


def cell_bounds(
    k: npt.ArrayLike, n: npt.ArrayLike, m: npt.ArrayLike, z: npt.ArrayLike, stopped: npt.ArrayLike
) -> tuple[Array, Array]:
    """cell_rate's choice at any confidence (the normal quantile z; elementwise), for the tests that
    read a comparison off the cells' own intervals (findings.stopped_mover): a stopped cell's
    anytime-valid interval at level 2 sf(z), any other cell's Wilson interval; both on the
    effective counts k/m of n/m (m: the cell's interval inflation, as cell_rate's)."""
    k_arr, n_arr, m_arr, z_arr = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (k, n, m, z)))
    low, high = wilson_at(k_arr, n_arr, m_arr, z_arr)
    chosen = np.broadcast_to(np.asarray(stopped, dtype=bool), k_arr.shape)
    if chosen.any():
        bound = -dist.norm_logsf(z_arr[chosen]) - math.log(2.0)  # log 1/a, a = 2 sf(z)
        low[chosen], high[chosen] = anytime_bounds(k_arr[chosen], n_arr[chosen], m_arr[chosen], bound)
    return low, high


def anytime_bounds(
    k: npt.ArrayLike, n: npt.ArrayLike, m: npt.ArrayLike, log_bound: npt.ArrayLike
) -> tuple[Array, Array]:
    """The confidence sequence's edges (elementwise): the p each side of k/n where the mixture
    e-value (anytime_log_evidence) reaches exp(log_bound), by bisection (it rises monotonically
    away from the estimate); 0 (1) where k is 0 (n), never narrower than the set."""
    k_arr, n_arr, m_arr, bound = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (k, n, m, log_bound)))
    estimate = k_arr / np.where(n_arr > 0, n_arr, 1.0)
    mixture = _mixture(k_arr, n_arr, m_arr)
    edges = []
    for outside in (np.zeros_like(estimate), np.ones_like(estimate)):
        inside = estimate.copy()
        for _ in range(60):
            middle = (outside + inside) / 2
            reached = _log_evidence(middle, *mixture) >= bound
            outside, inside = np.where(reached, middle, outside), np.where(reached, inside, middle)
        edges.append(outside)
    low = np.where((k_arr == 0) | (n_arr <= 0), 0.0, edges[0])
    high = np.where((k_arr == n_arr) | (n_arr <= 0), 1.0, edges[1])
    return low, high


def anytime_log_evidence(p: npt.ArrayLike, k: npt.ArrayLike, n: npt.ArrayLike, m: npt.ArrayLike = 1.0) -> Array:
    """log of the e-value against "the rate is p" after k events in n sessions: the Jeffreys
    (Beta(1/2, 1/2)) mixture of likelihood ratios, on the effective counts k/m of n/m. A test
    martingale under p (sessions independent, m = 1), so by Ville's inequality it ever reaches
    1/alpha with probability <= alpha, however the sessions were stopped. Vectorised."""
    return _log_evidence(p, *_mixture(k, n, m))


def _mixture(k: npt.ArrayLike, n: npt.ArrayLike, m: npt.ArrayLike) -> tuple[Array, Array, Array]:
    """The effective counts (a, b) and the mixture's log normaliser: what the evidence at every p shares."""
    scale = np.asarray(m, dtype=float)
    a: Array = np.asarray(k, dtype=float) / scale
    b: Array = (np.asarray(n, dtype=float) - np.asarray(k, dtype=float)) / scale
    return a, b, dist.log_beta(a + 0.5, b + 0.5) - dist.log_beta(0.5, 0.5)


def _log_evidence(p: npt.ArrayLike, a: Array, b: Array, norm: Array) -> Array:
    q = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_p = np.where(a > 0, a * np.log(q), 0.0) + np.where(b > 0, b * np.log1p(-q), 0.0)
    out: Array = norm - log_p
    return out


def rate_interval(
    k: int, n: int, disp: Dispersion, confidence: float = CONFIDENCE, trials: int | None = None
) -> tuple[float, float]:
    """The rate's interval widened for trial-to-trial variation (scalars, for the report), never
    wider than its `trials` taken as one observation each (trial_bounded; unknown: the mean trial)."""
    size = n / trials if trials else disp.sessions_per_trial
    low, high = wilson_inflated(k, n, trial_bounded(disp.inflation(confidence), size), confidence)
    return float(low), float(high)


def trial_bounded(m: float, sessions_per_trial: float) -> float:
    """The variance factor m of an interval, at most a trial's sessions (never below 1; unknown, 0:
    m as it is). Why: each trial's rate lies in [0, 1], so however a trial's sessions hang together
    the pooled rate's variance is at most p(1 - p) / trials, the binomial's times the sessions of a
    trial: taking each trial as one observation is the widest the data can need. phi estimated on
    a few df multiplies by t(df)^2 / z^2 beyond that (42 on 1 df): a hunt configuration with 0 of
    110 sessions failed in 22 trials read 0.0%-72.7% (the second export audit); bounded, 0-15%."""
    return min(m, max(1.0, sessions_per_trial)) if sessions_per_trial > 0 else m
