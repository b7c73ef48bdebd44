"""A trial's durations are measured on the monotonic clock: the wall clock may be stepped while a
trial runs (NTP correcting a drifted controller, a VM resumed from a snapshot), and a duration
taken from it then came out negative or an hour long in the record, its exports and the report."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fakes import Reply
from helpers.parallel_fakes import Fleet, fake_matrix, install, run, write_files

from orchestrator.core.records import TrialRecord
from orchestrator.store.journal import read_journal
from orchestrator.sweep import phases

ENV = {"prefill": "P=0\n", "decode": "D=0\n"}
MATRIX = fake_matrix("clockstep", 2)  # two cells, the repro on prefill
STEP_S = 3600.0  # the wall clock goes back an hour while each repro runs


class _SteppedClock:
    """`time` as phases sees it: the wall clock stepped back by STEP_S for every repro so far."""

    def __init__(self) -> None:
        self.steps = 0

    def time(self) -> float:
        return time.time() - self.steps * STEP_S

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


def test_a_wall_clock_stepped_back_during_a_trial_leaves_its_durations_true(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    clock = _SteppedClock()
    monkeypatch.setattr(phases, "time", clock)

    def step_back(testbed: str, command: str) -> Reply | None:
        clock.steps += 1
        return None

    fleet.repro_hook = step_back
    m, i = write_files(tmp_path, MATRIX, ["A"])
    outcome = run(tmp_path, m, i, ("A",))
    assert not outcome.interrupted and clock.steps == 4, outcome
    records = read_journal(tmp_path / "reports" / "r1" / "journal.jsonl").records
    trials = [r for r in records if isinstance(r, TrialRecord)]
    assert len(trials) == 4
    for t in trials:
        assert t.status == "completed", t
        assert 0 <= t.duration_s < 60, t.duration_s
        assert t.repro is not None and 0 <= t.repro.duration_s < 60, t.repro.duration_s
