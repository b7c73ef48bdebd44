"""The journal (store.journal) where bench/mutants.py found lines no test noticed (seeded sample
of 60, seed 1): each test here fails on one of those wrong lines."""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path
from typing import BinaryIO

import pytest

from orchestrator.core.records import EventRecord, TrialRecord
from orchestrator.errors import ConfigError
from orchestrator.store import journal as journal_mod
from orchestrator.store.journal import (
    Journal,
    JournalError,
    last_attempts,
    read_journal,
    read_trial_rows,
    trial_statuses,
)


def _event(kind: str = "run_started") -> EventRecord:
    return EventRecord(run_id="run-1", event=kind, at="2026-05-09T07:00:00Z", message="m")


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_journal_opened_and_closed_many_times_leaves_no_file_open(tmp_path: Path) -> None:
    """A hunt or `orch serve` opens and reads journals again and again: close() must close the
    journal and its status index both, and each read what it opened, or every open leaks a
    descriptor until the process runs out."""
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        j.append(_event())
    before = _open_fds()
    for _ in range(5):
        with Journal(path) as j:
            j.append(_event("run_resumed"))
        trial_statuses(path), last_attempts(path, {1}), read_trial_rows(path)  # what a status page polls
    assert _open_fds() == before
    assert [r.event for r in read_journal(path).records] == ["run_started"] + ["run_resumed"] * 5  # type: ignore[union-attr]


def test_an_append_whose_size_cannot_be_read_is_a_journal_error_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append notes the file's size first (to roll a failed write back): an I/O error there
    is the typed 'cannot append' error naming the file, not a crash, and no line is written."""
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    j.append(_event())
    before = path.read_bytes()
    real_fstat = os.fstat
    journal_fd = j._fd

    def eio_on_the_journal(fd: int) -> os.stat_result:
        if fd == journal_fd:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_fstat(fd)

    monkeypatch.setattr(journal_mod.os, "fstat", eio_on_the_journal)
    with pytest.raises(JournalError, match=r"journal\.jsonl: cannot append to journal: Input/output error"):
        j.append(_event("run_finished"))
    monkeypatch.setattr(journal_mod.os, "fstat", real_fstat)
    assert path.read_bytes() == before
    j.close()


def _trial_line(trial: int, attempt: int) -> dict[str, object]:
    record = TrialRecord.model_validate(
        dict(
            run_id="run-1",
            trial=trial,
            attempt=attempt,
            round=0,
            cell="a=1",
            levels={"a": "1"},
            testbed="fake",
            status="failed",
            started="2026-05-09T07:00:00Z",
            ended="2026-05-09T07:00:02Z",
            duration_s=2.0,
        )
    )
    return json.loads(record.model_dump_json())


def test_last_attempts_counts_only_the_trials_asked_for_whatever_the_lines_spelling(tmp_path: Path) -> None:
    """Resume numbers a retried trial's attempts past the journal's: a line in another spelling
    (keys sorted, as a hand-fixed or converted journal has them) is parsed whole, and a trial
    resume did not ask about must not lend it its attempt number (nor an event crash it)."""
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        j.append(_event())
    lines = [_trial_line(1, 1), _trial_line(2, 7), _trial_line(1, 3)]
    event = json.loads(_event("run_resumed").model_dump_json())
    with path.open("a") as f:
        for obj in [*lines, event]:
            f.write(json.dumps(obj, sort_keys=True) + "\n")
    assert last_attempts(path, {1}) == {1: 3}
    assert last_attempts(path, {2, 9}) == {2: 7}


@pytest.mark.parametrize(
    ("events", "stopped"),
    [
        (["run_started", "run_finished"], False),
        (["run_started", "restored"], False),
        (["run_started", "run_interrupted"], True),
        (["run_started", "run_interrupted", "restored"], True),  # the restore after the Ctrl-C
        (["run_started", "run_interrupted", "run_resumed"], False),
        (["run_started", "run_interrupted", "run_resumed", "run_finished"], False),
    ],
)
def test_a_run_counts_as_stopped_from_an_interrupt_until_the_next_session(
    tmp_path: Path, events: list[str], stopped: bool
) -> None:
    """`orch compare` says a run stopped early when run.json could not be told: an interrupt
    counts until a resume starts a new session, whatever other events follow it."""
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        for kind in events:
            j.append(_event(kind))
    assert read_trial_rows(path).stopped is stopped


def test_a_line_too_long_is_refused_at_its_own_line_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal names file:line so the user can look at the damage: the third line, not the
    block's first (the limit lowered to keep the file small)."""
    monkeypatch.setattr(journal_mod, "MAX_LINE_BYTES", 400)
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        j.append(_event())
        j.append(_event("run_resumed"))
    with path.open("ab") as f:
        f.write(b'{"type":"event","message":"' + b"x" * 500 + b'"}\n' + json.dumps(_trial_line(1, 1)).encode() + b"\n")
    with pytest.raises(ConfigError, match=r"journal\.jsonl:3\b.*longer than"):
        read_trial_rows(path)


def test_a_journal_that_shrinks_while_it_is_read_is_an_error_not_a_read_that_never_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process cut the file (repair_torn_tail of a resume) between the reader's size check
    and its read: the reader says so and stops, instead of waiting forever for bytes that are gone."""
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        for _ in range(3):
            j.append(_event())
    real_body_end = journal_mod._body_end

    def then_cut(handle: BinaryIO) -> tuple[int, bool]:
        end = real_body_end(handle)
        os.truncate(path, 10)
        return end

    monkeypatch.setattr(journal_mod, "_body_end", then_cut)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_trial_rows(path)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "the read never ended"
    assert len(outcome) == 1 and isinstance(outcome[0], JournalError) and "shrank while it was read" in str(outcome[0])
