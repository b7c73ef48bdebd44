"""The progress bar keeps its bar, count and times on a 120-column terminal whatever the cell's
name (a hunt's runs to 300 characters), and the plain lines of a log say elapsed and ETA."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.core.records import MetricValue, TrialRecord
from orchestrator.sweep.progress import RichProgress, clock_text, eta_s

LONG_CELL = ",".join(f"bf16_index_k_{i}=on,cuda_graph_{i}=off" for i in range(10))  # ~330 characters


def record(i: int, cell: str = LONG_CELL) -> TrialRecord:
    return TrialRecord(
        run_id="r",
        trial=i,
        round=0,
        cell=cell,
        levels={"x": "on"},
        testbed="tb",
        status="completed",
        started="x",
        ended="y",
        duration_s=1.0,
        metrics={"corruption": MetricValue(kind="proportion", k=0, n=40)},
    )


def bar_line(open_ended: bool) -> str:
    now = [0.0]
    console = Console(width=120, force_terminal=True, record=True, file=io.StringIO())
    progress = RichProgress(console, open_ended=open_ended, clock=lambda: now[0])
    progress.start(64, 0)
    for i in range(34):
        now[0] += 160 / 34
        progress.trial_done(record(i))
    assert progress.bar is not None
    progress.bar.refresh()
    progress.stop()
    frames = console.export_text().replace("\n", "").split("trials ")  # the live frames, control codes gone
    return "trials " + frames[-1]


def test_a_long_cell_name_never_squeezes_the_bar_count_or_times_on_120_columns() -> None:
    line = bar_line(open_ended=False)
    assert len(line) <= 120
    assert "━" * 10 in line  # the bar keeps its width
    assert " 34/64 " in line and " 2:40 " in line and "ETA 2:21" in line  # 30 left at 160 s / 34
    assert "last: bf16_index_k_0=on,cuda_graph_0=off" in line and line.endswith("…")


def test_a_hunt_bar_shows_trials_done_and_elapsed_but_no_eta() -> None:
    line = bar_line(open_ended=True)
    assert len(line) <= 120 and "34 done" in line and " 2:40 " in line and "ETA" not in line
    assert line.endswith("…")


def test_plain_lines_say_elapsed_and_the_eta_of_the_trials_this_process_ran() -> None:
    out = io.StringIO()
    now = [100.0]
    progress = RichProgress(Console(file=out, width=80), clock=lambda: now[0])
    progress.start(64, 30)  # resumed: 30 done before; the pace is this process's own
    for i in range(4):
        now[0] += 40
        progress.trial_done(record(i, "overlap=on"))
    progress.stop()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[31/64] 0:40 elapsed, ETA 22:00 — overlap=on: corruption 0/40 (0%)"
    assert lines[-1] == "[34/64] 2:40 elapsed, ETA 20:00 — overlap=on: corruption 0/40 (0%)"


def test_plain_lines_keep_a_long_cell_whole_on_one_line() -> None:
    out = io.StringIO()
    progress = RichProgress(Console(file=out, width=80), clock=lambda: 0.0)
    progress.start(2, 0)
    progress.trial_done(record(0))
    assert out.getvalue().count("\n") == 1 and LONG_CELL in out.getvalue()


def test_a_hunt_in_a_log_says_it_has_no_eta() -> None:
    out = io.StringIO()
    now = [0.0]
    progress = RichProgress(Console(file=out, width=80), open_ended=True, clock=lambda: now[0])
    progress.start(18, 24)
    now[0] = 3723.0
    progress.trial_done(record(24, "overlap=on"))
    assert out.getvalue().splitlines() == [
        "[25 done] 1:02:03 elapsed, no ETA (a hunt decides its trials as it goes) — overlap=on: corruption 0/40 (0%)"
    ]


def test_eta_is_unknown_before_a_trial_and_never_negative() -> None:
    assert eta_s(10.0, 0, 5) is None and clock_text(None) == "-:--"
    assert eta_s(10.0, 2, -1) == 0.0 and eta_s(10.0, 2, 3) == 15.0
