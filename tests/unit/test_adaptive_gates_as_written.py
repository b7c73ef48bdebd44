"""A new user's walk through README's "Faster sweeps" (adaptive:) and "Gates for CI" (gates:),
writing the matrix the way a first try does (the sixth new-user walk): what orch plan says of an
adaptive matrix, gates a proportion cannot meet as written, and the export of a run with no gates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli.main import main
from orchestrator.cli.output import announce, show_outcome
from orchestrator.core.config import read_matrix
from orchestrator.core.gates import Gate, GateCell, evaluate
from orchestrator.core.records import Failure
from orchestrator.errors import ConfigError
from orchestrator.report.build import build_report, with_adaptive_facts
from orchestrator.report.ciexport import EXTENSION
from orchestrator.sweep.apitypes import Started, SweepOutcome

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventory/local.yaml")


def test_plan_of_an_adaptive_matrix_says_its_trials_are_a_most_and_what_stops_a_cell(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`orch plan` said "8 cells x 8 replicates = 64 trials" and the fixed duration for
    matrices/overlap_hunt.yaml, and not one word of its adaptive: section."""
    assert main(["plan", str(REPO / "matrices/overlap_hunt.yaml"), "-i", INVENTORY, "--seed", "1"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "= 64 trials at most" in first
    line = next(x for x in out.splitlines() if x.startswith("adaptive stopping"))
    assert "corruption" in line and "lower" in line and "0.1" in line and "alpha 0.05" in line
    assert "estimated duration: at most" in out


def test_plan_of_a_fixed_matrix_says_nothing_of_adaptive_stopping(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(REPO / "matrices/overlap_ablation.yaml"), "-i", INVENTORY, "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "at most" not in out.splitlines()[0] and "adaptive" not in out


def _matrix_with(tmp_path: Path, gates_yaml: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text((REPO / "matrices/overlap_ablation.yaml").read_text() + gates_yaml)
    return path


@pytest.mark.parametrize(
    ("bound", "hint"),
    [("upper: 5", "write 0.05"), ("lower: 900", "between 0 and 1"), ("upper: -0.1", "between 0 and 1")],
)
def test_a_proportion_gate_bound_outside_0_to_1_is_refused_at_its_line(tmp_path: Path, bound: str, hint: str) -> None:
    """`{metric: corruption, upper: 5}` (5% meant) passed every cell: a rate is at most 1, so its
    upper bound is always <= 5, and a CI gate that cannot fail was green (exit 0)."""
    path = _matrix_with(tmp_path, f"gates:\n  - {{metric: wall, upper: 60}}\n  - {{metric: corruption, {bound}}}\n")
    with pytest.raises(ConfigError) as info:
        read_matrix(path)
    text = str(info.value)
    line = path.read_text().splitlines().index(f"  - {{metric: corruption, {bound}}}") + 1
    assert f"m.yaml:{line}:" in text and "gates[1]" in text and "proportion" in text and hint in text


def test_a_number_gate_keeps_any_bound_and_a_proportion_gate_any_share(tmp_path: Path) -> None:
    gates = "gates:\n  - {metric: wall, upper: 60}\n  - {metric: corruption, upper: 1, lower: 0}\n"
    path = _matrix_with(tmp_path, gates)
    assert [g.upper for g in read_matrix(path).gates] == [60, 1]


def test_a_gate_whose_selector_matches_no_cell_says_so_not_that_data_is_missing() -> None:
    """The report's Gates row read 'no cell with data for corruption' for `cells: {cuda_graph: off}`
    on a matrix that excludes cuda_graph=off: the cells had data; the selector matched none."""
    gate = Gate(name="g", metric="corruption", upper=0.2, cells={"cuda_graph": "off"})
    cell = GateCell("cuda_graph=on", {"cuda_graph": "on"}, 0.1, 0.0, 0.15)
    [result] = evaluate([gate], {"corruption": [cell]})
    assert not result.passed
    assert "selects no cell of this run" in result.message and "with data" not in result.message
    [unmeasured] = evaluate([gate], {})  # the metric has no cell at all: that is missing data
    assert not unmeasured.passed and unmeasured.message == "no cell with data for corruption"


def test_junit_export_of_a_run_without_gates_warns_that_ci_has_nothing_to_fail_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`orch export RUN --format junit` of a run whose matrix has no gates wrote a suite of 0 test
    cases and printed only 'exported: ...', exit 0: a CI job wired to it stays green whatever the data.
    Six trials a cell: every estimate has its interval, so Bencher's file has nothing to warn of."""
    manifest, records = synthetic_run(replicates=6, failures=False)
    assert not manifest.gates
    run_dir = tmp_path / manifest.run_id
    write_run(run_dir, manifest, records)
    assert main(["export", str(run_dir), "--format", "junit", "-o", str(tmp_path / "j.xml")]) == 0
    err = capsys.readouterr().err
    assert "warning: the matrix declares no gates" in err and "no test case" in err
    assert main(["export", str(run_dir), "--format", "bencher", "-o", str(tmp_path / "b.json")]) == 0
    assert "warning" not in capsys.readouterr().err  # Bencher's numbers do not need gates


def test_an_adaptive_run_that_decided_no_cell_says_so_at_the_top_of_its_report() -> None:
    """An adaptive 2-cell run whose cells ran every round undecided (baseline 4/40, the other 0/40)
    had a headline without a word of adaptive stopping, where README says the report opens with
    the sequential decisions: a reader could not tell the rule ran and decided nothing."""
    manifest, records = synthetic_run(replicates=2, failures=False)
    report = build_report(manifest, records)
    opened = with_adaptive_facts(report, [], adaptive=True).headline
    assert opened[0].kind == "info" and opened[0].text.startswith(f"Adaptive stopping in {report.primary_metric}:")
    assert "no cell's comparison with the baseline was decided" in opened[0].text
    assert opened[1:] == report.headline
    assert with_adaptive_facts(report, []).headline == report.headline  # a parallel fixed run: no word of it


def test_a_gate_without_a_bound_is_said_without_pydantic_words(tmp_path: Path) -> None:
    """`{metric: corruption}` read 'gates[0]: value error, a gate needs ..., got a mapping':
    pydantic's own prefix and the whole gate quoted back as 'a mapping'."""
    path = _matrix_with(tmp_path, "gates:\n  - {metric: corruption}\n")
    with pytest.raises(ConfigError) as info:
        read_matrix(path)
    text = str(info.value)
    assert "gates[0]: a gate needs `upper:`" in text
    assert "value error" not in text.lower() and "got a mapping" not in text


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("gates:\n  - {metric: corruption, upper: 5%}\n", "gates[0].upper"),
        ("adaptive: {metric: corruption, alpha: 5%}\n", "adaptive.alpha"),
    ],
)
def test_a_percentage_with_its_sign_is_answered_with_the_share(tmp_path: Path, yaml_text: str, key: str) -> None:
    """`upper: 5%` and `alpha: 5%` read 'expected a number, got '5%'' and nothing more, where
    `alpha: 5` already got 'a share, not a percentage: write 0.05'."""
    path = _matrix_with(tmp_path, yaml_text)
    with pytest.raises(ConfigError) as info:
        read_matrix(path)
    text = str(info.value)
    assert f"{key}: expected a number, got '5%'" in text and "without '%'" in text and "0.05" in text


def test_the_too_few_sessions_caution_names_its_cells() -> None:
    """'1 cell has too few sessions to say much (as few as 50)' named no cell, where the two cells
    of the run had 50 sessions each and only the baseline's interval was over 30 points wide."""
    manifest, records = synthetic_run(replicates=2, sessions=3, failures=False)  # 6 sessions a cell
    report = build_report(manifest, records)
    metric = report.primary_metric
    assert metric is not None
    wide = [c.cell for c in report.cells if (r := c.proportions[metric].rate).n and r.high - r.low > 0.3]
    assert len(wide) > 3  # the synthetic run's cells are wide: named up to three, the rest counted
    [caution] = [f for f in report.headline if "too few sessions to say much" in f.text]
    assert all(name in caution.text for name in wide[:3]) and f"{len(wide) - 3} more" in caution.text
    assert wide[3] not in caution.text


def test_orch_run_announces_an_adaptive_run_s_trials_as_a_most(capsys: pytest.CaptureFixture[str]) -> None:
    """`orch run` of an adaptive 2-cell matrix announced '12 trials on local-sim' and ended
    '10 trials completed': the plan's count is the most a run may take, as orch plan now says."""
    announce(Started("r1", Path("reports/r1"), ("local-sim",), trials=12, left=12, adaptive=True))
    announce(Started("r1", Path("reports/r1"), ("local-sim",), trials=12, left=4, resumed=True, adaptive=True))
    announce(Started("r2", Path("reports/r2"), ("local-sim",), trials=8, left=8))
    assert capsys.readouterr().err.splitlines() == [
        "run r1: 12 trials at most on local-sim -> reports/r1",
        "resuming r1: 4 of 12 trials left at most",
        "run r2: 8 trials on local-sim -> reports/r2",
    ]


def test_a_gate_whose_lower_bound_is_above_its_upper_is_refused_at_its_line(tmp_path: Path) -> None:
    """`{metric: corruption, upper: 0.01, lower: 0.5}` was accepted with a warning about its upper
    bound alone (too few sessions), though no interval can lie inside both bounds."""
    path = _matrix_with(tmp_path, "gates:\n  - {metric: wall, upper: 60, lower: 90}\n")
    with pytest.raises(ConfigError) as info:
        read_matrix(path)
    line = path.read_text().splitlines().index("  - {metric: wall, upper: 60, lower: 90}") + 1
    assert f"m.yaml:{line}: gates[0]: lower: 90 is above upper: 60" in str(info.value)


def test_an_adaptive_run_s_end_line_says_of_how_many_at_most(capsys: pytest.CaptureFixture[str]) -> None:
    """It ended '10 trials completed, 0 failed' after announcing 12, and said nowhere on the
    terminal why two were not run (the matrix stopped both cells after 5 rounds)."""

    def ended(completed: int, adaptive: bool) -> str:
        outcome = SweepOutcome(Path("r"), "r", "completed", completed, 0, 12, adaptive=adaptive)
        show_outcome(outcome)
        return capsys.readouterr().out.splitlines()[0]

    assert ended(10, True) == "10 trials completed, 0 failed (of at most 12: a cell stops once decided)"
    assert ended(12, True) == "12 trials completed, 0 failed"  # every round ran: nothing to explain
    assert ended(10, False) == "10 trials completed, 0 failed"


def test_validate_and_queue_add_count_an_adaptive_matrix_s_trials_at_most(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`orch validate` said '64 trials on testbed' and `orch queue add` '(64 trials on testbed ...)'
    of matrices/overlap_hunt.yaml, whose cells stop once decided."""
    hunt = str(REPO / "matrices/overlap_hunt.yaml")
    assert main(["validate", hunt, "-i", INVENTORY]) == 0
    assert "8 cells, 64 trials at most on testbed 'local-sim'" in capsys.readouterr().out
    assert main(["queue", "add", hunt, "-i", INVENTORY, "--reports", str(tmp_path / "r")]) == 0
    assert "(64 trials at most on testbed 'local-sim', priority 0)" in capsys.readouterr().out


@pytest.mark.parametrize("bound", ["upper: 60s", "upper: 5m", "upper: 200ms", "lower: 1.5 s"])
def test_a_gate_bound_written_with_a_unit_says_to_write_the_metrics_own_number(tmp_path: Path, bound: str) -> None:
    """`{metric: wall, upper: 60s}` got only "expected a number, got '60s'": the fix is a plain
    number in the unit the metric's regex captures (orch converts none, so it names no conversion)."""
    path = _matrix_with(tmp_path, f"gates:\n  - {{metric: wall, {bound}}}\n")
    with pytest.raises(ConfigError) as info:
        read_matrix(path)
    text = str(info.value)
    line = path.read_text().splitlines().index(f"  - {{metric: wall, {bound}}}") + 1
    assert f"m.yaml:{line}: gates[0]." in text and "expected a number" in text
    assert "plain number" in text and "the metric's own unit" in text and "regex" in text
    assert "converts no unit" in text
    assert info.value.exit_code == 2


def test_a_timeout_written_with_a_unit_gets_no_gate_hint(tmp_path: Path) -> None:
    """The hint is the gate's: a timeout's unit is seconds, not a metric's."""
    path = tmp_path / "m.yaml"
    text = (REPO / "matrices/overlap_ablation.yaml").read_text()
    path.write_text(text.replace("decode: 900,", "decode: 60s,"))
    with pytest.raises(ConfigError) as info:
        read_matrix(path)
    assert "expected a number" in str(info.value) and "metric's own unit" not in str(info.value)


def test_plan_of_a_one_sided_adaptive_matrix_says_its_power_figures_are_two_sided(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """overlap_hunt asks `direction: lower` (only a fall matters), and its plan's power lines spoke
    of rises and said "no fall at all": they are the fixed analysis's two-sided figures with every
    round run, not the stopping test's, and the plan did not say so."""
    assert main(["plan", str(REPO / "matrices/overlap_hunt.yaml"), "-i", INVENTORY, "--seed", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    power = next(n for n, x in enumerate(lines) if x.startswith("power (corruption)"))
    said = lines[power + 1]
    assert "does it lower the rate?" in said and "only a fall" in said
    assert "two-sided" in said and "every round run" in said and "not the stopping test's" in said


def test_plan_of_a_fixed_matrix_has_no_word_of_a_stopping_test(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(REPO / "matrices/overlap_ablation.yaml"), "-i", INVENTORY, "--seed", "1"]) == 0
    assert "stopping test" not in capsys.readouterr().out


def test_bencher_export_says_how_many_estimates_have_no_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two trials a cell: each number metric's median has no 95% interval (it needs 6 values), so
    the Bencher file gives it without lower_value/upper_value, and the terminal said only 'exported'."""
    manifest, records = synthetic_run(replicates=2, failures=False)
    run_dir = tmp_path / manifest.run_id
    write_run(run_dir, manifest, records)
    out = tmp_path / "b.json"
    assert main(["export", str(run_dir), "--format", "bencher", "-o", str(out)]) == 0
    bare = sum("lower_value" not in m for cell in json.loads(out.read_text()).values() for m in cell.values())
    assert bare > 0
    err = capsys.readouterr().err
    assert f"warning: {bare} estimates have no interval: fewer than 6 trials" in err


@pytest.mark.parametrize("fmt", ["junit", "bencher"])
def test_an_export_of_a_run_not_ended_says_it_holds_the_trials_so_far(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """run.json says `running` until the sweep's end is recorded (sweep.api._finish saves the end
    status once every trial is journaled and the hosts restored): the JUnit file says so in its
    status property, but the terminal said only 'exported', and a CI job could read gates judged
    on part of the run as its result."""
    manifest, records = synthetic_run(replicates=2, failures=False, status="running")
    run_dir = tmp_path / manifest.run_id
    write_run(run_dir, manifest, records)
    out = tmp_path / f"x.{EXTENSION[fmt]}"  # written twice: an export replaces only a file named as one
    assert main(["export", str(run_dir), "--format", fmt, "-o", str(out)]) == 0
    assert "warning: the run has not ended (status running): the file holds its trials so far" in (
        " ".join(capsys.readouterr().err.split())
    )
    if fmt == "junit":
        assert '<property name="status" value="running" />' in out.read_text()
    ended, records = synthetic_run(replicates=2, failures=False)
    write_run(tmp_path / "ended", ended, records)
    assert main(["export", str(tmp_path / "ended"), "--format", fmt, "-o", str(out)]) == 0
    assert "has not ended" not in capsys.readouterr().err


def test_bencher_export_says_which_estimates_rest_on_part_of_their_cells_trials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trial failed for good leaves its cell's estimates on the other trials: the report marks
    the cell ('1 of 2 trials without data') and its JUnit gates fail, but BMF has no field for it
    and the terminal said only 'exported', so a CI threshold on upper_value passed that cell."""
    manifest, records = synthetic_run(replicates=2, failures=False)
    lost = records[0]
    failure = Failure(kind="workload", error="WorkloadError", message="repro exited 7")
    records = [lost.model_copy(update={"status": "failed", "metrics": {}, "failure": failure}), *records[1:]]
    run_dir = tmp_path / manifest.run_id
    write_run(run_dir, manifest, records)
    out = tmp_path / "b.json"
    assert main(["export", str(run_dir), "--format", "bencher", "-o", str(out)]) == 0
    label = ",".join(f"{f}={lv}" for f, lv in lost.levels.items())
    assert "corruption" in json.loads(out.read_text())[label]  # the estimate is there, from the other trial
    err = " ".join(capsys.readouterr().err.split())
    metrics = len(lost.metrics)
    assert (
        f"warning: {metrics} estimates of 1 cell rest on part of the cell's finished trials "
        f"({label}: 1 of 2 without data): the Bencher file cannot mark them" in err
    )
    manifest, records = synthetic_run(replicates=2, failures=True)  # failed attempts retried: no trial lost
    write_run(tmp_path / "retried", manifest, records)
    assert main(["export", str(tmp_path / "retried"), "--format", "bencher", "-o", str(out)]) == 0
    assert "part of the cell" not in capsys.readouterr().err
