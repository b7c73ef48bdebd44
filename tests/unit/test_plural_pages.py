"""The report and the runs index say "1 run", "3 runs", "1 failed attempt", "1 replicate" where they
said "run(s)", "failed attempt(s)", "replicate(s)" with the count at hand (the `counted` filter
every page's environment has: report.page)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from helpers.report_synth import synthetic_run, write_run

from orchestrator.report import site
from orchestrator.report.render import load_report, render_report
from orchestrator.report.site import INDEX_ROWS, RunEntry

ENTRY = RunEntry(
    directory="r0", name="m", run_id="20260509-000000-m", started="2026-05-09T00:00:00+00:00",
    status="completed", completed=8, planned=8, failed=1, headline="no difference", has_report=True,
)  # fmt: skip


def _entries(n: int, failed: int = 1) -> list[RunEntry]:
    return [replace(ENTRY, directory=f"r{i}", run_id=f"20260509-{i:06d}-m", failed=failed) for i in range(n)]


def test_index_of_one_run_says_run_and_attempt_in_the_singular() -> None:
    page = site._render_index(_entries(1))
    assert "1 run, newest first" in page
    assert "(1 failed attempt)" in page and "attempt(s)" not in page and "run(s)" not in page


def test_index_of_many_runs_says_them_in_the_plural() -> None:
    page = site._render_index(_entries(INDEX_ROWS + 1, failed=2))
    assert f"{INDEX_ROWS + 1} runs, newest first" in page and "(2 failed attempts)" in page
    assert "… and 1 older run not listed" in page  # one past the rows shown: singular too


def _report_page(tmp_path: Path, replicates: int, failed_kept: int) -> str:
    manifest, records = synthetic_run(replicates=replicates)  # a failed attempt each of trials 3 and 9
    failed = [r for r in records if r.status == "failed"]
    records = [r for r in records if r not in failed[failed_kept:]]
    return render_report(load_report(write_run(tmp_path / manifest.run_id, manifest, records)))


def test_report_says_one_replicate_and_one_failed_attempt(tmp_path: Path) -> None:
    page = _report_page(tmp_path, replicates=2, failed_kept=1)
    assert ", 1 failed attempt</p>" in page and "1 failed or interrupted attempt." in page
    page = _report_page(tmp_path / "one", replicates=1, failed_kept=0)
    assert ", 1 replicate</dd>" in page and "(s)" not in page.replace("http(s)", "")


def test_report_says_two_of_each_in_the_plural(tmp_path: Path) -> None:
    page = _report_page(tmp_path, replicates=2, failed_kept=2)
    assert ", 2 failed attempts</p>" in page and "2 failed or interrupted attempts." in page
    assert ", 2 replicates</dd>" in page


def test_one_trial_is_said_in_the_singular_in_the_status_words_and_the_terminal(capsys) -> None:  # type: ignore[no-untyped-def]
    """A one-trial run (a smoke test, a resume with one left) read "1 trials completed"."""
    from orchestrator.cli.output import show_outcome
    from orchestrator.report.build import completed_of
    from orchestrator.sweep.apitypes import SweepOutcome

    assert completed_of(1, None) == "1 trial completed (a hunt decides its trials as it goes)"
    assert completed_of(0, 1) == "0 of 1 planned trial completed"
    assert completed_of(2, 3) == "2 of 3 planned trials completed"
    show_outcome(SweepOutcome(Path("r"), "r", "completed", completed=1, failed=0, planned=1))
    show_outcome(SweepOutcome(Path("r"), "r", "completed", completed=2, failed=1, planned=3))
    said = capsys.readouterr().out
    assert "1 trial completed, 0 failed" in said and "2 trials completed, 1 failed" in said, said
