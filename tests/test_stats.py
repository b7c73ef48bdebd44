"""Tests of orchestrator.core.stats: known values, edge cases, and simulated calibration.

The calibration tests are the point: they prove on simulated sweeps with known true rates that
the intervals cover the truth about 95% of the time and that A/A comparisons (same true rate)
are rarely called significant. Run with -s to see the figures.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from orchestrator.core import stats


def test_wilson_known_values_and_edges() -> None:
    low, high = stats.wilson_interval(0, 40)
    assert low == 0.0 and high == pytest.approx(0.0876, abs=1e-4)
    low, high = stats.wilson_interval(6, 40)
    assert low == pytest.approx(0.0706, abs=1e-3) and high == pytest.approx(0.2909, abs=1e-3)
    assert stats.wilson_interval(40, 40)[1] == 1.0
    assert stats.wilson_interval(0, 0) == (0.0, 1.0)
    assert stats.wilson_interval(0, 500_000)[0] == 0.0 and stats.wilson_interval(7, 7)[1] == 1.0
    wider = stats.wilson_interval(6, 40, confidence=0.99)
    assert wider[0] < low and wider[1] > high
    with pytest.raises(ValueError):
        stats.wilson_interval(5, 4)


def test_rate_interval_has_nan_estimate_without_data() -> None:
    assert math.isnan(stats.rate(0, 0).estimate)
    assert stats.rate(3, 10).estimate == pytest.approx(0.3)


def test_fisher_and_newcombe() -> None:
    assert stats.fisher_exact(20, 120, 0, 120) < 1e-5
    assert stats.fisher_exact(3, 40, 3, 40) == pytest.approx(1.0)
    assert stats.fisher_exact(3, 40, 0, 0) == 1.0
    low, high = stats.rate_difference_ci(6, 40, 0, 40)
    assert low == pytest.approx(0.0318, abs=1e-3) and high == pytest.approx(0.2907, abs=1e-3)
    assert stats.rate_difference_ci(1, 1, 0, 0) == (-1.0, 1.0)


def test_contrast_interval_matches_newcombe_for_a_difference() -> None:
    for k1, n1, k2, n2 in [(6, 40, 0, 40), (1, 80, 7, 120), (40, 40, 0, 40), (3, 9, 3, 9)]:
        interval = stats.contrast_interval([(k1, n1), (k2, n2)], [1.0, -1.0])
        low, high = stats.rate_difference_ci(k1, n1, k2, n2)
        assert interval.estimate == pytest.approx(k1 / n1 - k2 / n2)
        assert (interval.low, interval.high) == pytest.approx((low, high), abs=1e-9)
    with pytest.raises(ValueError):
        stats.contrast_interval([(0, 0)], [1.0])


def test_holm_matches_the_textbook_procedure() -> None:
    pvalues = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone: 0.06
    assert stats.holm(pvalues) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([]) == []
    rng = np.random.default_rng(9)
    for size in (1, 2, 7, 30):
        pv = rng.uniform(0, 0.2, size=size)
        pv[rng.integers(0, size)] = pv[0]  # ties
        assert stats.holm(list(pv)) == pytest.approx(list(multipletests(pv, method="holm")[1]))


def test_median_ci_is_seeded_and_handles_degenerate_samples() -> None:
    values = [320, 997, 410, 388, 502, 290, 615, 333, 350, 401]
    first, second = stats.median_ci(values, seed=7), stats.median_ci(values, seed=7)
    assert first == second
    assert first.low <= first.estimate <= first.high
    assert first.estimate == pytest.approx(394.5)
    assert stats.median_ci([5.0, 5.0, 5.0]) == stats.Interval(5.0, 5.0, 5.0)
    assert math.isnan(stats.median_ci([]).estimate)
    big = stats.median_ci(list(range(5001)))  # order-statistic path
    assert big.estimate == 2500 and big.low < 2500 < big.high


def test_pearson_chi2_is_scipys_chi2_contingency_to_the_bit() -> None:
    """heterogeneity's chi-square, written with scipy's steps, against the scipy call it replaces:
    2-40 rows, counts from 0 to thousands, ties, rows equal to each other, and the 2 x 2 case."""
    from scipy import stats as sps

    rng = np.random.default_rng(11)
    tables = [
        np.array([[1.0, 1.0], [1.0, 1.0]]),
        np.array([[0.0, 5.0], [3.0, 2.0]]),
        np.array([[7.0, 0.0], [0.0, 9.0]]),
    ]
    for _ in range(400):
        rows = int(rng.integers(2, 41))
        n = rng.integers(1, int(rng.choice([5, 40, 5000])) + 1, rows)
        k = rng.binomial(n, rng.uniform(0.0, 1.0))
        table = np.column_stack([k, n - k]).astype(float)
        if table[:, 0].sum() and table[:, 1].sum():
            tables.append(table)
    for table in tables:
        want = sps.chi2_contingency(table, correction=False)
        assert stats.pearson_chi2(table) == (float(want.statistic), float(want.pvalue)), table


def test_fisher_exact_remembered_is_the_same_number() -> None:
    """The memo returns what scipy returns, for ints and numpy ints alike, and keeps validating."""
    from scipy import stats as sps

    for k1, n1, k2, n2 in [(0, 10, 3, 10), (5, 40, 5, 40), (17, 200, 6, 200), (0, 1, 1, 1)]:
        want = float(sps.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]).pvalue)
        assert stats.fisher_exact(k1, n1, k2, n2) == want
        assert stats.fisher_exact(np.int64(k1), np.int64(n1), np.int64(k2), np.int64(n2)) == want
    with pytest.raises(ValueError, match="invalid count"):
        stats.fisher_exact(3, 2, 0, 1)


def _tables(rng: np.random.Generator) -> list[tuple[int, int, int, int]]:
    """(k1, n1, k2, n2): every table with up to 5 sessions a side (all the edges: 0 and n events,
    equal and opposite margins), then random ones of up to a million sessions at sweep-like rates."""
    sizes = itertools.product(range(1, 6), repeat=2)
    small = [(k1, n1, k2, n2) for n1, n2 in sizes for k1 in range(n1 + 1) for k2 in range(n2 + 1)]
    big = []
    for n1, n2, p in zip(rng.integers(1, 10**6, 150), rng.integers(1, 10**6, 150), rng.random(150) * 0.3, strict=True):
        big.append((int(rng.binomial(n1, p)), int(n1), int(rng.binomial(n2, p * 2 * rng.random())), int(n2)))
    for n1, n2, p in zip(rng.integers(6, 400, 150), rng.integers(6, 400, 150), rng.random(150) * 0.5, strict=True):
        big.append((int(rng.binomial(n1, p)), int(n1), int(rng.binomial(n2, p)), int(n2)))
    return small + big


def test_wilson_and_newcombe_are_statsmodels_to_the_bit() -> None:
    """stats writes out statsmodels' Wilson and Newcombe intervals (so a report imports neither
    statsmodels nor scipy.stats): the same floats as the calls they replace, not approximately."""
    from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

    rng = np.random.default_rng(20261204)
    counts = [(k, n) for n in range(1, 31) for k in range(n + 1)]
    counts += [(int(rng.binomial(n, 0.2 * rng.random())), int(n)) for n in rng.integers(31, 10**7, 200)]
    for confidence in (0.95, 0.99, 0.5):
        for k, n in counts:
            want = proportion_confint(k, n, alpha=1 - confidence, method="wilson")
            assert stats._wilson_bounds(k, n, confidence) == (float(want[0]), float(want[1])), (k, n, confidence)
            low, high = stats.wilson_interval(k, n, confidence)  # the same but at the edges, 0 and 1 exactly
            assert (low, high) == (0.0 if k == 0 else want[0], 1.0 if k == n else want[1])
    for confidence in (0.95, 0.99):
        for k1, n1, k2, n2 in _tables(rng):
            want = confint_proportions_2indep(k1, n1, k2, n2, method="newcomb", compare="diff", alpha=1 - confidence)
            got = stats.rate_difference_ci(k1, n1, k2, n2, confidence)
            assert got == (float(want[0]), float(want[1])), (k1, n1, k2, n2, confidence)


def test_fisher_exact_is_scipys_to_the_bit() -> None:
    """stats runs scipy's two-sided Fisher algorithm on core.dist's hypergeometric functions: the
    same p as scipy.stats.fisher_exact on every table, to the bit (the memo bypassed)."""
    from scipy import stats as sps

    for k1, n1, k2, n2 in _tables(np.random.default_rng(20261205)):
        want = float(sps.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]], alternative="two-sided").pvalue)
        assert stats._fisher_p.__wrapped__(k1, n1, k2, n2) == want, (k1, n1, k2, n2)


def test_binomial_test_is_scipys_binomtest_to_the_bit() -> None:
    """stats.binomial_test runs scipy.stats.binomtest's two-sided steps on core.dist: the same p
    on every k of n <= 25 at edge and plain rates, and on random counts of up to 10^9."""
    from scipy import stats as sps

    rng = np.random.default_rng(20261209)
    cases = [(k, n, p) for n in range(1, 26) for k in range(n + 1) for p in (0.0, 0.1, 1 / 3, 0.5, 0.9, 1.0)]
    for _ in range(400):
        n, p = int(rng.integers(1, 10**9)), float(rng.random())
        cases.append((int(rng.binomial(n, min(1.0, p * (0.9 + 0.2 * rng.random())))), n, p))
    for k, n, p in cases:
        assert stats.binomial_test(k, n, p) == float(sps.binomtest(k, n, p).pvalue), (k, n, p)


def test_pooled_test_is_fisher_up_to_its_bound_and_the_binomial_beyond() -> None:
    """Fisher's exact test costs time linear in the sessions when events are few (5 and 7 events
    in 10^10 sessions a side took 25 s); past FISHER_SESSIONS the binomial test of side 1's share
    of the events stands in (of the non-events when those are fewer)."""
    assert stats.pooled_test(3, 10**6, 20, 10**6) == stats.PooledTest(stats.fisher_exact(3, 10**6, 20, 10**6), True)
    big = 10**12  # Fisher here: hours
    assert stats.pooled_test(5, big, 7, big) == stats.PooledTest(stats.binomial_test(5, 12, 0.5), False)
    assert stats.pooled_test(big - 5, big, big - 7, big) == stats.PooledTest(stats.binomial_test(5, 12, 0.5), False)
    assert stats.pooled_test(0, big, 0, big) == stats.PooledTest(1.0, False)
    with pytest.raises(ValueError, match="invalid count"):
        stats.pooled_test(5, 4, 0, big)


def test_trend_test_is_statsmodels_ordinal_association_to_the_bit() -> None:
    """The drift check's trend test writes out statsmodels' Table(...).test_ordinal_association
    (zero cells counted as 0.5, as Table does): the same z and p on random round tables, with
    zero cells, tied and spread scores, and a table whose scores are all equal (z undefined)."""
    import warnings

    from statsmodels.stats.contingency_tables import Table

    rng = np.random.default_rng(20261206)
    cases = [(np.array([[0.0, 40.0], [6.0, 34.0], [0.0, 40.0]]), np.array([0.0, 1.0, 2.0]))]
    cases.append((np.array([[3.0, 37.0], [5.0, 35.0]]), np.array([4.0, 4.0])))  # equal scores: nan
    while len(cases) < 400:
        rows = int(rng.integers(2, 9))
        n = rng.integers(1, 300, rows)
        k = np.minimum(rng.binomial(n, 0.3 * rng.random() * (1 + rng.random(rows))), n)
        table = stats._two_column_table(list(zip(k.tolist(), n.tolist(), strict=True)))
        if table is not None:
            spread = np.sort(rng.choice(20, rows, replace=False)).astype(float)
            cases.append((table, spread if len(cases) % 2 else np.arange(rows, dtype=float)))
    columns = np.array([0.0, 1.0])
    for table, scores in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # statsmodels warns where z is undefined; ours stays quiet
            want = Table(table).test_ordinal_association(row_scores=scores, col_scores=columns)
        got = np.array(stats._ordinal_association(table, scores, columns))
        assert np.array_equal(got, [float(want.zscore), float(want.pvalue)], equal_nan=True), table
    assert stats.trend([(3, 40), (5, 40)], [4.0, 4.0]) == 1.0  # undefined: no evidence of a trend


def test_min_detectable_difference_and_its_power_by_simulation() -> None:
    mdd = stats.min_detectable_difference(120, 0.02)
    assert 0.05 < mdd < 0.12
    assert stats.min_detectable_difference(40, 0.02) > mdd  # fewer sessions, coarser
    assert stats.min_detectable_difference(0, 0.1) == pytest.approx(0.9)
    rng = np.random.default_rng(11)
    hits = sum(
        stats.fisher_exact(int(rng.binomial(120, 0.02 + mdd)), 120, int(rng.binomial(120, 0.02)), 120) < 0.05
        for _ in range(400)
    )
    power = hits / 400
    print(f"\n[stats] MDD(n=120, p0=2%) = {mdd:.3f}; simulated Fisher power there = {power:.2f}")
    assert 0.6 <= power <= 0.95  # Fisher is a bit conservative vs the normal approximation


def test_drift_check_flags_a_trend_and_not_a_stable_baseline() -> None:
    drifting = [stats.RoundCount(i, k, 40) for i, k in enumerate([0, 1, 3, 6, 9])]
    assert stats.drift_check(drifting).flagged
    stable = [stats.RoundCount(i, k, 40) for i, k in enumerate([2, 1, 2, 3, 2])]
    result = stats.drift_check(stable)
    assert not result.flagged and result.p_homogeneity > 0.2
    assert not stats.drift_check([stats.RoundCount(0, 0, 40), stats.RoundCount(1, 0, 40)]).flagged
    assert not stats.drift_check([stats.RoundCount(0, 5, 40)]).flagged


def test_drift_check_false_alarm_rate_is_bounded() -> None:
    rng = np.random.default_rng(5)
    alarms = sum(
        stats.drift_check([stats.RoundCount(r, int(rng.binomial(40, 0.15)), 40) for r in range(5)]).flagged
        for _ in range(300)
    )
    print(f"\n[stats] drift false alarms on a stable 15% baseline: {alarms}/300")
    assert alarms / 300 <= 0.07


def _dsv4_cells(k_all_on: int = 20, n: int = 120) -> list[stats.CellCount]:
    cells = []
    for bf16, overlap, graph in itertools.product(["off", "on"], repeat=3):
        k = k_all_on if (bf16, overlap, graph) == ("on", "on", "on") else 0
        cells.append(stats.CellCount({"bf16": bf16, "overlap": overlap, "graph": graph}, k, n))
    return cells


FACTORS = {"bf16": ["off", "on"], "overlap": ["off", "on"], "graph": ["off", "on"]}
REFERENCE = {"bf16": "off", "overlap": "off", "graph": "off"}


def test_factor_effects_show_that_overlap_matters_only_with_cuda_graph() -> None:
    effects = stats.factor_effects(_dsv4_cells(), FACTORS, REFERENCE)
    main = {e.factor: e for e in effects.main}
    assert main["overlap"].interval.estimate == pytest.approx(20 / 120 / 4)
    assert main["overlap"].clear and main["overlap"].strata == 4
    cond = {(e.factor, e.given): e for e in effects.conditional}
    with_graph = cond[("overlap", (("graph", "on"),))]
    without_graph = cond[("overlap", (("graph", "off"),))]
    assert with_graph.clear and with_graph.interval.estimate == pytest.approx(20 / 120 / 2)
    assert not without_graph.clear and without_graph.interval.estimate == 0.0
    inter = {(i.factor, i.moderator): i for i in effects.interactions}
    assert inter[("overlap", "graph")].clear
    assert inter[("overlap", "graph")].interval.estimate == pytest.approx(20 / 120 / 2)


def test_factor_effects_null_when_nothing_differs() -> None:
    cells = [stats.CellCount(c.levels, 3, 120) for c in _dsv4_cells()]
    effects = stats.factor_effects(cells, FACTORS, REFERENCE)
    assert effects.main and not any(e.clear for e in effects.main)
    assert not any(i.clear for i in effects.interactions)


def test_factor_effects_use_only_matched_strata_and_pool_duplicates() -> None:
    cells = [
        stats.CellCount({"a": "off", "b": "off"}, 0, 40),
        stats.CellCount({"a": "off", "b": "off"}, 2, 40),  # a replicate: pooled with the first
        stats.CellCount({"a": "on", "b": "off"}, 10, 80),
        stats.CellCount({"a": "on", "b": "on"}, 40, 40),  # no a=off twin: not a stratum for a
    ]
    effects = stats.factor_effects(cells, {"a": ["off", "on"], "b": ["off", "on"]}, {"a": "off", "b": "off"})
    main = {e.factor: e for e in effects.main}
    assert main["a"].strata == 1
    assert main["a"].interval.estimate == pytest.approx(10 / 80 - 2 / 80)


def test_wilson_coverage_over_simulated_sweeps() -> None:
    """Known true rates (from clean to the DSV4 15-18% and beyond), 3 trials x 40 sessions."""
    rng = np.random.default_rng(20260509)
    rates = [0.02, 0.05, 0.10, 0.15, 0.18, 0.30, 0.50, 0.70]
    n, sweeps = 120, 600
    per_sweep = []
    for _ in range(sweeps):
        ks = rng.binomial(n, rates)
        covered = []
        for p, k in zip(rates, ks, strict=True):
            low, high = stats.wilson_interval(int(k), n)
            covered.append(low <= p <= high)
        per_sweep.append(np.mean(covered))
    coverage = float(np.mean(per_sweep))
    print(f"\n[stats] 95% Wilson coverage over {sweeps} sweeps x {len(rates)} cells: {coverage:.3f}")
    assert 0.93 <= coverage <= 0.97


def test_aa_fisher_false_positive_rate() -> None:
    """Same true rate (15%) in a baseline and 7 other cells: how often is Fisher fooled?"""
    rng = np.random.default_rng(42)
    n, sweeps, cells = 120, 600, 7
    significant = 0
    tables: dict[tuple[int, int], float] = {}  # sweeps repeat tables: each distinct one is computed once
    for _ in range(sweeps):
        base = int(rng.binomial(n, 0.15))
        others = rng.binomial(n, 0.15, size=cells)
        for k in others:
            key = (int(k), base)
            if key not in tables:
                tables[key] = stats.fisher_exact(key[0], n, base, n)
            significant += tables[key] < 0.05
    fraction = significant / (sweeps * cells)
    print(f"\n[stats] A/A Fisher p<0.05 in {fraction:.3%} of {sweeps * cells} comparisons")
    assert fraction <= 0.055


def test_newcombe_difference_coverage() -> None:
    rng = np.random.default_rng(3)
    p1, p2, n, trials = 0.15, 0.02, 120, 800
    k1s, k2s = rng.binomial(n, p1, size=trials), rng.binomial(n, p2, size=trials)
    hits = 0
    for k1, k2 in zip(k1s, k2s, strict=True):
        low, high = stats.rate_difference_ci(int(k1), n, int(k2), n)
        hits += low <= p1 - p2 <= high
    print(f"\n[stats] Newcombe 95% coverage of a 13-point difference: {hits / trials:.3f}")
    assert 0.93 <= hits / trials <= 0.975
