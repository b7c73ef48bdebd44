"""Suspect runs (issue 12): a run with void or failed trials, baseline drift or overdispersion is
marked in `orch compare` (page and terminal), in reports/index.html (summary.json `suspect`) and
in the webhook summary; the index shows a run's result beside its status, never instead of it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli.main import main
from orchestrator.core.records import Failure, RunManifest, TrialRecord
from orchestrator.report.build import build_report, result_headline, suspect_reasons
from orchestrator.report.compare import compare, write_comparison_page
from orchestrator.report.model import DriftView, RoundRate
from orchestrator.report.render import fresh_summary, write_report
from orchestrator.report.site import write_index
from orchestrator.team.notify import summarize_run


def clean_run(run_id: str = "20260509-070000-clean") -> tuple[RunManifest, list[TrialRecord]]:
    return synthetic_run(failures=False, run_id=run_id)


def void_run(run_id: str = "20260509-080000-void") -> tuple[RunManifest, list[TrialRecord]]:
    """Trial 2's last attempt was void (its repro reported error sessions) and it stays failed."""
    manifest, records = synthetic_run(failures=False, run_id=run_id, status="failed")
    void = Failure(
        kind="infrastructure",
        error="InvalidOutput",
        message="void trial: the repro output breaks repro.valid[0] (/error=(?P<value>\\d+)/ max 0): saw 40",
    )
    records[2] = records[2].model_copy(update={"status": "failed", "failure": void, "metrics": {}})
    return manifest, records


def test_a_clean_run_is_not_suspect() -> None:
    assert suspect_reasons(build_report(*clean_run())) == []


def test_void_and_failed_trials_make_a_run_suspect_and_say_which() -> None:
    reasons = suspect_reasons(build_report(*void_run()))
    assert len(reasons) == 1
    assert "1 trial attempt failed or was void" in reasons[0] and "1 void" in reasons[0]
    retried = suspect_reasons(build_report(*synthetic_run()))  # two attempts failed, then retried
    assert "2 trial attempts failed or were void" in retried[0] and "HealthTimeout" in retried[0]


def test_drift_and_overdispersion_make_a_run_suspect() -> None:
    report = build_report(*clean_run())
    drift = DriftView(
        metric="corruption",
        cell="x",
        rounds=[RoundRate(round=0, k=1, n=40, rate=0.025), RoundRate(round=1, k=20, n=40, rate=0.5)],
        p_homogeneity=1e-6,
        p_trend=1e-6,
        flagged=True,
    )
    noisy = {"overdispersion_p": 1e-4, "overdispersion_p_holm": 4e-4}  # the caution reads the Holm p
    cells = [report.cells[0].model_copy(update={"proportions": {
        "corruption": report.cells[0].proportions["corruption"].model_copy(update=noisy)
    }}), *report.cells[1:]]  # fmt: skip
    reasons = suspect_reasons(report.model_copy(update={"drift": [drift], "cells": cells}))
    assert any("baseline corruption drifted across rounds" in r for r in reasons)
    assert any("corruption overdispersed in 1 cell (trials" in r for r in reasons)


def test_a_failed_run_keeps_its_result_as_the_headline() -> None:
    report = build_report(*void_run())
    assert report.headline[0].text.startswith("The run failed: ")  # the report's first finding is the status
    assert not result_headline(report).startswith("The run is")  # the index and webhooks show the result
    assert result_headline(report) in [f.text for f in report.headline if f.kind in ("finding", "null")]


def test_the_index_shows_result_status_and_why_suspect(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    for manifest, records in (clean_run(), void_run()):
        write_report(write_run(reports / manifest.run_id, manifest, records))
    summary = json.loads((reports / void_run()[0].run_id / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["suspect"] and "void" in summary["suspect"][0]
    assert not summary["headline"].startswith("The run is")
    clean = json.loads((reports / clean_run()[0].run_id / "summary.json").read_text())
    assert clean["suspect"] == []
    html = write_index(reports, fresh_summary).read_text()
    rows = re.split(r"<tr[ >]", html)[1:]  # a row may carry data-* attributes (the index filters)
    void_row = next(r for r in rows if void_run()[0].run_id in r)
    clean_row = next(r for r in rows if clean_run()[0].run_id in r)
    assert "suspect data:" in void_row and "1 void" in void_row
    assert 'badge failed">failed' in void_row and summary["headline"][:40] in void_row  # side by side
    assert "suspect data:" not in clean_row


def test_compare_warns_about_the_suspect_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_manifest, a_records = clean_run()
    b_manifest, b_records = void_run()
    model = compare(a_manifest, a_records, b_manifest, b_records, suspect_b=["1 trial attempt failed or was void"])
    assert len(model.warnings) == 1 and b_manifest.run_id in model.warnings[0] and "(B)" in model.warnings[0]
    assert compare(a_manifest, a_records, a_manifest, a_records).warnings == ()
    ra = write_run(tmp_path / "reports" / a_manifest.run_id, a_manifest, a_records)
    rb = write_run(tmp_path / "reports" / b_manifest.run_id, b_manifest, b_records)
    page = write_comparison_page(ra, rb)
    assert len(page.warnings) == 1 and b_manifest.run_id in page.warnings[0] and "void" in page.warnings[0]
    html = page.path.read_text()
    assert 'id="suspect"' in html and html.index('id="suspect"') < html.index('id="summary"')
    capsys.readouterr()
    assert main(["compare", str(ra), str(rb), "-o", str(tmp_path / "c.html")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"Run {b_manifest.run_id} (B) has suspect data" in err and a_manifest.run_id + " (A)" not in err


def test_the_webhook_summary_marks_a_suspect_run(tmp_path: Path) -> None:
    manifest, records = void_run()
    summary = summarize_run(write_run(tmp_path / manifest.run_id, manifest, records), base_url="")
    assert summary.suspect and "void" in summary.suspect[0]
    assert "SUSPECT DATA: " in summary.text() and summary.headline in summary.text()
    assert not summary.headline.startswith("The run is")
    clean_manifest, clean_records = clean_run()
    clean = summarize_run(write_run(tmp_path / clean_manifest.run_id, clean_manifest, clean_records), base_url="")
    assert clean.suspect == [] and "SUSPECT" not in clean.text()


def interrupted_run(
    run_id: str = "20260509-090000-stopped", status: str = "interrupted", trials: int = 11
) -> tuple[RunManifest, list[TrialRecord]]:
    """Stopped between two trials (Ctrl-C, a deadline): `trials` of its 32 planned trials journaled."""
    manifest, records = synthetic_run(failures=False, replicates=4, run_id=run_id, status=status)
    return manifest, records[:trials]


def test_compare_says_a_run_that_stopped_early_is_incomplete() -> None:
    """An interrupted run compared as if whole: its own report says "The run is interrupted: 11 of 32
    planned trials completed", but orch compare said nothing (suspect_reasons has no status
    reason, and no trial failed), so a half-finished run read as complete beside a whole one."""
    a_manifest, a_records = synthetic_run(failures=False, replicates=4)
    b_manifest, b_records = interrupted_run()
    assert (
        build_report(b_manifest, b_records)
        .headline[0]
        .text.startswith("The run is interrupted: 11 of 32 planned trials completed")
    )
    model = compare(a_manifest, a_records, b_manifest, b_records)
    assert model.warnings == (
        f"Run {b_manifest.run_id} (B) is incomplete: interrupted, 11 of 32 planned trials completed. Its cells hold "
        "fewer trials than planned and cells it never reached are missing here; resume it (orch resume RUN_B) before "
        "trusting this comparison.",
    )
    swapped = compare(b_manifest, b_records, a_manifest, a_records)  # either side
    assert len(swapped.warnings) == 1 and f"{b_manifest.run_id} (A) is incomplete" in swapped.warnings[0]
    running = compare(a_manifest, a_records, *interrupted_run(status="running"))  # its controller died (kill -9)
    assert "(B) is incomplete: still running, or its controller died, 11 of 32" in running.warnings[0]
    # run.json could not be told (the interrupt escaped before it was saved): the journal's event says it
    told = compare(a_manifest, a_records, *interrupted_run(status="completed"), stopped_b=True)
    assert "(B) is incomplete: interrupted (its journal says so; run.json says completed), 11 of 32" in told.warnings[0]
    # interrupted during the final restore, after its last trial: the data is whole
    assert compare(a_manifest, a_records, *interrupted_run(trials=32)).warnings == ()
    assert (
        compare(a_manifest, a_records, *interrupted_run(status="completed", trials=32), stopped_b=True).warnings == ()
    )


def test_compare_reads_an_early_stop_from_the_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """write_comparison_page and `orch compare` take the run_interrupted event from the journal
    (TrialRows.stopped), on the page above the result and on the terminal; a run resumed since is
    judged by its status alone."""
    a_manifest, a_records = synthetic_run(failures=False, replicates=4)
    ra = write_run(tmp_path / "reports" / a_manifest.run_id, a_manifest, a_records)
    b_manifest, b_records = interrupted_run(status="completed")
    rb = write_run(tmp_path / "reports" / b_manifest.run_id, b_manifest, b_records, ("run_interrupted",))
    page = write_comparison_page(ra, rb)
    assert len(page.warnings) == 1 and f"Run {b_manifest.run_id} (B) is incomplete: interrupted" in page.warnings[0]
    html = page.path.read_text()
    assert "is incomplete: interrupted" in html and html.index('id="suspect"') < html.index('id="summary"')
    capsys.readouterr()
    assert main(["compare", str(ra), str(rb), "-o", str(tmp_path / "c.html")]) == 0
    assert f"Run {b_manifest.run_id} (B) is incomplete" in " ".join(capsys.readouterr().err.split())
    resumed = write_run(tmp_path / "resumed", b_manifest, b_records, ("run_interrupted", "run_resumed"))
    assert write_comparison_page(ra, resumed, tmp_path / "r.html").warnings == ()
