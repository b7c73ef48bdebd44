"""The controller's memory does not grow with the trials it has run: a trial's record (its repro's
output tail, its servers' provenance and metrics: ~12 KB in memory on the simulator) goes to the
journal and is let go. The runner once kept every one in RunResult.records to the end of the
sweep, for the two figures run.json's hosts_changed needs (how many trials the session ran on a
testbed, and when the first began): ~6 MB over a 512-trial sweep, ~100 MB over 8,192."""

from __future__ import annotations

import gc
from pathlib import Path

from fakes import FakeUnit, Role, flag, make_bed, make_plan, runner_for

from orchestrator.core.hostfacts import TrialsRan
from orchestrator.core.records import TrialRecord


def _records_alive_after(tmp_path: Path, replicates: int) -> int:
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=replicates)
    runner = runner_for(bed, plan, tmp_path / f"run{replicates}")
    result = runner.execute()
    assert (result.completed, result.failed) == (2 * replicates, 0)
    gc.collect()
    alive = sum(isinstance(o, TrialRecord) for o in gc.get_objects())
    del runner, result
    gc.collect()
    return alive


def test_the_runner_holds_no_more_trial_records_after_16_trials_than_after_2(tmp_path: Path) -> None:
    assert _records_alive_after(tmp_path, 8) == _records_alive_after(tmp_path, 1)


def test_trials_ran_counts_each_trial_once_and_keeps_the_earliest_start() -> None:
    a = TrialsRan()
    for trial, second in [(3, 5), (1, 1), (3, 9)]:
        a.add(trial, f"2026-12-06T10:00:0{second}.000+00:00")
    assert (a.trials, a.first_started) == ({1, 3}, "2026-12-06T10:00:01.000+00:00")
    b = TrialsRan({2}, "2026-12-06T09:59:59.000+00:00")
    assert a.merged(b) == TrialsRan({1, 2, 3}, "2026-12-06T09:59:59.000+00:00")
    assert TrialsRan().merged(a) == a and a.merged(TrialsRan()) == a
