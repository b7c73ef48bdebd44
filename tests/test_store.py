"""store.atomic (the one atomic writer) and store.rundir (the run folder's names)."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pydantic
import pytest

from orchestrator.errors import JournalError
from orchestrator.store import atomic, attempts
from orchestrator.store.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from orchestrator.store.attempts import claim_attempt
from orchestrator.store.rundir import BackupDir, ReportsDir, RunDir, TrialDir


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_write_bytes_replaces_the_file_whole_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")
    assert write_bytes_atomic(target, b"new\x00bytes") == target
    assert target.read_bytes() == b"new\x00bytes"
    assert leftovers(tmp_path) == []


def test_mode_is_the_one_asked_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        write_text_atomic(tmp_path / "public", "x")
    finally:
        os.umask(old)
    write_text_atomic(tmp_path / "secret", "x", mode=0o600)
    assert stat.S_IMODE((tmp_path / "public").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600


def test_fsync_false_skips_fsync_but_still_renames(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    write_bytes_atomic(tmp_path / "a", b"1", fsync=False)
    assert synced == []
    write_bytes_atomic(tmp_path / "b", b"2")
    assert len(synced) == 2  # the file, then its folder
    assert (tmp_path / "a").read_bytes() == b"1"


def test_failed_write_keeps_the_old_file_removes_the_temp_and_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "run.json"
    target.write_text("old")

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "write", full)
    with pytest.raises(JournalError, match=r"run.json: cannot write file: No space left on device \(the disk is full"):
        write_text_atomic(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert leftovers(tmp_path) == []


def test_interrupt_mid_write_removes_the_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(fd: int, data: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_bytes_atomic(tmp_path / "x", b"data")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_missing_folder_is_a_journal_error_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match=r"cannot write file: .* \(the directory does not exist\)"):
        write_bytes_atomic(tmp_path / "nope" / "f", b"x")


class Model(pydantic.BaseModel):
    name: str
    n: int


def test_write_json_takes_a_model_or_plain_data(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "m.json", Model(name="a", n=1))
    write_json_atomic(tmp_path / "d.json", {"web": {"orch-web": True}}, indent=1)
    assert Model.model_validate_json((tmp_path / "m.json").read_text()) == Model(name="a", n=1)
    assert (tmp_path / "m.json").read_text().endswith("}\n")
    assert json.loads((tmp_path / "d.json").read_text()) == {"web": {"orch-web": True}}


def test_run_dir_names_every_file_of_a_run(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r1")
    assert run.run_json == tmp_path / "r1" / "run.json"
    assert run.plan_json.name == "plan.json"
    assert run.journal.name == "journal.jsonl"
    assert run.journal_index.name == "journal.jsonl.idx"
    assert run.status_json.name == "status.json"
    assert run.summary_json.name == "summary.json"
    assert run.index_html.name == "index.html"
    assert run.export("r1", "csv") == tmp_path / "r1" / "r1.csv"
    assert run.trials == tmp_path / "r1" / "trials"


def test_trial_dir_is_zero_padded_and_names_its_files(tmp_path: Path) -> None:
    trial = RunDir(tmp_path).trial(7)
    assert trial == TrialDir(tmp_path / "trials" / "0007")
    assert trial.repro_out == tmp_path / "trials" / "0007" / "repro.out"
    assert trial.repro_err.name == "repro.err"
    assert trial.logs == tmp_path / "trials" / "0007" / "logs"
    assert trial.log("web", "orch-web") == tmp_path / "trials" / "0007" / "logs" / "web-orch-web.log"
    assert RunDir(tmp_path).relative(trial.repro_out) == "trials/0007/repro.out"


def test_each_attempt_claims_a_folder_no_earlier_attempt_holds(tmp_path: Path) -> None:
    """A resumed session asks for attempt 1 again: it gets the first number whose folder is free
    (an earlier session's attempt, journaled or cut off, keeps its files), created with logs/."""
    run = RunDir(tmp_path / "r1")
    assert claim_attempt(run, 7) == (run.trial(7), 1)  # a first session: the number it asks for
    assert run.trial(7).logs.is_dir()
    (run.trial(7).repro_out).write_text("attempt 1's output\n")
    assert claim_attempt(run, 7, 2) == (run.trial(7, 2), 2)  # its retry
    assert claim_attempt(run, 7) == (run.trial(7, 3), 3)  # the next session's first attempt
    assert claim_attempt(run, 7, 2) == (run.trial(7, 4), 4)  # and its retry
    assert run.trial(7).repro_out.read_text() == "attempt 1's output\n"
    assert claim_attempt(run, 8) == (run.trial(8), 1)


def test_an_attempt_never_writes_into_a_name_something_else_holds(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.trials.mkdir()
    (run.trials / "0003").write_text("not a folder")
    (run.trials / "0003-attempt2").symlink_to(tmp_path / "elsewhere")
    assert claim_attempt(run, 3) == (run.trial(3, 3), 3)
    assert not (tmp_path / "elsewhere").exists()


def test_an_attempt_folder_that_cannot_be_made_stops_the_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = RunDir(tmp_path)
    (tmp_path / "trials").write_text("a file where the trials folder goes")
    with pytest.raises(JournalError, match=r"trials/0000: cannot create the trial folder"):
        claim_attempt(run, 0)
    monkeypatch.setattr(attempts, "MAX_ATTEMPTS", 2)
    other = RunDir(tmp_path / "r2")
    claim_attempt(other, 0)
    claim_attempt(other, 0)
    with pytest.raises(JournalError, match=r"trial 0 has no free attempt folder among 2 from attempt 1"):
        claim_attempt(other, 0)


def test_backup_dir_is_per_testbed_in_a_parallel_sweep(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.backup() == BackupDir(tmp_path / "backup")
    assert run.backup("bed-b").path == tmp_path / "backup" / "bed-b"
    assert run.backup("bed-b").units_json == tmp_path / "backup" / "bed-b" / "units.json"
    assert run.backup().env("db") == tmp_path / "backup" / "db.env"
    assert run.backup_root == tmp_path / "backup"


def test_run_dir_is_a_value(tmp_path: Path) -> None:
    assert RunDir(tmp_path) == RunDir.of(tmp_path) == RunDir.of(str(tmp_path))
    run = RunDir(tmp_path)
    assert RunDir.of(run) is run
    assert {RunDir(tmp_path), RunDir(tmp_path)} == {run}
    with pytest.raises(AttributeError):
        run.path = tmp_path / "other"  # type: ignore[misc]


def test_is_run_looks_for_the_manifest(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert not run.is_run()
    run.run_json.write_text("{}")
    assert run.is_run()


def test_reports_dir_names_the_site_files(tmp_path: Path) -> None:
    reports = ReportsDir(tmp_path)
    assert reports.index_html == tmp_path / "index.html"
    assert reports.run("r1") == RunDir(tmp_path / "r1")
    assert reports.compare_page("a", "b") == tmp_path / "compare-a-vs-b.html"
