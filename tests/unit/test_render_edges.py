"""What report.render does with runs at their edges, found by the sixteenth mutation round: a run
with no journal (interrupted before its first trial) and a hunt run whose run.json matrix text no
longer reads as a matrix (hand-edited, or an older schema) still get their page and summary."""

from __future__ import annotations

from pathlib import Path

from helpers.hunt_runs import hunt_run, small_hunt, truth_answer
from helpers.report_synth import synthetic_run, write_run

from orchestrator.report.render import fresh_summary, load_report, write_report_and_summary
from orchestrator.store.manifest import load_manifest, save_manifest
from orchestrator.store.rundir import RunDir


def test_a_run_interrupted_before_its_first_trial_has_a_page_and_a_summary(tmp_path: Path) -> None:
    manifest, _ = synthetic_run(status="interrupted")
    run = write_run(tmp_path / manifest.run_id, manifest, [])
    RunDir(run).journal.unlink()  # the runner never began: no journal at all
    report = load_report(run)
    assert (report.status, report.completed, report.failed) == ("interrupted", 0, 0)
    summary = fresh_summary(run)
    assert summary.status == "interrupted" and summary.completed == 0 and summary.series == []
    page, written = write_report_and_summary(run)
    assert page.is_file() and written.completed == 0


def test_a_hunt_whose_recorded_matrix_no_longer_reads_still_gets_its_main_page(tmp_path: Path) -> None:
    matrix = small_hunt(tmp_path)
    run = tmp_path / "reports" / "hunt-run"
    hunt_run(run, matrix, truth_answer(matrix), limit=12)
    manifest = load_manifest(run)
    assert manifest.hunt
    save_manifest(run, manifest.model_copy(update={"matrix_text": "factors: [unclosed\n"}))
    page, summary = write_report_and_summary(run)
    assert page.is_file() and summary.completed == 12
    assert not RunDir(run).hunt_html.exists()  # the hunt's answer needs the matrix: left out, said nowhere false
