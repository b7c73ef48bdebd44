"""A resume stopped after it adopted a killed run's backup, before it took the run over, still
writes what its restore left into status.json (on the fakes, no process).

Why: the restore that follows such a Ctrl-C puts the killed run's hosts back, but the sweep's
status file (team.livestatus.LiveStatus) is started only once the resume takes the run over, and
what the restore left was written only into a started file. The kill-point harness
(`bench/bench_kill_points.py --kill-way-back resume --seed 9400`, seed 9412): a second Ctrl-C
skipped decode's restore, the terminal said "NOT restored: decode; finish with: orch restore ...",
and status.json, as the killed run left it, still named nothing left changed, so `orch status`
named no way back while decode's copy of the original was still on the host.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import FakeBed
from helpers.killed_runs import RUN_ID, killed_run

from orchestrator.core.steps import Plan
from orchestrator.store.atomic import write_json_atomic
from orchestrator.store.liveness import StatusFile
from orchestrator.sweep.hosts import HostGuard
from orchestrator.sweep.runner import Runner, RunOptions
from orchestrator.team.livestatus import LiveStatus

DEAD_PID = 4_194_305  # above the largest pid_max Linux allows (2^22): the killed controller


def _killed_with_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeBed, Plan, Path]:
    """A killed run and its status.json as the killed controller left it (running, nothing left)."""
    bed, plan = killed_run(tmp_path, monkeypatch)
    run_dir = tmp_path / "run"
    status = StatusFile(
        run_id=RUN_ID, name="m", testbed="fake", host="h", pid=DEAD_PID, pid_start=1,
        state="running", started="2026-12-07T19:58:54+00:00", updated="2026-12-07T19:58:55+00:00",
        done=0, total=len(plan.steps), failed=0,
    )  # fmt: skip
    write_json_atomic(run_dir / "status.json", status)
    return bed, plan, run_dir


def _stopped_resume(bed: FakeBed, plan: Plan, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A resume whose first Ctrl-C lands after it adopted the backup (before it takes the run over)
    and whose second one skips decode's restore: what it says it left."""
    runner = Runner(
        plan, bed.deployment, run_dir, RunOptions(RUN_ID, retry_backoff_s=0.0), progress=LiveStatus(run_dir),
        client=bed.client,
    )  # fmt: skip

    def ctrl_c(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.guard, "check_resumable", ctrl_c)
    with monkeypatch.context() as mp:
        mp.setattr(HostGuard, "_restore_one", ctrl_c)
        result = runner.execute(set(), resume=True)
    assert result.interrupted and runner.guard.states, "it had adopted the killed run's backup"
    return list(result.not_restored)


def test_what_the_restore_left_reaches_the_status_file_the_killed_run_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bed, plan, run_dir = _killed_with_status(tmp_path, monkeypatch)
    assert _stopped_resume(bed, plan, run_dir, monkeypatch) == ["decode"]
    assert bed.transports["decode"].files[bed.env_file("decode")] == b"DECODE_FLAG=1\n", "decode really is left"
    status = json.loads((run_dir / "status.json").read_text())
    command = f"orch restore {run_dir.absolute()}"
    assert (status["not_restored"], status["restore_with"]) == (["decode"], command)
    assert status["note"] == f"NOT restored: decode; finish with: {command}"
    assert (status["pid"], status["done"]) == (DEAD_PID, 0), "the file as the killed run left it, but for that"


def test_a_later_restore_before_start_says_which_command_put_the_host_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bed, plan, run_dir = _killed_with_status(tmp_path, monkeypatch)
    _stopped_resume(bed, plan, run_dir, monkeypatch)
    LiveStatus(run_dir).restore_ended([])  # the next resume, stopped as early, restored decode
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["not_restored"], status["restore_with"]) == ([], "")
    assert status["note"] == "restored since by orch resume: decode"
