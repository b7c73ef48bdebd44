"""A hunt with no data, or too little, names no culprit: before the failing configuration has
shown its min_failures failures there is no failure for the flags to explain, and the posterior
over culprit sets is the prior's. The audit saw "culprit: torch_compile (posterior 0.202 < target
0.95; likeliest so far, not established)" and "if so, torch_compile alone would cause the
failure" beside "sessions: 0 in 0 trials"."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.hunt_runs import hunt_trial, small_hunt

from orchestrator.report.hunt import build_report, headline, render, summary_lines


@pytest.mark.parametrize(
    ("trials", "seen"),
    [
        ((), "the failing configuration: not run"),  # no trial at all
        ((None, None), "the failing configuration: not run"),  # every trial failed
        ((1,), "the failing configuration: 1/20 sessions failed"),  # too little: 1 failure of 2
    ],
)
def test_a_hunt_without_a_confirmed_failure_says_nothing_is_known_yet(tmp_path: Path, trials, seen) -> None:  # type: ignore[no-untyped-def]
    m = small_hunt(tmp_path)
    assert m.hunt is not None
    failing = dict(m.hunt.levels((1 << len(m.hunt.flags)) - 1))
    report = build_report(m, [hunt_trial(failing, i, k) for i, k in enumerate(trials)], ended="the run was interrupted")
    lines = summary_lines(report)
    assert lines[1].startswith("nothing is known yet: the failing configuration has not shown its 2 failures"), lines
    assert lines[2].startswith(f"  {seen}"), lines
    said = "\n".join(lines) + render(report) + headline(report)
    for claim in ("culprit:", "likeliest", "Likeliest", "if so", "would cause", "Posterior over culprit sets"):
        assert claim not in said, (claim, lines)
    assert "nothing is known yet" in headline(report)
