"""The trial-level cell test (core.trialexact): where the quasi test's dispersion rests on one df.

Shape A of bench/bench_sparse_power.py: a 2x2x2 whose events sit in ONE cell, two trials of 40
sessions per cell. The quasi-binomial test had 0.2% power there (Fisher 80%). Simulated sweeps
through the report's own decision code (clustersim.cell_p_values), seeded, vectorised; Monte
Carlo tolerance three standard errors of a 5% rate, as in tests/test_clustered_stats.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.report_synth import ALL_OFF, ALL_ON, synthetic_run, trial_counts

from orchestrator.core import clustered, clustersim, trialexact
from orchestrator.report.build import build_report

ALPHA = 0.05
SESSIONS = 40
SWEEPS = 4000
RATE = 0.097  # Fisher's 80%-power rise from 0/80
SHAPE_A = [0.0, RATE] + [0.0] * 6
DESIGN = (SESSIONS, SESSIONS)


def tolerance(sweeps: int) -> float:
    return 3 * math.sqrt(ALPHA * (1 - ALPHA) / sweeps)


def test_table_statistic_is_the_direct_one_and_the_p_ignores_order_and_arm_names() -> None:
    rng = np.random.default_rng(0)
    cell, base = (40, 40), (30, 40, 40)
    kc = rng.integers(0, 41, (300, 2))
    kb = np.minimum(rng.integers(0, 9, (300, 3)), np.array(base))
    direct = trialexact.statistic(kc, cell, kb, base)
    table = trialexact._Tables(cell, base).statistic(kc, kb)
    assert np.array_equal(np.isfinite(direct), np.isfinite(table))
    np.testing.assert_allclose(table[np.isfinite(table)], direct[np.isfinite(direct)], atol=1e-9)
    a, b = [(6, 40), (4, 40)], [(0, 40), (1, 40)]
    p = trialexact.pair_pvalue(a, b)
    assert p == trialexact.pair_pvalue(b, a) == trialexact.pair_pvalue(a[::-1], b[::-1])
    assert 1 / (trialexact.DRAWS + 1) <= p < ALPHA
    assert trialexact.pair_pvalue([(0, 40), (0, 40)], [(0, 40), (0, 40)]) == 1.0
    assert trialexact.pair_pvalue([(3, 40), (30, 40)], [(0, 40), (1, 40)]) > 0.2  # the spread explains it


def test_unequal_arms_are_looked_up_in_the_calibrations_order_whichever_arm_is_the_cell() -> None:
    """The calibration key orders the arms by their sessions; pair_pvalue must hand the counts over
    in that order. Equal designs cannot tell: here the baseline ran three trials, one of them short."""
    cell, base = [(9, 40), (7, 40)], [(0, 30), (1, 40), (0, 40)]
    key = trialexact.design([40, 40], [30, 40, 40])
    assert key == ((30, 40, 40), (40, 40))  # the baseline's arm comes first
    want = float(trialexact.calibration(*key).pvalues([0, 0, 1], [9, 7]))
    assert trialexact.pair_pvalue(cell, base) == want == trialexact.pair_pvalue(base, cell)
    assert want < ALPHA
    flat = float(trialexact.calibration(*key).pvalues([9, 7, 0], [0, 1, 0]))  # the counts put in the wrong slots
    assert flat != want


@pytest.mark.parametrize("rate", [0.01, 0.05, 0.15, 0.4])
def test_its_error_rate_is_held_at_alpha_up_to_the_icc_bound_and_bounded_beyond(rate: float) -> None:
    """Its own guarantee, on fresh draws (another seed than the calibration's): A/A <= 5% for
    ICC 0-0.05 at any common rate, <= 10% (FAR_FACTOR x) at larger ICC."""
    rng = np.random.default_rng(int(rate * 1000))
    cal = trialexact.calibration(DESIGN, DESIGN)
    for icc in (0.0, 0.02, 0.05, 0.1, 0.2, 0.5):
        k = clustersim.beta_binomial_trials(rng, SWEEPS, [rate, rate], 2, SESSIONS, icc)
        false = float((cal.pvalues(k[:, 1], k[:, 0]) < ALPHA).mean())
        bound = ALPHA if icc <= trialexact.ICC_BOUND else trialexact.FAR_FACTOR * ALPHA
        assert false <= bound + tolerance(SWEEPS), (rate, icc, false)


@pytest.mark.parametrize(("trials", "quasi_most"), [(2, 0.01), (3, 0.6)])
def test_sparse_shape_power_is_within_10_points_of_fisher_where_the_quasi_test_fell_behind(
    trials: int, quasi_most: float
) -> None:
    """2 trials: phi on 1 df; 3 trials: one cell's 2 df carry phi (clustered.sparse's lone cell)."""
    rng = np.random.default_rng(13 + trials)
    k = clustersim.beta_binomial_trials(rng, SWEEPS, SHAPE_A, trials, SESSIONS, 0.0)
    old, new = clustersim.cell_p_values(k, SESSIONS, cells=slice(1, 2))
    n = np.full_like(k, SESSIONS)
    phi, df = clustered.pooled_dispersion(*clustered.cell_spread(k, n))
    total = SESSIONS * trials
    quasi = clustered.quasi_test(k[:, 1].sum(-1), total, k[:, 0].sum(-1), total, phi, df)
    fisher, report, before = (float((p < ALPHA).mean()) for p in (old[:, 0], new[:, 0], quasi))
    print(f"\nshape A, {trials} trials, power: Fisher {fisher:.3f}, report {report:.3f}, quasi alone {before:.3f}")
    assert report >= fisher - 0.10 and before < quasi_most  # the check can fail: the quasi test alone fell short


@pytest.mark.parametrize("trials", [2, 3])
@pytest.mark.parametrize("icc", [0.0, 0.02, 0.05])
def test_sparse_shapes_keep_alpha(icc: float, trials: int) -> None:
    """A/A in the sparse shapes: the pair at 9.7% with the other cells at 0 (shape A's null), and
    bench_stats' DSV4 row's null (baseline and cell at 15%, six cells at 2%)."""
    rng = np.random.default_rng(int(icc * 1000) + 21 + trials)
    for rates in ([RATE, RATE] + [0.0] * 6, [0.15, 0.15] + [0.02] * 6):
        k = clustersim.beta_binomial_trials(rng, SWEEPS, rates, trials, SESSIONS, icc)
        _, new = clustersim.cell_p_values(k, SESSIONS, with_old=False, cells=slice(1, 2))
        false = float((new < ALPHA).mean())
        assert false <= ALPHA + tolerance(SWEEPS), (rates, icc, false)


def test_report_uses_the_trial_test_when_the_dispersion_rests_on_one_df_and_says_so() -> None:
    manifest, records = synthetic_run(
        replicates=2, baseline=ALL_OFF, failures=False, seed=2, rate=lambda levels: 0.15 if levels == ALL_ON else 0.0
    )
    report = build_report(manifest, records)
    trials = trial_counts(records)
    disp = clustered.dispersion(list(trials.values()))
    assert disp.sparse and report.comparison["corruption"] == disp.method()
    assert "p-values by a likelihood ratio on the trials" in disp.method()
    base = next(c for c in report.cells if c.is_baseline)
    hot = next(c for c in report.cells if c.levels == ALL_ON)
    p = hot.proportions["corruption"]
    want = trialexact.pair_pvalue(trials[hot.cell], trials[base.cell])
    assert p.p == pytest.approx(want)
    quasi = clustered.compare(p.rate.k, p.rate.n, *(base.proportions["corruption"].rate.k, 80), disp)
    assert want < ALPHA <= quasi.p  # the one-df quasi test could not see it
    assert (p.diff_low, p.diff_high) == pytest.approx((quasi.low, quasi.high))  # intervals stay quasi


def test_large_designs_skip_the_tables_and_give_the_same_statistic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trialexact, "MAX_TABLE", 10)
    tables = trialexact._Tables((40, 40), (40, 40))
    assert tables.direct
    kc, kb = np.array([[6, 4], [0, 0], [12, 1]]), np.array([[0, 1], [0, 0], [3, 2]])
    got = tables.statistic(kc, kb)
    np.testing.assert_array_equal(got, trialexact.statistic(kc, (40, 40), kb, (40, 40)))
    assert np.isneginf(got[1]) and got[0] > got[2]


def _most_power(null_rate: float, null_icc: float) -> float:
    """The most power ANY arm-symmetric test of two trials of 40 a side can have at 15% vs 2% (ICC 0)
    while its A/A rate (both directions) is <= 5% at one null (common rate, ICC): a linear
    programme over the rejection probability of each unordered pair of arm outcomes. One null is
    fewer constraints than "every rate, every ICC <= 0.05": the bound only falls with more."""
    from scipy import stats as sps
    from scipy.optimize import linprog

    def pmf(p: float, icc: float) -> np.ndarray:
        k = np.arange(SESSIONS + 1)
        if icc <= 0:
            return np.asarray(sps.binom.pmf(k, SESSIONS, p))
        s = (1 - icc) / icc
        return np.asarray(sps.betabinom.pmf(k, SESSIONS, p * s, (1 - p) * s))

    def arms(f: np.ndarray) -> dict[tuple[int, int], float]:
        keep = [k for k in range(SESSIONS + 1) if f[k] > 1e-7]
        return {(i, j): f[i] * f[j] * (1 if i == j else 2) for i in keep for j in keep if i <= j}

    high, low, null = arms(pmf(0.15, 0.0)), arms(pmf(0.02, 0.0)), pmf(null_rate, null_icc)
    power: dict[tuple[tuple[int, int], tuple[int, int]], float] = {}
    for a, pa in high.items():
        for b, pb in low.items():
            key = (a, b) if a <= b else (b, a)
            power[key] = power.get(key, 0.0) + pa * pb
    keys = list(power)

    def arm(x: tuple[int, int]) -> float:
        return float(null[x[0]] * null[x[1]] * (1 if x[0] == x[1] else 2))

    size = np.array([[arm(x) * arm(y) * (1 if x == y else 2) for x, y in keys]])
    res = linprog(-np.array([power[k] for k in keys]), A_ub=size, b_ub=[ALPHA], bounds=(0, 1), method="highs")
    return float(-res.fun)


def test_no_test_valid_up_to_icc_005_comes_within_10_points_of_fisher_in_the_dsv4_shape() -> None:
    """Why the DSV4 sparse shape (15% vs 2%, 2 trials of 40) stays short of the goal: a test whose
    power is >= x in both directions can be made arm-symmetric without losing size or power, and
    every such test that holds 5% at a common 8.5% with ICC 0.05 has <= 66.3% power, where Fisher's
    (exact, computed here) has 82.2%: the goal, Fisher - 10, is out of reach for ANY test."""
    from scipy import stats as sps

    from orchestrator.core import power

    k = np.arange(81)
    fisher = float(sps.binom.pmf(k, 80, 0.15) @ (power.fisher_pvalues(80, 80) < ALPHA) @ sps.binom.pmf(k, 80, 0.02))
    bound = _most_power(0.085, 0.05)
    print(f"\nDSV4 shape, 2 trials: Fisher {fisher:.3f}, the most any test valid at ICC 0.05 can have {bound:.3f}")
    assert 0.81 < fisher < 0.83 and bound < fisher - 0.10
    assert _most_power(0.085, 0.0) > fisher  # the same programme without trial variation: no artefact
