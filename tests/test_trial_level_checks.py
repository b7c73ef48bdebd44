"""The trial is the unit of replication in the report's side checks too: baseline drift across
rounds, testbeds of a parallel run, and the rate interval a gate certifies.

Each Monte-Carlo test simulates trials whose rate varies from restart to restart (beta-binomial,
intra-trial correlation ICC) and checks the error rate a check claims: a session-level test there
calls trial-to-trial variation drift (39% of A/A runs), calls identical testbeds different (39%),
and passes a gate above its bound (12%). Seeded, so each result is one fixed number.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from helpers.cell_runs import cell_run

from orchestrator.core import clustered, stats
from orchestrator.core.gates import Gate
from orchestrator.core.records import TrialRecord
from orchestrator.report import build
from orchestrator.report.gates import check_gates

ONE = {"a": ["on", "off"]}
ONE_BASE = {"a": "on"}
ONE_CELLS = ({"a": "on"}, {"a": "off"})
THREE = {"a": ["on", "off"], "b": ["on", "off"], "c": ["on", "off"]}
THREE_BASE = {"a": "on", "b": "on", "c": "on"}


@pytest.fixture
def no_power(monkeypatch: pytest.MonkeyPatch) -> None:
    """The power simulation is slow and has nothing to do with these checks."""
    monkeypatch.setattr(build, "_power_text", lambda *a, **k: "")


def _trial_rates(rng: np.random.Generator, p: float, icc: float, size: int | tuple[int, ...]) -> np.ndarray:
    """Each trial's own rate: beta around p with intra-trial correlation icc (p itself at 0)."""
    if not icc:
        return np.full(size, p)
    s = (1 - icc) / icc
    return rng.beta(p * s, (1 - p) * s, size=size)


def _bound(rate: float, sims: int) -> float:
    """The claimed rate plus two Monte-Carlo standard errors."""
    return rate + 2 * math.sqrt(rate * (1 - rate) / sims)


# ----------------------------------------------------------------------------- drift


def _drift_alarms(icc: float, sims: int, seed: int) -> tuple[float, float]:
    """A/A without drift: 2 cells at 15%, 5 rounds of one 40-session trial each. Returns how often
    the report cautions that the baseline drifted, and how often the run is called suspect for it."""
    rng = np.random.default_rng(seed)
    caution = suspect = 0
    for _ in range(sims):
        spec = [
            (levels, [(int(k), 40) for k in rng.binomial(40, _trial_rates(rng, 0.15, icc, 5))])
            for levels in ({"a": "on"}, {"a": "off"})
        ]
        report = build.build_report(*cell_run(ONE, ONE_BASE, spec))
        caution += any("drifted across rounds" in f.text for f in report.headline)
        suspect += any("drifted across rounds" in s for s in build.suspect_reasons(report))
    return caution / sims, suspect / sims


@pytest.mark.usefixtures("no_power")
def test_drift_is_not_called_on_trial_to_trial_variation() -> None:
    """ICC 0.05, no drift: the session-level check cautioned in 39% of runs (5% claimed)."""
    caution, suspect = _drift_alarms(0.05, 300, seed=7)
    assert caution <= _bound(0.05, 300) and suspect <= _bound(0.05, 300), (caution, suspect)


@pytest.mark.usefixtures("no_power")
def test_drift_false_alarm_stays_bounded_with_independent_sessions() -> None:
    caution, _ = _drift_alarms(0.0, 300, seed=8)
    assert caution <= _bound(0.05, 300)


def test_sparse_cells_do_not_make_the_round_spread_too_small() -> None:
    """8 cells at 2% of 40 sessions, 20 rounds, ICC 0.05: a mean of Pearson terms put phi at 2.2
    (true 2.95) and flagged drift in 12% of A/A runs; the ratio of sums keeps it near 5%."""
    rng = np.random.default_rng(11)
    sims, flagged = 600, 0
    for _ in range(sims):
        k = rng.binomial(40, _trial_rates(rng, 0.02, 0.05, (8, 20))).astype(float)
        spread = clustered.round_dispersion(k, np.full((8, 20), 40.0))
        rounds = [stats.RoundCount(r, int(k[0, r]), 40) for r in range(20)]
        flagged += stats.drift_check(rounds, spread=spread).flagged
    assert flagged / sims <= _bound(0.05, sims)


def test_round_dispersion_is_the_binomial_glm_pearson_spread() -> None:
    """The cell + round logit fit matches a binomial GLM's fitted rates (ratio of sums over them)."""
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(2)
    n = np.full((4, 6), 40.0)
    n[1, 2] = 0
    k = rng.binomial(n.astype(int), np.array([0.15, 0.05, 0.1, 0.3])[:, None]).astype(float)
    phi, df = clustered.round_dispersion(k, n)
    cells, rounds = np.nonzero(n)
    design = np.column_stack(
        [np.ones(cells.size)] + [cells == c for c in range(1, 4)] + [rounds == r for r in range(1, 6)]
    )
    endog = np.column_stack([k[cells, rounds], n[cells, rounds] - k[cells, rounds]])
    fitted = sm.GLM(endog, design.astype(float), family=sm.families.Binomial()).fit().fittedvalues
    seen = ((k[cells, rounds] - n[cells, rounds] * fitted) ** 2).sum()
    expected = (n[cells, rounds] * fitted * (1 - fitted)).sum()
    assert df == 23 - (4 + 6 - 1)
    assert phi == pytest.approx(seen / expected * 23 / df, rel=1e-6)


@pytest.mark.usefixtures("no_power")
def test_a_real_drift_is_still_flagged_when_the_spread_is_estimated() -> None:
    """The deployment drifts: both cells climb over 5 rounds (baseline 0 -> 35%). A drift shared by
    the cells is the round term of the cell + round fit, so the spread it is tested against is
    what is left (a drift in the baseline alone is, with two cells, indistinguishable from noise)."""
    spec = [
        ({"a": "on"}, [(0, 40), (1, 40), (4, 40), (8, 40), (14, 40)]),
        ({"a": "off"}, [(1, 40), (3, 40), (5, 40), (9, 40), (12, 40)]),
    ]
    report = build.build_report(*cell_run(ONE, ONE_BASE, spec))
    assert report.drift[0].flagged
    assert any("drifted across rounds" in r for r in build.suspect_reasons(report))


@pytest.mark.usefixtures("no_power")
def test_drift_without_an_estimable_spread_is_tested_against_the_assumed_spread() -> None:
    """Only the baseline saw events: nothing estimates its round-to-round spread, so the check
    takes the least design effect orch assumes as known and says so; a steep climb is still
    flagged, a spread the assumed variation explains is not."""
    spec = [({"a": "on"}, [(0, 40), (1, 40), (4, 40), (8, 40), (14, 40)]), ({"a": "off"}, [(0, 40)] * 5)]
    report = build.build_report(*cell_run(ONE, ONE_BASE, spec))
    [view] = report.drift
    assert view.flagged and view.assumed
    assert any("drifted across rounds" in r for r in build.suspect_reasons(report))
    [caution] = [f.text for f in report.headline if "drifted across rounds" in f.text]
    assert clustered.ASSUMED_NOTE in caution
    # the p-values are tested against phi = 1 + 39 * 0.005, known: larger than the binomial ones
    binomial = stats.drift_check([stats.RoundCount(r.round, r.k, r.n) for r in view.rounds])
    assert view.p_homogeneity > binomial.p_homogeneity and view.p_trend > binomial.p_trend
    mild = [({"a": "on"}, [(2, 40), (4, 40), (3, 40), (5, 40), (3, 40)]), ({"a": "off"}, [(0, 40)] * 5)]
    [calm] = build.build_report(*cell_run(ONE, ONE_BASE, mild)).drift
    assert calm.assumed and not calm.flagged


# ----------------------------------------------------------------------------- testbeds

TESTBED_RATES = [0.15, 0.15, 0.05, 0.05, 0.02, 0.02, 0.02, 0.02]


def _parallel_run(rng: np.random.Generator, icc: float, shift: float = 0.0) -> list[TrialRecord]:
    """8 cells x 4 trials of 40 sessions, trials alternating between testbeds tb0 and tb1; tb1 runs
    the first cell `shift` higher."""
    cells = [dict(zip(THREE, combo, strict=True)) for combo in itertools.product(*THREE.values())]
    spec = []
    for index, (levels, p) in enumerate(zip(cells, TESTBED_RATES, strict=True)):
        means = np.array([p + (shift if index == 0 and r % 2 else 0.0) for r in range(4)])
        rates = np.array([_trial_rates(rng, m, icc, 1)[0] for m in means])
        spec.append((levels, [(int(k), 40) for k in rng.binomial(40, rates)]))
    _, records = cell_run(THREE, THREE_BASE, spec)
    return [r.model_copy(update={"testbed": f"tb{r.round % 2}"}) for r in records]


def _differ_rate(icc: float, sims: int, seed: int, shift: float = 0.0) -> float:
    rng = np.random.default_rng(seed)
    found = (build.testbed_findings(_parallel_run(rng, icc, shift), "corruption") for _ in range(sims))
    return sum(any(f.text.startswith("Testbeds differ") for f in fs) for fs in found) / sims


def test_identical_testbeds_are_not_called_different_when_trials_vary() -> None:
    """ICC 0.05: the session-level test said 'Testbeds differ' in 39% of runs (Holm claims 5%)."""
    assert _differ_rate(0.05, 500, seed=3) <= _bound(0.05, 500)


def test_identical_testbeds_with_independent_sessions_stay_under_5_percent() -> None:
    assert _differ_rate(0.0, 500, seed=4) <= _bound(0.05, 500)


def test_a_testbed_that_really_differs_is_still_found() -> None:
    """tb1 runs the first cell at 75% instead of 15% (ICC 0.05): found in most runs (78% here;
    2 trials per testbed and cell leave phi about 8 df, and Holm runs over 8 cells)."""
    assert _differ_rate(0.05, 200, seed=5, shift=0.60) >= 0.6


def test_testbeds_without_replicates_say_what_they_assume() -> None:
    """One trial per cell and testbed: the least design effect is assumed, and said."""
    records = [_one_trial("tb1", 20, 0), _one_trial("tb2", 0, 1)]
    [finding] = build.testbed_findings(records, "corruption")
    assert finding.kind == "caution" and clustered.ASSUMED_NOTE in finding.text


def _one_trial(testbed: str, k: int, index: int) -> TrialRecord:
    _, [record] = cell_run(ONE, ONE_BASE, [({"a": "on"}, [(k, 40)])])
    return record.model_copy(update={"testbed": testbed, "trial": index})


# ----------------------------------------------------------------------------- gates


def _gate_pass_rate(sims: int, seed: int) -> float:
    """2 cells x 2 trials x 200 sessions at a true 1.2%, ICC 0.05, gate `upper: 0.01`.

    Every run counts; a run whose counts an earlier run already had reuses that run's gate results
    (the report is a pure function of its records: a third of the 300 runs repeat one)."""
    rng = np.random.default_rng(seed)
    gate = Gate(name="clean", metric="corruption", upper=0.01)
    passed = total = 0
    seen: dict[tuple[tuple[int, ...], ...], tuple[int, int]] = {}
    for _ in range(sims):
        counts = tuple(tuple(int(k) for k in rng.binomial(200, _trial_rates(rng, 0.012, 0.05, 2))) for _ in ONE_CELLS)
        if counts not in seen:
            spec = [(levels, [(k, 200) for k in ks]) for levels, ks in zip(ONE_CELLS, counts, strict=True)]
            manifest, records = cell_run(ONE, ONE_BASE, spec)
            results = check_gates(build.build_report(manifest.model_copy(update={"gates": [gate]}), records))
            seen[counts] = (sum(r.passed for r in results), len(results))
        passed += seen[counts][0]
        total += seen[counts][1]
    return passed / total


@pytest.mark.usefixtures("no_power")
def test_an_upper_gate_above_its_bound_passes_at_most_2_5_percent() -> None:
    """The session-pooled interval passed this gate in 12.1% of runs (a 95% bound allows 2.5%)."""
    assert _gate_pass_rate(300, seed=5) <= _bound(0.025, 300)


@pytest.mark.usefixtures("no_power")
def test_zero_event_trials_do_not_certify_a_gate_as_independent_sessions() -> None:
    """Every trial 0/200: Wilson on 0/400 (0.951%) passed; the assumed design effect of
    1 + 199 * 0.005 = 1.995 gives 3.84 / (200.5 + 3.84) = 1.88%, and the page and the gate say so."""
    spec = [(levels, [(0, 200), (0, 200)]) for levels in ({"a": "on"}, {"a": "off"})]
    manifest, records = cell_run(ONE, ONE_BASE, spec)
    gate = Gate(name="clean", metric="corruption", upper=0.01)
    report = build.build_report(manifest.model_copy(update={"gates": [gate]}), records)
    results = check_gates(report)
    assert [r.passed for r in results] == [False, False]
    assert results[0].high == pytest.approx(1.96**2 / (400 / 1.995 + 1.96**2), rel=1e-3)
    assert all(clustered.ASSUMED_NOTE in r.message for r in results)
    assert clustered.ASSUMED_NOTE in report.comparison["corruption"]
    rate = report.cells[0].proportions["corruption"].rate
    assert (rate.low, rate.high) == (results[0].low, results[0].high)  # the page shows what the gate checks


@pytest.mark.usefixtures("no_power")
def test_an_estimated_dispersion_gate_message_claims_no_assumption() -> None:
    spec = [(levels, [(3, 200), (9, 200), (1, 200)]) for levels in ({"a": "on"}, {"a": "off"})]
    manifest, records = cell_run(ONE, ONE_BASE, spec)
    gate = Gate(name="clean", metric="corruption", upper=0.5)
    results = check_gates(build.build_report(manifest.model_copy(update={"gates": [gate]}), records))
    assert results and all(r.passed and clustered.ASSUMED_NOTE not in r.message for r in results)
