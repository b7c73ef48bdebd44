"""One result for a parallel run (sweep.runner._merge), from its testbeds' runners (pure).

Found by mutation testing of runner._merge: with the parallel runs' own tests passing, each line
could be dropped or turned around (`or` made `and`). What hangs on it: a Ctrl-C that reaches one
testbed's runner after the other has run out of trials still makes the run interrupted (its
status, exit 130); a deadline met on one testbed is the run's; run.json's hosts_changed needs
which trials each testbed ran; a runner that never got a result (it failed to start) adds nothing.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from orchestrator.core.hostfacts import TrialsRan
from orchestrator.sweep.runner import RunResult, _merge


def _runner(name: str, result: RunResult | None) -> SimpleNamespace:
    return SimpleNamespace(result=result, deployment=SimpleNamespace(testbed=SimpleNamespace(name=name)))


def test_the_run_is_interrupted_or_past_its_deadline_when_any_testbed_was(tmp_path: Path) -> None:
    ran_out = RunResult(tmp_path)  # its trials ran out before the Ctrl-C
    cut = RunResult(tmp_path, interrupted=True, deadline_reached=True, not_restored=["decode"])
    merged = _merge(tmp_path, [_runner("A", ran_out), _runner("B", cut)])  # type: ignore[list-item]
    assert merged.interrupted and merged.deadline_reached
    assert merged.not_restored == ["B/decode"]
    both_fine = _merge(tmp_path, [_runner("A", RunResult(tmp_path)), _runner("B", RunResult(tmp_path))])  # type: ignore[list-item]
    assert not both_fine.interrupted and not both_fine.deadline_reached


def test_counts_and_trials_are_each_testbeds_summed(tmp_path: Path) -> None:
    a = RunResult(tmp_path, completed=3, failed=1, ran={"A": TrialsRan({0, 2}, "2026-12-07T20:00:02+00:00")})
    b = RunResult(tmp_path, completed=2, failed=0, ran={"B": TrialsRan({1}, "2026-12-07T20:00:01+00:00")})
    merged = _merge(tmp_path, [_runner("A", a), _runner("B", b), _runner("C", None)])  # type: ignore[list-item]
    assert (merged.completed, merged.failed) == (5, 1)
    assert merged.ran == {
        "A": TrialsRan({0, 2}, "2026-12-07T20:00:02+00:00"),
        "B": TrialsRan({1}, "2026-12-07T20:00:01+00:00"),
    }
