"""`orch export` as a new user's walk of README's "### Reports" found it on real runs of the bundled
simulator: `-o matrices/m.yaml` replaced the user's matrix with CSV, exit 0; a run with no trial
gave a header-only file, exit 0, without a word."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli.main import main


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    manifest, records = synthetic_run()
    return write_run(tmp_path / "reports" / manifest.run_id, manifest, records)


def test_export_refuses_to_replace_an_existing_file_not_named_as_its_export(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`orch export RUN -o matrices/m.yaml` replaced the user's matrix with CSV, exit 0."""
    matrix = tmp_path / "m.yaml"
    matrix.write_text("name: mine\n")
    assert main(["export", str(run_dir), "-o", str(matrix)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--output {matrix}: an existing file not named as a csv export" in err, err
    assert "name a new file or one ending .csv" in err and f"remove {matrix} first" in err
    assert matrix.read_text() == "name: mine\n"  # untouched
    for fmt, name in (("bencher", "b.bencher.json"), ("junit", "j.xml")):  # its own suffix: replaced
        (tmp_path / name).write_text("old")
        assert main(["export", str(run_dir), "--format", fmt, "-o", str(tmp_path / name)]) == 0
        assert (tmp_path / name).read_text() != "old"
    assert main(["export", str(run_dir), "--format", "junit", "-o", str(matrix)]) == 2
    assert "not named as a junit export" in capsys.readouterr().err and matrix.read_text() == "name: mine\n"


def test_export_still_writes_a_new_file_of_any_name_and_replaces_its_own_kind(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = tmp_path / "table.txt"
    assert main(["export", str(run_dir), "-o", str(new)]) == 0
    assert new.read_text().startswith("run_id,trial,")
    old = tmp_path / "old.CSV"
    old.write_text("stale\n")
    assert main(["export", str(run_dir), "-o", str(old)]) == 0
    assert old.read_text().startswith("run_id,trial,")
    capsys.readouterr()
    assert main(["export", str(run_dir), "-o", str(new)]) == 2  # now it exists, and is no .csv
    assert "an existing file not named as a csv export" in " ".join(capsys.readouterr().err.split())


def test_export_of_a_run_with_no_trial_warns_that_the_file_has_no_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A header-only file, exit 0, without a word: read as the run's data."""
    manifest, _ = synthetic_run(status="interrupted")
    empty = write_run(tmp_path / manifest.run_id, manifest, [])
    assert main(["export", str(empty), "-o", str(tmp_path / "e.csv")]) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "warning" in line] == [
        "warning: the run has no finished trial: the csv file has no row"
    ], err
    assert (tmp_path / "e.csv").read_text().count("\n") == 1  # the header, as before


def test_export_of_a_run_with_trials_says_nothing_of_rows(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(run_dir), "--format", "json", "-o", "-"]) == 0
    assert "no row" not in capsys.readouterr().err


def test_compare_refuses_to_replace_an_existing_file_not_named_as_a_page(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`orch compare A B -o m.yaml` replaced the user's file with HTML, as export did (the helper
    that fixed export left it)."""
    manifest, records = synthetic_run(seed=2, run_id="other")
    other = write_run(tmp_path / "reports" / manifest.run_id, manifest, records)
    matrix = tmp_path / "m.yaml"
    matrix.write_text("name: mine\n")
    assert main(["compare", str(run_dir), str(other), "-o", str(matrix)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--output {matrix}: an existing file not named as a comparison page" in err, err
    assert matrix.read_text() == "name: mine\n"
    page = tmp_path / "c.html"
    page.write_text("old")
    assert main(["compare", str(run_dir), str(other), "-o", str(page)]) == 0
    assert page.read_text().startswith("<!DOCTYPE html>") or "<html" in page.read_text()


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_export_of_a_run_still_running_says_the_file_holds_its_trials_so_far(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """junit and bencher said so; the tidy table did not, and read as the whole run (the ninth walk)."""
    manifest, records = synthetic_run(status="running")
    running = write_run(tmp_path / manifest.run_id, manifest, records[:5], end_events=())
    assert main(["export", str(running), "--format", fmt, "-o", str(tmp_path / f"e.{fmt}")]) == 0
    err = capsys.readouterr().err
    assert "warning: the run has not ended (status running): the file holds its trials so far" in err, err


def test_export_of_an_ended_run_says_nothing_of_its_end(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(run_dir), "-o", "-"]) == 0
    assert "has not ended" not in capsys.readouterr().err
