"""The sweep's progress lines: counts, and the total shrinking when an adaptive sweep stops cells."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from orchestrator.core.records import MetricValue, TrialRecord
from orchestrator.sweep.progress import RichProgress


def trial(i: int, k: int) -> TrialRecord:
    return TrialRecord(
        run_id="r",
        trial=i,
        round=0,
        cell="overlap=off",
        levels={"overlap": "off"},
        testbed="tb",
        status="completed",
        started="x",
        ended="y",
        duration_s=1.0,
        metrics={"corruption": MetricValue(kind="proportion", k=k, n=10)},
    )


def test_lines_count_trials_and_follow_a_shrinking_total() -> None:
    out = io.StringIO()
    now = [0.0]
    progress = RichProgress(Console(file=out, force_terminal=False, width=200), clock=lambda: now[0])
    progress.start(8, 0)
    now[0] = 60.0
    progress.trial_done(trial(0, 1))
    progress.retotal(3)  # cells were decided: 1 done + at most 3 more
    now[0] = 90.0
    progress.trial_done(trial(1, 0))
    progress.stop()
    assert out.getvalue().splitlines() == [
        "[1/8] 1:00 elapsed, ETA 7:00 — overlap=off: corruption 1/10 (10%)",
        "[2/4] 1:30 elapsed, ETA 1:30 — overlap=off: corruption 0/10 (0%)",
    ]


def test_a_trial_told_before_start_prints_its_line_alone_and_as_text() -> None:
    """The runner starts the bar first; a sink told of a trial before that still prints its line
    (never a traceback), and a cell's brackets are text, not rich markup."""
    out = io.StringIO()
    progress = RichProgress(Console(file=out, force_terminal=False, width=200), cell_name=lambda r: "[b]cell[/b]")
    progress.trial_done(trial(0, 1))
    assert out.getvalue().splitlines() == ["[1/0] [b]cell[/b]: corruption 1/10 (10%)"]


def test_plain_lines_print_a_cells_brackets_as_text() -> None:
    out = io.StringIO()
    now = [0.0]
    progress = RichProgress(
        Console(file=out, force_terminal=False, width=200), clock=lambda: now[0], cell_name=lambda r: "[red]x[/red]"
    )
    progress.start(2, 0)
    now[0] = 30.0
    progress.trial_done(trial(0, 1))
    assert out.getvalue().splitlines() == ["[1/2] 0:30 elapsed, ETA 0:30 — [red]x[/red]: corruption 1/10 (10%)"]


def test_the_default_console_is_stderr_and_leaves_a_repros_colons_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """stdout is the command's answer (a path, a table a script reads); progress goes to stderr.
    `:fire:` in a cell or a repro's output is text, not an emoji."""
    progress = RichProgress(cell_name=lambda r: "x:fire:y")
    progress.trial_done(trial(0, 1))
    progress.note("note :thumbs_up:")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "x:fire:y: corruption 1/10 (10%)" in captured.err and "note :thumbs_up:" in captured.err


def test_a_terminals_bar_follows_a_shrinking_total_and_stops_live() -> None:
    now = [0.0]
    console = Console(width=120, force_terminal=True, record=True, file=io.StringIO())
    progress = RichProgress(console, clock=lambda: now[0])
    progress.start(8, 0)
    bar = progress.bar
    assert bar is not None and bar.live.is_started
    now[0] = 60.0
    progress.trial_done(trial(0, 1))
    progress.retotal(3)
    now[0] = 90.0
    progress.trial_done(trial(1, 0))
    bar.refresh()
    progress.stop()
    assert not bar.live.is_started and progress.bar is None
    last = console.export_text().replace("\n", "").split("trials ")[-1]
    assert "2/4" in last and "2/8" not in last


def test_a_note_longer_than_the_terminal_stays_on_one_line() -> None:
    out = io.StringIO()
    progress = RichProgress(Console(file=out, force_terminal=False, width=40))
    message = "testbed b: " + "x" * 100
    progress.note(message)
    assert out.getvalue() == message + "\n"
