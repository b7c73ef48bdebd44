"""Gates (matrix `gates:`): checked on intervals, stored in run.json, shown in the report, failing
`orch run` (exit 3) and the JUnit export; Bencher export carries the intervals."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers.report_synth import ALL_ON, synthetic_run, write_run

from orchestrator.cli.main import main
from orchestrator.core.config import read_matrix
from orchestrator.core.gates import Gate, GateCell, evaluate
from orchestrator.core.records import Failure
from orchestrator.errors import ConfigError
from orchestrator.report.build import build_report
from orchestrator.report.ciexport import bencher_json, junit_xml
from orchestrator.report.gates import check_gates
from orchestrator.report.render import render_report, run_summary
from orchestrator.sweep.apitypes import GATE_FAILED, SweepOutcome

REPO = Path(__file__).resolve().parents[1]


def _cell(name: str, low: float | None, high: float | None, **levels: str) -> GateCell:
    est = None if low is None or high is None else (low + high) / 2
    return GateCell(name, levels, est, low, high)


# ------------------------------------------------------------------------- pure evaluation
def test_upper_bound_passes_only_when_the_whole_interval_is_below() -> None:
    gate = Gate(name="g", metric="m", upper=0.01)
    results = evaluate([gate], {"m": [_cell("a", 0.0, 0.009, x="1"), _cell("b", 0.0, 0.05, x="2")]})
    assert [(r.cell, r.passed) for r in results] == [("a", True), ("b", False)]
    assert "upper bound 0.05 > 0.01" in results[1].message


def test_lower_bound_and_both_bounds() -> None:
    gate = Gate(name="g", metric="m", lower=900, upper=2000)
    results = evaluate([gate], {"m": [_cell("a", 950, 1100), _cell("b", 850, 1000), _cell("c", 1000, 2500)]})
    assert [r.passed for r in results] == [True, False, False]
    assert "lower bound 850 < 900" in results[1].message
    assert "upper bound 2500 > 2000" in results[2].message


def test_a_cell_without_an_interval_fails_never_passes_by_missing_data() -> None:
    results = evaluate([Gate(name="g", metric="m", upper=1.0)], {"m": [_cell("a", None, None)]})
    assert not results[0].passed and "no 95% interval" in results[0].message


def test_a_selector_matching_no_cell_fails() -> None:
    gate = Gate(name="g", metric="m", upper=1.0, cells={"x": "3"})
    results = evaluate([gate], {"m": [_cell("a", 0, 0.1, x="1")]})
    assert len(results) == 1 and not results[0].passed and "no cell" in results[0].message


def test_selector_picks_only_matching_cells() -> None:
    gate = Gate(name="g", metric="m", upper=0.5, cells={"x": "1"})
    results = evaluate([gate], {"m": [_cell("a", 0, 0.1, x="1", y="a"), _cell("b", 0, 0.9, x="2", y="a")]})
    assert [r.cell for r in results] == ["a"] and results[0].passed


# ------------------------------------------------------------------------- config
def _matrix_with(tmp_path: Path, gates_yaml: str) -> Path:
    text = (REPO / "matrices/overlap_ablation.yaml").read_text() + gates_yaml
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


def test_gates_are_read_with_selector_and_default_name(tmp_path: Path) -> None:
    m = read_matrix(
        _matrix_with(
            tmp_path,
            "gates:\n  - {metric: corruption, upper: 0.01, cells: {overlap: off}}\n  - {metric: wall, upper: 60}\n",
        )
    )
    assert m.gates[0] == Gate(
        name="corruption <= 0.01 (overlap=off)", metric="corruption", upper=0.01, cells={"overlap": "off"}
    )
    assert m.gates[1].metric == "wall" and m.gates[1].cells == {}


@pytest.mark.parametrize(
    ("gates_yaml", "message"),
    [
        ("gates:\n  - {metric: nope, upper: 0.01}\n", "'nope' is not a metric"),
        ("gates:\n  - {metric: corruption, upper: 0.01, cells: {overlap: maybe}}\n", "'maybe' is not a level"),
        ("gates:\n  - {metric: corruption, cells: {overlap: off}}\n", "needs `upper:`"),
        ("gates:\n  - {metric: corruption, upper: 0.01, cells: {speed: off}}\n", "speed"),
        ("gates:\n  - {metric: corruption, upper: .nan}\n", "gates"),
        ("gates:\n  - {metric: wall, upper: 60, name: " + "g" * 500_000 + "}\n", "at most 200 characters"),
    ],
)
def test_bad_gates_are_config_errors_with_file_and_line(tmp_path: Path, gates_yaml: str, message: str) -> None:
    path = _matrix_with(tmp_path, gates_yaml)
    with pytest.raises(ConfigError) as info:
        read_matrix(path)
    text = str(info.value)
    assert message in text and str(path) in text
    gates_line = path.read_text().splitlines().index("gates:") + 1
    assert info.value.line is not None and info.value.line >= gates_line


# ------------------------------------------------------------------------- report, summary, exports
GATES = [
    Gate(name="corruption off-overlap", metric="corruption", upper=0.2, cells={"overlap": "off"}),
    Gate(name="corruption everywhere", metric="corruption", upper=0.05),
]


def _report():  # type: ignore[no-untyped-def]
    manifest, records = synthetic_run(replicates=8, failures=False)  # enough trials for tight intervals
    manifest = manifest.model_copy(update={"gates": GATES})
    return manifest, records, build_report(manifest, records)


def test_report_checks_gates_per_cell_and_the_summary_lists_failures() -> None:
    _, _, report = _report()
    results = check_gates(report)
    assert len(results) == 4 + 8  # 4 cells with overlap=off, then every cell
    assert all(r.passed for r in results[:4])  # ~0-1% in those cells, 320 sessions: upper bound < 20%
    failing = [r for r in results if not r.passed]
    assert failing and all(r.gate.name == "corruption everywhere" for r in failing)
    all_on = next(r for r in results[4:] if dict(r.levels) == ALL_ON)
    assert not all_on.passed  # ~16% corruption: the upper bound is far above 5%
    summary = run_summary(report)
    assert summary.gates == 12 and len(summary.gates_failed) == len(failing)
    page = render_report(report)
    assert 'id="gates"' in page and "FAIL" in page and "PASS" in page


def test_a_gate_never_passes_a_cell_that_lost_trials_on_the_rest() -> None:
    """A gate is what a CI job trusts: it judged a cell on its completed trials only, so a cell whose
    trial failed for good (a crash, no metric printed, a lost scrape) passed on the rest, in the
    report's Gates section and the JUnit export, where the missing trial may be the one that breaks
    the bound. It fails now, naming how many of the cell's finished trials have no value."""
    manifest, records, _ = _report()
    overlap_off = [r for r in records if dict(r.levels).get("overlap") == "off"]
    lost = overlap_off[0]
    records = [r for r in records if r is not lost]
    failure = Failure(kind="workload", error="WorkloadError", message="repro exited with code 1")
    records.append(lost.model_copy(update={"status": "failed", "metrics": {}, "failure": failure}))
    results = check_gates(build_report(manifest, records))
    mine = [r for r in results if r.cell == lost.cell]
    assert mine and not any(r.passed for r in mine)
    assert all("1 of its 8 finished trials without data" in r.message for r in mine), [r.message for r in mine]
    others = [r for r in results[:4] if r.cell != lost.cell]
    assert len(others) == 3 and all(r.passed for r in others)  # the other overlap=off cells: as before


def test_no_gates_no_section() -> None:
    manifest, records = synthetic_run(replicates=2, failures=False)
    report = build_report(manifest, records)
    assert check_gates(report) == [] and 'id="gates"' not in render_report(report)


def test_junit_has_one_case_per_gate_and_cell_and_failures_for_failed_gates() -> None:
    _, _, report = _report()
    results = check_gates(report)
    suite = ET.fromstring(junit_xml(report, results))
    cases = suite.findall("testcase")
    assert len(cases) == len(results) == int(suite.get("tests", "0"))
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == sum(not r.passed for r in results) == int(suite.get("failures", "0"))
    assert any("bf16_index_k=on,cuda_graph=on,overlap=on" in c.get("name", "") for c in failed)


def test_bencher_json_carries_estimate_and_interval_per_cell_and_metric() -> None:
    _, _, report = _report()
    data = json.loads(bencher_json(report))
    assert len(data) == 8
    on = data["bf16_index_k=on,cuda_graph=on,overlap=on"]["corruption"]
    assert on["lower_value"] <= on["value"] <= on["upper_value"]
    assert 0.05 < on["value"] < 0.35


def test_a_failed_gate_makes_the_sweep_exit_3_and_trial_failures_still_win() -> None:
    base = SweepOutcome(run_dir=Path("r"), run_id="r", status="completed", completed=8, failed=0, planned=8)
    gated = SweepOutcome(**{**base.__dict__, "gates_failed": ("g @ c: upper bound 0.3 > 0.01",)})
    assert base.exit_code == 0 and gated.exit_code == GATE_FAILED == 3
    assert SweepOutcome(**{**gated.__dict__, "failed": 1}).exit_code == 1


def test_cli_export_junit_and_bencher(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest, records, _ = _report()
    run_dir = tmp_path / manifest.run_id
    write_run(run_dir, manifest, records)
    assert main(["export", str(run_dir), "--format", "junit", "-o", str(tmp_path / "j.xml")]) == 0
    suite = ET.parse(tmp_path / "j.xml").getroot()
    assert suite.tag == "testsuite" and int(suite.get("failures", "0")) > 0
    assert main(["export", str(run_dir), "--format", "bencher"]) == 0
    out = run_dir / f"{manifest.run_id}.bencher.json"
    assert json.loads(out.read_text())
    assert str(out) in capsys.readouterr().out
