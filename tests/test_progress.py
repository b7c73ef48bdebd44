"""The sweep's progress lines: counts, and the total shrinking when an adaptive sweep stops cells."""

from __future__ import annotations

import io

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
