"""A resume stopped before it took the run over (on the fakes, no process).

Stopped after it adopted a killed run's backup: its restore puts that run's hosts back, and what
it left reaches status.json. The sweep's status file (team.livestatus.LiveStatus) is started only
once the resume takes the run over, and what the restore left was written only into a started
file. The kill-point harness (`bench/bench_kill_points.py --kill-way-back resume --seed 9400`,
seed 9412): a second Ctrl-C skipped decode's restore, the terminal said "NOT restored: decode;
finish with: orch restore ...", and status.json, as the killed run left it, named nothing left
changed, so `orch status` named no way back while decode's copy of the original was on the host.

Stopped before it adopted anything (the same seed replayed: the first Ctrl-C inside the adopt):
its restore has nothing to put back, so the run stays as it was, and the interrupt goes up with
the note a resume stopped while it is announced gets. It was marked interrupted (read as: hosts
restored) while the killed run's edit and units were still on the hosts.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from fakes import FakeBed
from helpers.killed_runs import RUN_ID, Killed, killed_run
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.core.steps import Plan
from orchestrator.store.atomic import write_json_atomic
from orchestrator.store.liveness import StatusFile
from orchestrator.store.manifest import load_manifest
from orchestrator.sweep import api
from orchestrator.sweep.hosts import HostGuard
from orchestrator.sweep.progress import QuietProgress
from orchestrator.sweep.runner import Runner, RunOptions, RunResult, _merge
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


def _adopt_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first Ctrl-C lands while the resume reads the killed run's backup (HostGuard.adopt)."""

    def ctrl_c(self: HostGuard) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(HostGuard, "adopt", ctrl_c)


def test_a_resume_stopped_before_it_adopted_anything_hands_the_interrupt_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its restore had nothing to put back: the result says so (api.resume then leaves the run as
    it was), and the terminal is not told the hosts are being restored."""
    bed, plan, run_dir = _killed_with_status(tmp_path, monkeypatch)
    _adopt_interrupted(monkeypatch)
    notes: list[str] = []
    progress = LiveStatus(run_dir)
    monkeypatch.setattr(progress, "note", notes.append)
    runner = Runner(
        plan, bed.deployment, run_dir, RunOptions(RUN_ID, retry_backoff_s=0.0), progress=progress, client=bed.client
    )
    result = runner.execute(set(), resume=True)
    assert result.interrupted and isinstance(result.before_take_over, KeyboardInterrupt)
    assert not any("restoring the hosts" in note for note in notes), notes
    assert bed.transports["decode"].files[bed.env_file("decode")] == b"DECODE_FLAG=1\n"
    assert json.loads((run_dir / "status.json").read_text())["not_restored"] == []


def test_an_api_resume_stopped_before_it_adopted_anything_leaves_the_killed_run_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run.json kept saying running (so `orch status` says stale and names both ways back), where it
    was marked interrupted (read as: hosts restored) with decode still on a cell's flags (the
    kill-point harness, seed 9412 replayed: the first Ctrl-C inside the adopt)."""
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("killed", 2), ["A"])

    def killed(testbed: str, command: str) -> None:
        raise Killed

    fleet.repro_hook = killed
    with monkeypatch.context() as mp:
        mp.setattr(HostGuard, "restore", lambda self, run_dir, again="": [])  # kill -9: no restore
        req = api.SweepRequest(
            m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True
        )
        with pytest.raises(Killed):
            api.run(req, lambda started: QuietProgress(), warn=lambda message: None)
    fleet.repro_hook = None
    run_dir = tmp_path / "reports" / "r1"
    assert fleet.file("A", "decode") != b"D=0\n", "the kill left decode on a cell's flags"
    before = (run_dir / "run.json").read_bytes()
    _adopt_interrupted(monkeypatch)
    with pytest.raises(KeyboardInterrupt) as stopped:
        api.resume(api.ResumeRequest(run_dir), lambda started: QuietProgress(), warn=lambda message: None)
    assert (run_dir / "run.json").read_bytes() == before and load_manifest(run_dir, plan=False).status == "running"
    assert getattr(stopped.value, "__notes__", []) == [
        "this resume stopped before its first trial: it edited no env file, and the hosts are as the "
        f"interrupted run left them; resume with: orch resume {run_dir} (or put the hosts back with: "
        f"orch restore {run_dir})"
    ]
    assert fleet.file("A", "decode") != b"D=0\n"


def test_a_parallel_resume_is_left_as_it_was_only_when_no_testbed_was_taken_over(tmp_path: Path) -> None:
    """runner._merge: one testbed whose runner adopted its originals restored them, so the run
    ended as interrupted is then true of it; with none taken over the run stays as it was."""

    def runner(name: str, early: BaseException | None) -> SimpleNamespace:
        result = RunResult(tmp_path, interrupted=True, before_take_over=early)
        return SimpleNamespace(result=result, deployment=SimpleNamespace(testbed=SimpleNamespace(name=name)))

    first, second = KeyboardInterrupt(), KeyboardInterrupt()
    assert _merge(tmp_path, [runner("A", first), runner("B", second)]).before_take_over is first  # type: ignore[list-item]
    assert _merge(tmp_path, [runner("A", first), runner("B", None)]).before_take_over is None  # type: ignore[list-item]
    assert _merge(tmp_path, []).before_take_over is None
