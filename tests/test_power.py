"""Power as stated in the report and in `orch plan` equals simulated power (pure, seeded).

The old report said "80% power only for differences of about 1.0 points" whenever the baseline
was 0% (a cap in the approximation); the true figure for 0/80 is about 10 points.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from helpers.report_synth import synthetic_run
from rich.console import Console
from scipy import stats as sps

from orchestrator.cli.planview import power_lines, print_plan
from orchestrator.core import clustered, clustersim, power
from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.plan import make_plan
from orchestrator.report.build import build_report


def _simulated(n1: int, n2: int, p1: float, p2: float, alpha: float = 0.05, draws: int = 20000, seed: int = 0) -> float:
    """Fisher's test on simulated binomial pairs (the table equals scipy's test: checked below)."""
    rng = np.random.default_rng(seed)
    table = power.fisher_pvalues(n1, n2)
    k1, k2 = rng.binomial(n1, p1, size=draws), rng.binomial(n2, p2, size=draws)
    return float(np.mean(table[k1, k2] < alpha))


def test_fisher_table_is_scipys_fisher_exact() -> None:
    rng = np.random.default_rng(1)
    for n1, n2 in ((80, 80), (40, 120), (7, 3)):
        table = power.fisher_pvalues(n1, n2)
        for _ in range(150):
            k1, k2 = int(rng.integers(0, n1 + 1)), int(rng.integers(0, n2 + 1))
            expected = sps.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]).pvalue
            assert table[k1, k2] == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_zero_baseline_needs_about_10_points_not_1() -> None:
    d = power.detectable(80, 80, 0.0)
    assert d.rise is not None and 0.09 <= d.rise <= 0.105  # 9.7 points
    assert d.fall is None  # nothing is below 0%


@pytest.mark.parametrize(
    ("n_cell", "n_base", "p0"),
    [(80, 80, 0.0), (80, 80, 0.15), (120, 120, 0.05), (40, 120, 0.02), (200, 200, 0.5)],
)
def test_stated_power_is_within_2_points_of_simulated(n_cell: int, n_base: int, p0: float) -> None:
    d = power.detectable(n_cell, n_base, p0)
    for diff in (d.rise, -d.fall if d.fall is not None else None):
        if diff is None:
            continue
        simulated = _simulated(n_cell, n_base, p0 + diff, p0, seed=n_cell + int(p0 * 100))
        assert abs(simulated - 0.8) <= 0.02, (n_cell, n_base, p0, diff, simulated)
    print(f"\n[power] {n_cell} vs {n_base} at {p0:.0%}: rise {d.rise}, fall {d.fall}")


def _report_test_power(rates: list[float], trials: int, sessions: int, alpha: float, seed: int) -> float:
    """The power of the report's own cell test (quasi-binomial, or the likelihood ratio on the
    trials where the spread rests on too little) for rates[1] vs rates[0], simulated by clustersim."""
    k = clustersim.beta_binomial_trials(np.random.default_rng(seed), 6000, rates, trials, sessions, 0.0)
    return float(np.mean(clustersim.cell_p_values(k, sessions, with_old=False)[1][:, 0] < alpha))


def test_the_reports_power_sentence_matches_simulation() -> None:
    # two trials of 40 sessions, no event anywhere: nothing estimates trial-to-trial variation, but a
    # cell that rose would give its trials events to estimate it by, and the report would compare it by
    # its trial-level test: the power stated is that test's (it was Fisher's on 80 vs 80 sessions, which
    # the report never runs on a difference with replicates; one trial a cell is untested:
    # test_clustered_stats)
    manifest, records = synthetic_run(replicates=2, sessions=40, rate=lambda levels: 0.0, failures=False)
    report = build_report(manifest, records)
    null = next(f.text for f in report.headline if f.kind == "null")
    assert "80% power only for differences of about +" in null and "1.0 points" not in null
    rise = float(re.search(r"about \+([0-9.]+) points", null).group(1)) / 100  # type: ignore[union-attr]
    assert "points (to " in null and ", as a rate of 0% cannot fall (" in null  # at a 0% baseline nothing can
    simulated = _report_test_power([0.0, rise] + [0.0] * 6, 2, 40, 0.05, seed=3)
    assert abs(simulated - 0.8) <= 0.02, (rise, simulated)
    holm = re.search(r"Holm's first step over (\d+) tests: (?:\+([0-9.]+) points|no rise)", null)
    assert holm is not None
    tests = int(holm.group(1))
    assert tests == sum(report.tests.values()) > report.tests["corruption"]  # one family: every metric
    if holm.group(2) is not None:  # else no rise reaches 80% at Holm's step: nothing promised
        strict = float(holm.group(2)) / 100
        # near 100% the power climbs ~10 points per 0.1 point of rise: the solved figure within a step of 80%
        at = [_report_test_power([0.0, r] + [0.0] * 6, 2, 40, 0.05 / tests, seed=4) for r in (strict - 0.002, strict)]
        assert at[0] <= 0.82 and at[1] >= 0.78, (strict, at)


@pytest.mark.parametrize(("trials", "phi", "p0"), [(4, 1.0, 0.15), (6, 1.5, 0.05), (3, 1.0, 0.0)])
def test_quasi_binomial_power_is_within_2_points_of_an_independent_simulation(
    trials: int, phi: float, p0: float
) -> None:
    """With replicates the report compares cells by the quasi-binomial test; its stated power is
    simulated on the design (core.power.quasi_detectable). Checked against the sweep simulator
    the clustered tests use (beta-binomial trials, the report's own cell p-values), another seed."""
    sessions, others = 40, (0.0, 0.02, 0.15, 0.0, 0.01, 0.0)
    design = power.Design(sessions=sessions, trials=trials, other_rates=others, phi=phi)
    d = power.quasi_detectable(design, p0)
    icc = (phi - 1) / (sessions - 1)
    for diff in (d.rise, -d.fall if d.fall is not None else None):
        if diff is None:
            continue
        rng = np.random.default_rng(99)
        k = clustersim.beta_binomial_trials(rng, 6000, [p0, p0 + diff, *others], trials, sessions, icc)
        _, p = clustersim.cell_p_values(k, sessions, with_old=False)
        simulated = float(np.mean(p[:, 0] < 0.05))
        assert abs(simulated - 0.8) <= 0.02, (trials, phi, p0, diff, simulated)
    assert d.rise is not None


def test_the_reports_quasi_power_sentence_is_the_simulated_one() -> None:
    manifest, records = synthetic_run(replicates=4, rate=lambda levels: 0.05, failures=False)
    report = build_report(manifest, records)
    null = next(f.text for f in report.headline if f.kind == "null")
    assert "this run's quasi-binomial comparison had 80% power only for differences of about +" in null
    rise = float(re.search(r"about \+([0-9.]+) points", null).group(1)) / 100  # type: ignore[union-attr]
    base = next(c for c in report.cells if c.is_baseline).proportions["corruption"].rate
    others = [c.proportions["corruption"].rate.rate or 0.0 for c in report.cells if not c.is_baseline][1:]
    phi = float(re.search(r"dispersion ([0-9.]+);", null).group(1))  # type: ignore[union-attr]
    assert phi == pytest.approx(max(1.0, report.dispersion["corruption"]), abs=0.005)
    rng = np.random.default_rng(7)
    rates = [base.k / base.n, base.k / base.n + rise, *others]
    k = clustersim.beta_binomial_trials(rng, 6000, rates, 4, 40, (phi - 1) / 39)
    _, p = clustersim.cell_p_values(k, 40, with_old=False)
    assert abs(float(np.mean(p[:, 0] < 0.05)) - 0.8) <= 0.02


def test_plan_states_power_before_the_sweep_and_numeric_floors() -> None:
    repo = Path(__file__).resolve().parents[1]
    matrix = read_matrix(repo / "matrices" / "overlap_ablation.yaml")
    inventory = read_inventory(repo / "inventory" / "local.yaml")
    plan = make_plan(matrix, next(iter(inventory.testbeds.values())), 1, 2)  # 2 replicates (the demo runs 4)
    lines = power_lines(plan)
    text = "\n".join(lines)
    assert "80 sessions per cell (40 x 2 trials)" in text
    fisher = lines.index(next(x for x in lines if x.startswith("  for reference, Fisher's exact test")))
    zero = lines[fisher + 1]  # Fisher's at a 0% baseline
    assert zero.startswith("    baseline at 0%:"), zero
    rise = float(re.search(r"a rise to ([0-9.]+)%", zero).group(1)) / 100  # type: ignore[union-attr]
    assert abs(_simulated(80, 80, rise, 0.0, seed=5) - 0.8) <= 0.02
    quasi = lines[lines.index(next(x for x in lines if "the report's test: quasi-binomial" in x)) + 1 :][:4]
    assert [x.split(":")[0].strip() for x in quasi] == [f"baseline at {r}%" for r in (0, 2, 5, 15)]
    fifteen = float(re.search(r"a rise to ([0-9.]+)%", quasi[3]).group(1)) / 100  # type: ignore[union-attr]
    k = clustersim.beta_binomial_trials(np.random.default_rng(8), 6000, [0.15, fifteen] + [0.15] * 6, 2, 40, 0.0)
    assert abs(float(np.mean(clustersim.cell_p_values(k, 40, with_old=False)[1][:, 0] < 0.05)) - 0.8) <= 0.02
    assert "no cell can ever differ significantly from the baseline" in text  # 2 replicates: p >= 1/3
    assert "smallest possible Mann-Whitney p = 0.33" in text and "anomalies" in text
    console = Console(width=200, record=True)
    print_plan(plan, console)
    assert "no cell can ever differ significantly" in console.export_text()


def test_many_other_cells_are_simulated_as_an_even_sample_that_never_overstates_power() -> None:
    """A 4,096-cell matrix: the other cells only inform the pooled dispersion, so quasi_detectable
    simulates an even sample of SIM_MAX_OTHERS of them (seconds, not minutes and gigabytes). With
    fewer degrees of freedom the test can only be wider: the stated difference is never smaller
    than the full design's, and within half a point of it."""
    others = tuple([0.0, 0.01, 0.02, 0.05] * 50)  # 200 other cells: the full design is still cheap
    full_design = power.Design(sessions=40, trials=3, other_rates=others)
    assert len(power._bounded(full_design).other_rates) == power.SIM_MAX_OTHERS
    sampled = power.quasi_detectable(full_design, 0.05)
    full = power._QuasiSim(full_design, 0.05, 0)
    assert sampled.rise is not None
    # the full design's power at the sampled design's stated rise: at least the target
    full_power = float(np.mean(full.reject(0.05 + sampled.rise, 0.05)))
    assert full_power >= 0.8 - 0.005, full_power
    # and not far beyond: half a point lower would still not reach the target on the full design
    assert float(np.mean(full.reject(0.05 + sampled.rise - 0.005, 0.05))) < 0.8
    assert "63 of the 200 other cells" in power.simulation_note(full_design)


def test_a_design_too_large_to_simulate_uses_the_normal_limit_within_the_memory_bound() -> None:
    """`orch plan --replicates 100000`: 100,000 trials of 40 sessions is 4 * 10^6 draws per sweep;
    the simulation used to keep 200 sweeps regardless (13 GB). Beyond SIM_MAX_DRAWS the figure is
    the arcsine approximation on n / dispersion, which the note says."""
    design = power.Design(sessions=40, trials=100_000, other_rates=(0.0,) * 6, phi=2.0)
    assert power._sweeps(design) < power.SIM_MIN_SWEEPS
    d = power.quasi_detectable(design, 0.05)
    n_eff = 40 * 100_000 // 2
    assert (d.rise, d.fall) == power._approximate(n_eff, n_eff, 0.05, 0.05, 0.8)
    assert "normal limit" in power.simulation_note(design)
    for trials in (2, 50, 5000):  # wherever it simulates, it holds at most SIM_MAX_DRAWS numbers
        small = power.Design(sessions=40, trials=trials, other_rates=(0.0,) * 4000)
        bounded = power._bounded(small)
        sweeps = power._sweeps(bounded)
        if sweeps >= power.SIM_MIN_SWEEPS:
            assert sweeps * trials * (40 + 1 + len(bounded.other_rates)) <= power.SIM_MAX_DRAWS


def test_plan_warns_that_one_trial_per_cell_tests_no_proportion() -> None:
    """replicates 1: the report will call no difference in a proportion a finding (audit 1), so
    `orch plan` says so instead of stating Fisher's power on sessions as if it applied."""
    repo = Path(__file__).resolve().parents[1]
    matrix = read_matrix(repo / "matrices" / "overlap_ablation.yaml")
    inventory = read_inventory(repo / "inventory" / "local.yaml")
    plan = make_plan(matrix, next(iter(inventory.testbeds.values())), 1, 1)
    lines = power_lines(plan)
    text = "\n".join(lines)
    assert "Fisher" not in text
    assert lines[0] == "power (corruption): none with one trial per cell (the warning below says why)"
    console = Console(width=400, record=True)
    print_plan(plan, console)
    shown = console.export_text()
    warning = "warning: one trial per cell: the report will show differences in corruption but call none a finding"
    # said once, in the warning (the power line pointed at it; it repeated the whole sentence before)
    assert warning in shown and shown.count("one trial per cell: the report will show") == 1
    assert "--replicates 2 or more" in shown and "8 cells x 1 replicate = 8 trials" in shown
    replicated = "\n".join(power_lines(make_plan(matrix, next(iter(inventory.testbeds.values())), 1, 2)))
    assert "call none a finding" not in replicated
    # the reason in the report's words, from the one place that writes them (core.clustered)
    report = build_report(*synthetic_run(replicates=1, failures=False))
    assert f"({clustered.ONE_TRIAL});" in shown and report.untested["corruption"].startswith(clustered.ONE_TRIAL)


def test_plan_states_the_quasi_tests_power_at_holms_first_step_and_with_events_in_one_cell() -> None:
    """A finding must pass Holm over the report's family; with replicates the report's test is the
    quasi-binomial one, whose few-df tails make Holm's step far dearer than Fisher's, and whose spread
    rests on the compared cells alone when no other cell has events (the DSV4 AND). The plan printed
    the per-comparison power of other cells at the baseline's rate only: at 5 replicates of 40
    sessions 'a rise from 0% to 6.1%', 'a fall from 15% to 6.2%', while the report found the DSV4
    AND's 15% vs 0% in 30-41% of sweeps (bench/bench_truth.py (4)). Each line now also says what
    passing Holm's first step takes, and in that hard shape."""
    repo = Path(__file__).resolve().parents[1]
    matrix = read_matrix(repo / "matrices" / "overlap_ablation.yaml")
    plan = make_plan(matrix, next(iter(read_inventory(repo / "inventory" / "local.yaml").testbeds.values())), 1, 5)
    lines = power_lines(plan)
    tests = int(re.search(r"the first step of the correction over the report's (\d+) tests", lines[0]).group(1))  # type: ignore[union-attr]
    assert tests == 49
    quasi = lines[lines.index(next(x for x in lines if "the report's test: quasi-binomial" in x)) + 1 :][:4]
    zero, fifteen = quasi[0], quasi[3]
    said = re.fullmatch(
        r"    baseline at 0%: detects a rise to 6\.1% \(([0-9.]+)% after Holm\); a rate of 0% cannot fall", zero
    )
    assert said is not None, zero
    holm = float(said.group(1)) / 100
    stated = power.quasi_detectable(power.Design(40, 5, (0.0,) * 6), 0.0, alpha=0.05 / tests)
    assert stated.rise is not None and holm == pytest.approx(stated.rise, abs=0.0005)
    assert holm > 0.15  # a 15-point rise from 0% is not promised at 5 replicates
    assert re.match(
        r"    baseline at 15%: detects a rise to 27\.0% \([0-9.]+% after Holm\) or a fall to 6\.2% \(", fifteen
    ), fifteen
    shape = lines.index(
        next(x for x in lines if x.startswith("  the same test with events in the compared cells only"))
    )
    alone = lines[shape + 1 : shape + 4]  # at 2%, 5%, 15%: at 0% the two shapes are one
    assert [line.split(":")[0] for line in alone] == ["    baseline at 2%", "    baseline at 5%", "    baseline at 15%"]
    # Holm's step is not passed by the DSV4 fix's fall to 0%
    assert alone[2].endswith("(44.1% after Holm) or a fall to 5.2% (none passes Holm, not even to 0%)"), alone
    assert all(re.search(r"[0-9.]+% after Holm|none passes Holm|before or after Holm", line) for line in quasi + alone)


def test_a_replicated_run_without_events_states_the_power_of_the_test_the_report_runs() -> None:
    """2 trials of 10 sessions per cell, no event anywhere. Had a cell risen, its trials would have
    estimated the spread and the report would have compared it by its trial-level test (quasi-binomial,
    or the likelihood ratio on the trials), never by Fisher's on pooled sessions. The sentence stated
    Fisher's power: in a 2x2x2 run of 2 trials of 40, 'to pass Holm's first step over 26 tests: +15.3
    points', while the report marked a cell at 15% significant in 0 of 300 such runs."""
    manifest, records = synthetic_run(replicates=2, sessions=10, rate=lambda levels: 0.0, failures=False)
    report = build_report(manifest, records)
    null = next(f.text for f in report.headline if f.kind == "null")
    assert "quasi-binomial comparison had 80% power" in null and "Fisher" not in null, null
    holm = re.search(r"Holm's first step over (\d+) tests: (?:\+([0-9.]+) points|no rise)", null)
    assert holm is not None, null
    tests = int(holm.group(1))
    if holm.group(2) is None:
        return  # no rise reaches 80% at Holm's step: nothing promised
    strict = float(holm.group(2)) / 100
    k = clustersim.beta_binomial_trials(np.random.default_rng(5), 3000, [0.0, strict] + [0.0] * 6, 2, 10, 0.0)
    assert float(np.mean(clustersim.cell_p_values(k, 10, with_old=False)[1][:, 0] < 0.05 / tests)) >= 0.78


def test_plan_says_fishers_power_is_not_the_test_a_replicated_report_runs() -> None:
    """With replicates the report compares cells by its trial-level test; Fisher's on pooled sessions
    decides nothing there. `orch plan` printed Fisher's power first, as 'power (corruption): ...
    Fisher's exact test, 80% power', more than the report's test has (2 replicates of 40, 49 tests:
    Fisher's 'Holm: a rise to 16.7%' from 0%, the report's own test's 99.8%)."""
    repo = Path(__file__).resolve().parents[1]
    matrix = read_matrix(repo / "matrices" / "overlap_ablation.yaml")
    plan = make_plan(matrix, next(iter(read_inventory(repo / "inventory" / "local.yaml").testbeds.values())), 1, 2)
    lines = power_lines(plan)
    fisher = next(line for line in lines if "Fisher" in line)
    assert "not the report's test with replicates" in fisher and "for reference" in fisher, fisher
    # the report's own test comes first: a reader takes the first figures as the promise
    assert lines.index(next(x for x in lines if "the report's test: quasi-binomial" in x)) < lines.index(fisher)


def test_holms_first_step_solve_reuses_the_first_solves_simulation_and_its_p_values(monkeypatch) -> None:
    """A report solves each design twice (its test's alpha, then alpha / tests): the second reuses the
    first's simulation (the fixed cells' draws) and every rate both bisections visit, with the very
    answer a fresh simulation gives."""
    design = power.Design(sessions=40, trials=4, other_rates=(0.01, 0.02, 0.15), phi=2.0)
    computed: list[float] = []
    original = power._QuasiSim._pvalues

    def counting(self, cell_rate):  # type: ignore[no-untyped-def]
        computed.append(cell_rate)
        return original(self, cell_rate)

    power._shared_sim.cache_clear()
    power.quasi_detectable.cache_clear()
    monkeypatch.setattr(power._QuasiSim, "_pvalues", counting)
    power.quasi_detectable(design, 0.15)
    first = len(computed)
    strict = power.quasi_detectable(design, 0.15, alpha=0.05 / 7)
    second = len(computed) - first
    assert first > 10 and 0 < second < first, (first, second)  # the shared first steps were not redone
    power._shared_sim.cache_clear()
    power.quasi_detectable.cache_clear()
    alone = power.quasi_detectable(design, 0.15, alpha=0.05 / 7)  # a fresh simulation, solved first
    assert (alone.rise, alone.fall) == (strict.rise, strict.fall) and strict.rise is not None
