"""The append-only journal: round trip, torn tails, corruption, write failures, fsync."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from orchestrator.core.records import EventRecord, Failure, MetricValue, ReproOutcome, RunManifest, TrialRecord
from orchestrator.errors import ConfigError, OrchError
from orchestrator.store import journal as journal_mod
from orchestrator.store.atomic import RUN_FILE_HINTS
from orchestrator.store.journal import (
    Journal,
    JournalError,
    read_journal,
    repair_torn_tail,
    write_json_atomic,
)


def _trial(n: int, **kw: object) -> TrialRecord:
    fields: dict[str, object] = dict(
        run_id="run-1",
        trial=n,
        round=0,
        cell="bf16_index_k=on,overlap=on",
        levels={"bf16_index_k": "on", "overlap": "on"},
        testbed="sim",
        status="completed",
        started="2026-05-09T07:00:00Z",
        ended="2026-05-09T07:00:02Z",
        duration_s=2.0,
        env={"decode": {"SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "1"}},
        restarted=["decode:sglang-decode"],
        health_wait_s={"decode": 1.02},
        repro=ReproOutcome(
            command="python repro.py",
            exit_code=0,
            duration_s=0.5,
            stdout_tail='CORRUPTION sessions: 6/40 = 15%\nwall="x"\n',
        ),
        metrics={"corruption": MetricValue(kind="proportion", k=6, n=40)},
    )
    fields.update(kw)
    return TrialRecord.model_validate(fields)


def _event(kind: str = "run_started") -> EventRecord:
    return EventRecord(run_id="run-1", event=kind, at="2026-05-09T07:00:00Z", message="multi\nline")


def _write(path: Path, *records: TrialRecord | EventRecord) -> None:
    with Journal(path) as j:
        for r in records:
            j.append(r)


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    failed = _trial(1, status="failed", failure=Failure(kind="workload", error="WorkloadError", message="m"))
    records = [_event(), _trial(0), failed, _event("run_finished")]
    _write(path, *records)
    assert path.read_bytes().count(b"\n") == 4  # one line per record, newlines in values escaped
    contents = read_journal(path)
    assert contents.records == records
    assert contents.torn_tail is False


def test_reopen_appends(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    _write(path, _event())
    _write(path, _trial(0))
    assert [type(r).__name__ for r in read_journal(path).records] == ["EventRecord", "TrialRecord"]


def test_empty_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    Journal(path).close()
    assert path.exists()
    assert read_journal(path) == journal_mod.JournalContents(records=[], torn_tail=False)


@pytest.mark.parametrize("cut", [1, 0.5, -1])  # one byte, half a line, all but the newline
def test_torn_tail_dropped_flagged_and_repaired(tmp_path: Path, cut: float) -> None:
    path = tmp_path / "journal.jsonl"
    _write(path, _event(), _trial(0), _trial(1))
    data = path.read_bytes()
    last_start = data.rfind(b"\n", 0, len(data) - 1) + 1
    last_len = len(data) - last_start
    keep = {1: 1, 0.5: last_len // 2, -1: last_len - 1}[cut]
    path.write_bytes(data[: last_start + keep])

    contents = read_journal(path)
    assert contents.torn_tail is True
    assert contents.records == [_event(), _trial(0)]

    with pytest.raises(JournalError, match="torn line .*repair_torn_tail"):
        Journal(path)  # appending now would bury the torn line mid-file
    assert repair_torn_tail(path) is True
    assert path.read_bytes() == data[:last_start]
    assert repair_torn_tail(path) is False

    _write(path, _trial(2))
    contents = read_journal(path)
    assert contents.torn_tail is False
    assert contents.records == [_event(), _trial(0), _trial(2)]


def test_nul_filled_last_line_is_torn(tmp_path: Path) -> None:
    """After a crash some file systems show the unwritten tail as zeros."""
    path = tmp_path / "journal.jsonl"
    _write(path, _event())
    with open(path, "ab") as f:
        f.write(b"\0" * 300 + b"\n")
    contents = read_journal(path)
    assert contents.torn_tail is True
    assert contents.records == [_event()]
    assert repair_torn_tail(path) is True
    assert read_journal(path).torn_tail is False


def test_corrupt_middle_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    _write(path, _event(), _trial(0), _trial(1))
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][:40]  # damage line 2 of 3
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(ConfigError) as info:
        read_journal(path)
    assert info.value.file == str(path)
    assert info.value.line == 2
    assert str(info.value).startswith(f"{path}:2: invalid JSON")
    assert "restore the run folder from a copy" in (info.value.hint or "")
    assert "delete this line" not in str(info.value) + (info.value.hint or "")


def test_invalid_record_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    bad = json.loads(_trial(0).model_dump_json())
    bad["status"] = "exploded"
    path.write_text(_event().model_dump_json() + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ConfigError, match=r":2: invalid record: trial.status"):
        read_journal(path)


def test_unknown_schema_version_has_hint(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    future = json.loads(_event().model_dump_json())
    future["schema_version"] = 99
    path.write_text(json.dumps(future) + "\n" + _event("run_finished").model_dump_json() + "\n")
    with pytest.raises(ConfigError) as info:
        read_journal(path)
    assert info.value.line == 1
    assert "unknown journal schema_version 99" in str(info.value)
    assert info.value.hint and "schema_version [1]" in info.value.hint


def test_missing_journal_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no journal here .*run directory"):
        read_journal(tmp_path / "nope.jsonl")


def test_dev_full_gives_clean_error(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.symlink_to("/dev/full")
    j = Journal(path)
    try:
        with pytest.raises(JournalError) as info:
            j.append(_event())
    finally:
        j.close()
    message = str(info.value)
    assert message.startswith(f"{path}: cannot append to journal: No space left on device")
    assert "(the disk is full" in message
    assert isinstance(info.value, OrchError)


def test_parent_is_a_file_gives_clean_error(tmp_path: Path) -> None:
    (tmp_path / "run").write_text("not a directory")
    path = tmp_path / "run" / "journal.jsonl"
    with pytest.raises(JournalError, match=r"run/journal.jsonl: cannot open journal: Not a directory \(a parent"):
        Journal(path)


def test_failed_append_leaves_journal_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that dies half-way (disk full mid-line) is rolled back: no partial line remains."""
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    j.append(_event())
    before = path.read_bytes()
    real_write = os.write

    def half_then_enospc(fd: int, data: bytes) -> int:
        real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(journal_mod.os, "write", half_then_enospc)
    with pytest.raises(JournalError, match="No space left on device"):
        j.append(_trial(0))
    monkeypatch.setattr(journal_mod.os, "write", real_write)
    assert path.read_bytes() == before

    j.append(_trial(1))  # the journal stays usable once space is back
    j.close()
    assert read_journal(path) == journal_mod.JournalContents(records=[_event(), _trial(1)], torn_tail=False)


def test_short_write_and_failed_fsync_are_rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    j.append(_event())
    before = path.read_bytes()
    real_write, real_fsync = os.write, os.fsync

    monkeypatch.setattr(journal_mod.os, "write", lambda fd, data: real_write(fd, bytes(data)[:10]))
    with pytest.raises(JournalError, match="short write"):
        j.append(_trial(0))
    assert path.read_bytes() == before
    monkeypatch.setattr(journal_mod.os, "write", real_write)

    def eio(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(journal_mod.os, "fsync", eio)
    with pytest.raises(JournalError, match=r"Input/output error \(the disk reported"):
        j.append(_trial(0))
    assert path.read_bytes() == before
    monkeypatch.setattr(journal_mod.os, "fsync", real_fsync)
    j.close()


def test_every_append_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(journal_mod.os, "fsync", counting_fsync)
    for n in range(3):
        j.append(_trial(n))
        assert len(synced) == n + 1  # before append() returned
    j.close()


def test_new_journal_fsyncs_its_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(journal_mod.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    Journal(tmp_path / "journal.jsonl").close()
    assert len(synced) == 1


def test_append_after_close_refused(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal.jsonl")
    j.close()
    j.close()  # idempotent
    with pytest.raises(JournalError, match="closed"):
        j.append(_event())


def _manifest(status: str = "running") -> RunManifest:
    return RunManifest(
        run_id="run-1",
        name="dsv4",
        orch_version="0.1.0",
        matrix_path="m.yaml",
        matrix_text="x",
        matrix_sha256="0" * 64,
        inventory_path="i.yaml",
        inventory_text="y",
        inventory_sha256="1" * 64,
        testbed="sim",
        seed=1,
        order="randomized",
        replicates=2,
        factors={"overlap": ["on", "off"]},
        baseline={"overlap": "on"},
        metrics={"corruption": "proportion"},
        plan=[],
        started="2026-05-09T07:00:00Z",
        status=status,
    )


def test_write_json_atomic_replaces_whole_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.json"
    write_json_atomic(path, _manifest())
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(journal_mod.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    write_json_atomic(path, _manifest("completed"))
    assert RunManifest.model_validate_json(path.read_text()) == _manifest("completed")
    assert len(synced) == 2  # the file, then its directory
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temp file left behind


def test_write_json_atomic_failure_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.json"
    write_json_atomic(path, _manifest())
    before = path.read_bytes()

    def enospc(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(journal_mod.os, "write", enospc)
    with pytest.raises(JournalError, match=r"run.json: cannot write file: No space left on device"):
        write_json_atomic(path, _manifest("completed"))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_write_json_atomic_parent_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "run").write_text("")
    with pytest.raises(JournalError, match=r"Not a directory \(a parent"):
        write_json_atomic(tmp_path / "run" / "run.json", _manifest())


@pytest.mark.parametrize(
    ("code", "hint"),
    [(errno.EACCES, "permissions"), (errno.EROFS, "read-only"), (errno.ENOTDIR, "not a directory")],
)
def test_error_hints(tmp_path: Path, code: int, hint: str) -> None:
    err = journal_mod._error(tmp_path / "j", "cannot open journal", OSError(code, os.strerror(code)))
    assert str(err) == f"{tmp_path / 'j'}: cannot open journal: {os.strerror(code)} ({RUN_FILE_HINTS[code]})"
    assert hint in str(err)
