"""The CLI prints an error's notes (BaseException.add_note): a parallel run that fails on one
testbed notes the hosts another testbed left changed and how to put them back (sweep.runner), and
that line must reach the user, on its own line, markup shown as written, whatever the error."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from orchestrator.cli import main as cli
from orchestrator.errors import Interrupted, JournalError, TransportError
from orchestrator.sweep.runner import RunResult, _raise_first_failure

RUN_DIR = Path("reports/r1")


def orch_restore_raising(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    """`orch restore RUN_DIR` raises `exc` (the command is bound when main() builds its parser)."""

    def cmd(args: argparse.Namespace) -> int:
        raise exc

    monkeypatch.setattr(cli, "cmd_restore", cmd)


def stderr_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_an_error_raised_in_a_parallel_run_prints_the_unrestored_hosts_note(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    failure = JournalError("journal.jsonl: No space left on device")
    with pytest.raises(JournalError):  # the runner's own note, as a parallel run raises it
        _raise_first_failure([failure], RunResult(RUN_DIR, not_restored=["B/decode"]))
    orch_restore_raising(monkeypatch, failure)
    assert cli.main(["restore", str(RUN_DIR)]) == 1
    lines = stderr_lines(capsys)
    assert lines[0] == "error: journal.jsonl: No space left on device"
    assert f"NOT restored: B/decode; finish with: orch restore {RUN_DIR}" in lines


def test_every_note_is_printed_on_its_own_line_markup_as_written(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    exc = TransportError("decode (10.0.0.4:22)", "connection lost", detail="the last lines")
    exc.add_note("first note [red]not red[/red]")
    exc.add_note("second note")
    orch_restore_raising(monkeypatch, exc)
    assert cli.main(["restore", str(RUN_DIR)]) == 1
    lines = stderr_lines(capsys)
    assert lines[1:] == ["first note [red]not red[/red]", "second note", "the last lines"]


def test_an_interrupt_prints_its_notes(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    exc = Interrupted("stopping: interrupted by the user or a signal")
    exc.add_note("decode: the stopped command `repro`: could not kill its process group 42: connection lost")
    orch_restore_raising(monkeypatch, exc)
    assert cli.main(["restore", str(RUN_DIR)]) == 130
    assert stderr_lines(capsys) == [
        "interrupted (stopping: interrupted by the user or a signal)",
        "decode: the stopped command `repro`: could not kill its process group 42: connection lost",
    ]


def test_an_unexpected_error_prints_its_notes_before_its_traceback(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    bug = RuntimeError("a bug")
    bug.add_note(f"NOT restored: A/decode; finish with: orch restore {RUN_DIR}")
    orch_restore_raising(monkeypatch, bug)
    with pytest.raises(RuntimeError, match="a bug"):  # still a traceback: it is a bug to report
        cli.main(["restore", str(RUN_DIR)])
    assert stderr_lines(capsys) == [f"NOT restored: A/decode; finish with: orch restore {RUN_DIR}"]


@pytest.mark.parametrize(
    ("exc", "what"),
    [(RuntimeError("can't start new thread"), "cannot start a thread"), (MemoryError(), "out of memory")],
)
def test_a_controller_out_of_threads_or_memory_is_said_with_its_notes_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], exc: BaseException, what: str
) -> None:
    """`ulimit -v 2000000` (2 GB, as some shared login nodes set): the demo's fourth trial could not
    start a thread and orch ended in a Python traceback (exit 1), hosts restored."""
    exc.add_note("NOT restored: decode; finish with: orch restore reports/r1")
    orch_restore_raising(monkeypatch, exc)
    assert cli.main(["restore", str(RUN_DIR)]) == 1
    lines = stderr_lines(capsys)
    assert lines[0].startswith(f"error: the controller ran out of resources: {what} (raise its limits: `ulimit -v`")
    assert "NOT restored: decode; finish with: orch restore reports/r1" in lines


def test_another_runtime_error_is_still_a_bug_with_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    orch_restore_raising(monkeypatch, RuntimeError("dictionary changed size during iteration"))
    with pytest.raises(RuntimeError, match="dictionary changed size"):
        cli.main(["restore", str(RUN_DIR)])
