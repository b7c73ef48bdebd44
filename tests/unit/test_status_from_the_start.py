"""A run folder appears with its status.json: a controller killed before its first trial is
shown stale, with both ways back, by `orch status` (and every view that asks store.liveness).

Found by the kill-point harness (bench/bench_kill_points.py): SIGKILLed 2.4 s after its start, the
controller had created the run folder (run.json: running) and taken the testbed locks, but the
status file came only with the runner's progress: `orch status` did not list the run at all.
No process is started: a dead controller is this process's pid with another start time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.status_runs import started_run

from orchestrator.store import liveness
from orchestrator.team.livestatus import live_runs

RUN = "20261205-192000-faults"


def _created(reports: Path) -> Path:
    return started_run(reports, RUN)[0]


def test_a_new_run_folder_names_its_live_controller(tmp_path: Path) -> None:
    run_dir = _created(tmp_path)
    [run] = live_runs(tmp_path)
    assert (run.directory, run.state, run.status.done, run.status.total) == (RUN, "running", 0, 16)
    assert run.path == str(run_dir.resolve())


def test_a_controller_killed_before_its_first_trial_is_shown_stale_with_the_way_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = liveness.process_start
    monkeypatch.setattr(liveness, "process_start", lambda pid: (real(pid) or 0) + 1, raising=False)
    run_dir = _created(tmp_path)
    monkeypatch.setattr(liveness, "process_start", real)
    [run] = live_runs(tmp_path)
    assert run.state == "stale"
    assert f"orch resume {run_dir.resolve()}" in run.way_back
    assert f"orch restore {run_dir.resolve()}" in run.way_back
