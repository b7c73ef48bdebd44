"""A queue item whose testbed is held by a run that died unrestored (kill -9: its lock and its
edits left on the hosts) fails the night: `orch queue run` exits 1 and says so, where it said
"skipped, its testbed is busy" and exited 0 (the nightly job reported success with decode.env
still holding a cell's values). Such a lock never frees itself, so it is not waited for either.
A testbed busy with a live run is still skipped, waited for and not a failure (unit tier: fake
sweeps, a fake clock, no process)."""

from __future__ import annotations

import json
import socket
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fakes import FakeUnit, Role, make_bed
from helpers.fakeclock import FakeClock

from orchestrator.cli import team as cli_team
from orchestrator.cli.main import main
from orchestrator.edges.lock import LockInfo, TestbedLock, lock_path
from orchestrator.errors import LockError, StaleLockError
from orchestrator.team.queue import NewItem, Queue, QueueItem, SweepOutcome, run_queue

from .helpers import queue_sweep

DEAD_PID = 4_194_305  # above the largest pid_max Linux allows (2^22): never a live process
HELD = "testbed 'sim' is locked on decode by run R1 (pid 4242) — that process is gone (stale lock); ..."


def add(q: Queue, name: str) -> QueueItem:
    return q.add_item(NewItem(Path(f"/m/{name}.yaml"), Path("/i/inv.yaml"), None, testbeds=("sim",)))


def held_by_a_dead_run(item: QueueItem, deadline: float | None, record: Any) -> SweepOutcome:
    return SweepOutcome("locked", 2, None, HELD, unrestored=True)


def test_a_testbed_held_by_a_dead_run_fails_the_night_and_is_not_waited_for(tmp_path: Path) -> None:
    clock, notes = FakeClock(), []
    with Queue(tmp_path / "queue.db") as q:
        item = add(q, "nightly")
        result = run_queue(
            q, held_by_a_dead_run, deadline=3600.0, clock=clock, sleep=clock.sleep, note=notes.append, busy_wait_s=60
        )
        assert q.get(item.id).state == "queued"  # left in line, untouched
    assert result.blocked == [item.id] and result.exit_code == 1
    assert clock.slept == []  # it never frees itself: the night ends now, failed, not at the deadline
    assert any(
        n.startswith(f"{item.label}: NOT run: its testbed is held by a run whose controller died") for n in notes
    )
    assert not any("busy" in n for n in notes)


def test_a_testbed_busy_with_a_live_run_is_still_no_failure(tmp_path: Path) -> None:
    def busy(item: QueueItem, deadline: float | None, record: Any) -> SweepOutcome:
        return SweepOutcome("locked", 2, None, "testbed 'sim' is locked by run R2 (wait for it to finish)")

    with Queue(tmp_path / "queue.db") as q:
        item = add(q, "nightly")
        result = run_queue(q, busy)
    assert result.skipped_locked == [item.id] and result.blocked == [] and result.exit_code == 0


class Refused:
    """sweep.api refusing the item's sweep as the testbed lock does."""

    def __init__(self, error: LockError) -> None:
        self.error = error

    def prepare(self, request: Any, *, warn: Any = None) -> Any:
        return SimpleNamespace(plan=SimpleNamespace(matrix=SimpleNamespace(name="m")))

    def run(self, request: Any, progress: Any, *, warn: Any, prepared: Any = None) -> Any:
        raise self.error

    def resume(self, request: Any, progress: Any, *, warn: Any) -> Any:
        raise AssertionError("not resumable")


@pytest.mark.parametrize(("error", "unrestored"), [(StaleLockError(HELD), True), (LockError("busy"), False)])
def test_the_queue_sweep_tells_a_dead_runs_lock_from_a_busy_testbed(
    tmp_path: Path, error: LockError, unrestored: bool
) -> None:
    sweep = queue_sweep(tmp_path / "reports", Refused(error))
    with Queue(tmp_path / "queue.db") as q:
        item = add(q, "m")
    outcome = sweep(item, None, lambda run_dir: None)
    assert (outcome.status, outcome.unrestored) == ("locked", unrestored)


def test_orch_queue_run_exits_1_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = tmp_path / "reports"
    with Queue.in_reports(reports) as q:
        add(q, "nightly")
    monkeypatch.setattr(cli_team, "_queue_sweep", lambda reports, owner_gone=False: held_by_a_dead_run)
    assert main(["queue", "run", "--reports", str(reports)]) == 1
    said = " ".join(capsys.readouterr().err.split())
    assert "item 1 (nightly.yaml): NOT run" in said and HELD in said
    assert "item 1 not run: a testbed holds a run whose controller died" in said and "exit code 1" in said


class DeadRunsLock(Refused):
    """sweep.api as it meets a testbed whose lock a killed run left: the real lock's refusal."""

    def __init__(self) -> None:
        bed = make_bed({"decode": Role("X=0\n", [FakeUnit("decode-server", active=True)])})
        dead = LockInfo("R1", "ann", DEAD_PID, socket.gethostname(), "t", "fakebed", "/gone/R1")
        bed.transports["decode"].files[lock_path(bed.deployment.hosts["decode"], "")] = json.dumps(
            asdict(dead)
        ).encode()
        self.bed = bed

    def run(self, request: Any, progress: Any, *, warn: Any, prepared: Any = None) -> Any:
        TestbedLock.for_run(self.bed.deployment, request.run_id, "now", run_dir=request.reports_dir).check()
        raise AssertionError("the lock let the sweep start")


def test_a_dead_runs_lock_met_by_a_queued_sweep_fails_the_queue_run(tmp_path: Path) -> None:
    notes: list[str] = []
    with Queue(tmp_path / "queue.db") as q:
        item = add(q, "nightly")
        result = run_queue(q, queue_sweep(tmp_path / "reports", DeadRunsLock()), note=notes.append)
    assert result.exit_code == 1 and result.skipped_locked == [item.id]
    (said,) = [n for n in notes if n.startswith(item.label)]
    assert "NOT run" in said and "no run folder is at /gone/R1" in said and "orch restore --testbed fakebed" in said
