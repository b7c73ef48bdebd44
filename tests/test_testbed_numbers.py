"""The parallel-testbed check on number metrics (report.testbeds): a testbed 20% slower is named,
identical testbeds are called different in at most 5% of reports (Holm over cells and metrics),
and no difference is said as "not shown", never as agreement."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from helpers.parallel_runs import parallel_trials
from helpers.report_synth import synthetic_run, write_run
from scipy import stats as sps

from orchestrator.core import stats
from orchestrator.core.records import MetricValue, TrialRecord
from orchestrator.report import testbeds
from orchestrator.report.render import load_report

NUMBERS = ["wall", "latency"]


def _differ_share(sims: int, seed: int, **shape: float | str) -> float:
    rng = np.random.default_rng(seed)
    found = (testbeds.testbed_findings(parallel_trials(rng, **shape), "corruption", NUMBERS) for _ in range(sims))  # type: ignore[arg-type]
    return sum(any(f.text.startswith("Testbeds differ") for f in fs) for fs in found) / sims


def _bound(rate: float, sims: int) -> float:
    """The claimed rate plus two Monte-Carlo standard errors."""
    return rate + 2 * math.sqrt(rate * (1 - rate) / sims)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_way_f_is_scipys(seed: int) -> None:
    rng = np.random.default_rng(seed)
    groups = [rng.normal(160, 8, size=int(n)) for n in rng.integers(1, 6, size=3)]
    assert stats.one_way_f(groups) == pytest.approx(sps.f_oneway(*groups).pvalue, rel=1e-9)


def test_one_way_f_without_spread_within() -> None:
    assert stats.one_way_f([[1.0], [2.0]]) is None  # one value a group: nothing measures the spread
    assert stats.one_way_f([[1.0, 1.0, 1.0]]) is None  # one group: nothing to compare
    assert stats.one_way_f([[1.0, 1.0], [2.0, 2.0]]) == 0.0
    assert stats.one_way_f([[1.0, 1.0], [1.0]]) == 1.0


def test_a_testbed_20_percent_slower_is_named() -> None:
    records = parallel_trials(np.random.default_rng(7), slower=1.2, cv=0.05)
    found = testbeds.testbed_findings(records, "corruption", NUMBERS)
    walls = [f for f in found if " on wall:" in f.text]
    assert walls and all(f.kind == "caution" and f.text.startswith("Testbeds differ in c=") for f in walls)
    assert "tb0 mean 1" in walls[0].text and "s (4 trials), tb1 mean " in walls[0].text
    assert "Holm over cells and metrics, one-way F test on the trials' values" in walls[0].text
    assert not any(" on corruption:" in f.text for f in found)  # the rate did not move


def test_each_testbeds_mean_is_shown_with_its_unit_and_without_one_when_it_has_none() -> None:
    records = parallel_trials(np.random.default_rng(7), slower=1.2, cv=0.05)
    wall = next(f.text for f in testbeds.testbed_findings(records, None, ["wall"]) if " on wall:" in f.text)
    assert re.search(r"tb0 mean [0-9.]+ s \(4 trials\), tb1 mean [0-9.]+ s \(4 trials\)", wall), wall
    unitless = [
        t.model_copy(update={"metrics": {"wall": t.metrics["wall"].model_copy(update={"unit": ""})}}) for t in records
    ]
    bare = next(f.text for f in testbeds.testbed_findings(unitless, None, ["wall"]) if " on wall:" in f.text)
    assert re.search(r"tb0 mean [0-9.]+ \(4 trials\), tb1 mean [0-9.]+ \(4 trials\)", bare), bare


def test_a_completed_trial_without_the_metric_is_left_out_of_its_testbeds_data() -> None:
    """A trial that completed with no reading of a metric (a number left empty, a proportion not
    printed) holds nothing to compare: its testbed's data is the other trials'."""
    records = parallel_trials(np.random.default_rng(7), slower=1.5, cv=0.05)
    emptied = [t.model_copy(update={"metrics": {}}) if t.cell == "c=1" and t.testbed == "tb1" and i % 4 == 0 else t
               for i, t in enumerate(records)]  # fmt: skip
    found = [f.text for f in testbeds.testbed_findings(emptied, "corruption", NUMBERS)]
    (c1,) = [text for text in found if text.startswith("Testbeds differ in c=1 on wall:")]
    assert re.search(r"tb0 mean [0-9.]+ s \(4 trials\), tb1 mean [0-9.]+ s \(3 trials\)", c1), c1


def test_identical_testbeds_stay_under_5_percent_of_reports() -> None:
    assert _differ_share(300, seed=11, cv=0.05) <= _bound(0.05, 300)


def test_identical_skewed_testbeds_stay_under_5_percent_of_reports() -> None:
    assert _differ_share(300, seed=12, cv=0.3, shape="lognormal") <= _bound(0.05, 300)


def test_a_20_percent_slower_testbed_is_found_in_most_reports() -> None:
    """4 trials per cell and testbed, 8 cells, trial-to-trial CV 5%: found in every report
    (bench/bench_testbeds.py has the power at other CVs)."""
    assert _differ_share(100, seed=13, cv=0.05, slower=1.2) >= 0.95


def test_no_difference_is_not_shown_and_names_every_metric() -> None:
    records = parallel_trials(np.random.default_rng(1), cv=0.05)
    [finding] = testbeds.testbed_findings(records, "corruption", NUMBERS)
    assert finding.kind == "info"
    assert finding.text.startswith(
        "Testbeds tb0, tb1 were not shown to differ: no cell's corruption, wall or latency differs significantly"
    )
    assert "which does not show that they agree" in finding.text
    assert "corruption: against trial-to-trial variation; wall and latency: one-way F test" in finding.text


def test_numbers_alone_and_cells_run_once_cannot_be_checked() -> None:
    """One trial per cell and testbed leaves no spread to test a number against: said, not guessed."""
    records = [_trial(0, "tb1", 160.0), _trial(1, "tb2", 200.0)]
    [finding] = testbeds.testbed_findings(records, None, ["wall"])
    assert finding.kind == "caution"
    assert finding.text == (
        "Testbeds tb1, tb2 ran each shared cell once, leaving no trial-to-trial spread to test wall against: "
        "whether they differ cannot be checked."
    )


def _trial(index: int, testbed: str, wall: float) -> TrialRecord:
    return TrialRecord(
        run_id="r1", trial=index, round=0, cell="c=0", levels={"c": "0"}, testbed=testbed, status="completed",
        started="x", ended="y", duration_s=1.0, metrics={"wall": MetricValue(kind="number", value=wall)},
    )  # fmt: skip


def test_the_report_of_a_parallel_run_names_a_slower_testbed(tmp_path: Path) -> None:
    """render passes the run's number metrics to the check: the page's headline says it."""
    manifest, records = synthetic_run(replicates=4, seed=6, failures=False)
    beds = ["tb1", "tb2"]
    slow = [_slowed(r, beds[r.trial % 2]) for r in records]
    run_dir = write_run(tmp_path / "run", manifest.model_copy(update={"testbed": "tb1,tb2", "testbeds": beds}), slow)
    texts = [f.text for f in load_report(run_dir).headline]
    assert any(t.startswith("Testbeds differ in ") and " on wall: tb1 mean " in t for t in texts), texts


def _slowed(record: TrialRecord, testbed: str) -> TrialRecord:
    """The record run on `testbed`; tb2 20% slower."""
    wall = record.metrics["wall"]
    factor = 1.2 if testbed == "tb2" else 1.0
    metrics = {**record.metrics, "wall": wall.model_copy(update={"value": (wall.value or 0.0) * factor})}
    return record.model_copy(update={"testbed": testbed, "metrics": metrics})


def test_a_cell_run_on_one_testbed_only_has_nothing_to_compare_and_the_others_are_compared() -> None:
    records = parallel_trials(np.random.default_rng(7), slower=1.5, cv=0.05)
    one_bed = [t for t in records if not (t.cell == "c=1" and t.testbed == "tb1")]
    found = [f.text for f in testbeds.testbed_findings(one_bed, "corruption", NUMBERS)]
    assert not any("c=1 " in text for text in found)
    assert any(text.startswith("Testbeds differ in c=2 on wall:") for text in found)
