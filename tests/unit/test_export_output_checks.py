"""`orch export -o TARGET`'s checks before any work (report.export.check_output), where the
fifteenth mutation round found them untested: the tests run as root, for whom every folder is
writable, so "not writable" is shown here through os.access as the export module sees it (a
read-only mount or another user's folder answer so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.report import export
from orchestrator.report.export import check_output


def _nothing_writable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export.os, "access", lambda path, mode: False)


def test_dash_is_stdout_whatever_the_current_folder_allows(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`-o -` names no file: a read-only current folder must not refuse it."""
    monkeypatch.chdir(tmp_path)
    _nothing_writable(monkeypatch)
    check_output(Path("-"))
    with pytest.raises(UsageError, match=r"not writable"):
        check_output(tmp_path / "-")  # a file named "-" in a folder is a file like any other


def test_a_folder_that_cannot_be_written_is_refused_saying_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _nothing_writable(monkeypatch)
    with pytest.raises(UsageError, match=r"not writable") as refused:
        check_output(tmp_path / "run.csv")
    assert refused.value.hint == "pick a folder you can write to"


def test_an_existing_file_that_cannot_be_written_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Its folder takes writes; the file itself does not (a read-only copy from last week)."""
    target = tmp_path / "run.csv"
    target.write_text("old\n")
    monkeypatch.setattr(export.os, "access", lambda path, mode: Path(path) != target)
    with pytest.raises(UsageError, match=r"not writable"):
        check_output(target)
    check_output(tmp_path / "new.csv")  # a new file in the same folder is fine


def test_a_file_named_as_the_folder_of_the_output_is_named_as_such(tmp_path: Path) -> None:
    """`-o notes.txt/run.csv` where notes.txt is a file: said so, not as "not writable"."""
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(UsageError, match=r"notes.txt is not a folder") as refused:
        check_output(tmp_path / "notes.txt" / "run.csv")
    assert refused.value.hint == "name a file inside a folder"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    from helpers.report_synth import synthetic_run, write_run

    manifest, records = synthetic_run(replicates=1)
    return write_run(tmp_path / "reports" / manifest.run_id, manifest, records)


def test_parquet_to_a_terminal_is_refused_before_anything_is_read(
    monkeypatch: pytest.MonkeyPatch, run_dir: Path
) -> None:
    monkeypatch.setattr(export.sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(export, "_frames", lambda *a: pytest.fail("the run was read"))
    with pytest.raises(UsageError, match=r"parquet is binary, not for a terminal"):
        export.export_run(run_dir, "parquet", Path("-"))


def test_an_export_without_a_listener_for_warnings_still_writes_a_run_not_ended(run_dir: Path) -> None:
    """`warn` is optional: a run still `running` (its warning has no one to hear it) exports."""
    from orchestrator.store.manifest import load_manifest, save_manifest

    save_manifest(run_dir, load_manifest(run_dir).model_copy(update={"status": "running", "ended": None}))
    written = export.export_run(run_dir, "csv")
    assert written.is_file() and written.read_text().startswith("run_id,")


def test_orchs_own_export_path_is_replaced_by_name_never_followed(run_dir: Path, tmp_path: Path) -> None:
    """Without -o the file in the run folder is orch's: a link left there is replaced by the file,
    and what it pointed at is left alone (a user's -o is followed: tests/test_output_targets.py)."""
    from orchestrator.store.manifest import load_manifest
    from orchestrator.store.rundir import RunDir

    elsewhere = tmp_path / "elsewhere.csv"
    elsewhere.write_text("someone's\n")
    own = RunDir(run_dir).export(load_manifest(run_dir).run_id, "csv")
    own.symlink_to(elsewhere)
    assert export.export_run(run_dir, "csv") == own
    assert not own.is_symlink() and own.read_text().startswith("run_id,")
    assert elsewhere.read_text() == "someone's\n"


def test_orchs_own_export_path_that_cannot_be_written_is_a_run_file_error_not_a_usage_error(run_dir: Path) -> None:
    """The user named no path: a folder in the way of the run's own export is orch's run folder's
    trouble (JournalError), never "--output ..." (which names a flag the user did not pass)."""
    from orchestrator.errors import JournalError
    from orchestrator.store.manifest import load_manifest
    from orchestrator.store.rundir import RunDir

    RunDir(run_dir).export(load_manifest(run_dir).run_id, "csv").mkdir()
    with pytest.raises(JournalError) as failed:
        export.export_run(run_dir, "csv")
    assert not isinstance(failed.value, UsageError) and "--output" not in str(failed.value)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_journal_that_fails_while_it_is_read_is_that_error_and_nothing_is_written(
    monkeypatch: pytest.MonkeyPatch, run_dir: Path, fmt: str
) -> None:
    """The journal changed under the export (its rows read, its records then not): the journal's
    own error (exit 2, naming the journal), not a TypeError, and no file left half written."""
    from orchestrator.errors import JournalError
    from orchestrator.store import journal

    damaged = JournalError("journal.jsonl:3: changed while it was read")

    def read_records_at(*_a: object) -> object:
        raise damaged

    monkeypatch.setattr(journal, "read_records_at", read_records_at)
    target = run_dir.parent / f"out.{fmt}"
    with pytest.raises(JournalError) as failed:
        export.export_run(run_dir, fmt, target)  # type: ignore[arg-type]
    assert failed.value is damaged and not target.exists()
    assert sorted(p.name for p in run_dir.parent.iterdir()) == [run_dir.name]  # no temp file either
