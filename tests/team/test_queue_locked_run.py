"""A queue item keeps naming the run it started earlier when a later attempt finds its testbed
locked: the new run's folder is recorded only once the sweep made it (its `Started` callback).

The case from review: a shared queue whose controllers do not share their reports folders.
Controller A died mid-sweep (run R1 in A's reports/, hosts edited, A's testbed lock left
behind). B takes the item back and claims it; the lock is refused and the item goes back in
line. Before the fix, B had already recorded its own never-created run folder, so A's machine
later started a new run instead of resuming R1 (refused by R1's own lock, night after night).
The SQLite store stands in for the server: the code after the claim is the same."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from orchestrator.errors import LockError
from orchestrator.sweep.apitypes import Started, SweepOutcome
from orchestrator.team.queue import NewItem, Queue, QueueItem, run_queue

from .helpers import queue_sweep

R1_ON_CONTROLLER_A = "/srv/controller-a/reports/20250101T000000-m-q1"  # not visible from B


class LockedSweeps:
    """sweep.api as it behaves when another run holds the testbed: refused before any folder."""

    def prepare(self, request: Any, *, warn: Any = None) -> Any:
        return SimpleNamespace(plan=SimpleNamespace(matrix=SimpleNamespace(name="m")))

    def run(self, request: Any, progress: Any, *, warn: Any, prepared: Any = None) -> SweepOutcome:
        raise LockError("testbed sim is locked by run R1 (pid 4242 on controller-a)")

    def resume(self, request: Any, progress: Any, *, warn: Any) -> SweepOutcome:
        raise AssertionError("the item has no resumable run here")


class StartingSweeps(LockedSweeps):
    """sweep.api as it starts a run: the folder made, then `progress(Started)`, then trials."""

    def __init__(self, queue: Queue, item_id: int) -> None:
        self.queue, self.item_id = queue, item_id
        self.recorded_at_start: str | None = None

    def run(self, request: Any, progress: Any, *, warn: Any, prepared: Any = None) -> SweepOutcome:
        run_dir = request.reports_dir / request.run_id
        run_dir.mkdir(parents=True)
        progress(Started(request.run_id, run_dir, ("sim",), 2, 2))
        self.recorded_at_start = self.queue.get(self.item_id).run_dir  # before any trial runs
        return SweepOutcome(run_dir, request.run_id, "completed", 2, 0, 2)


def add_item(q: Queue, tmp_path: Path) -> QueueItem:
    return q.add_item(NewItem(tmp_path / "m.yaml", tmp_path / "inv.yaml", None, 0, (), "", ""))


def test_a_locked_attempt_keeps_the_items_earlier_run(tmp_path: Path) -> None:
    reports = tmp_path / "reports-b"
    with Queue(tmp_path / "q.db") as q:
        item = add_item(q, tmp_path)
        q.set_run_dir(item.id, Path(R1_ON_CONTROLLER_A))
        result = run_queue(q, queue_sweep(reports, LockedSweeps()))
        after = q.get(item.id)
    assert result.skipped_locked == [item.id]
    assert after.state == "queued"
    assert after.run_dir == R1_ON_CONTROLLER_A, f"the item now names {after.run_dir}"
    assert not reports.exists() or not any(p.is_dir() for p in reports.iterdir())  # no run folder made


def test_a_locked_first_attempt_records_no_run(tmp_path: Path) -> None:
    with Queue(tmp_path / "q.db") as q:
        item = add_item(q, tmp_path)
        run_queue(q, queue_sweep(tmp_path / "reports", LockedSweeps()))
        after = q.get(item.id)
    assert (after.state, after.run_dir) == ("queued", None)


def test_a_started_run_is_recorded_before_its_first_trial(tmp_path: Path) -> None:
    """What recording the folder early was for: a runner killed mid-sweep leaves an item that
    names its run, so the next `queue run` resumes it."""
    reports = tmp_path / "reports"
    with Queue(tmp_path / "q.db") as q:
        item = add_item(q, tmp_path)
        sweeps = StartingSweeps(q, item.id)
        result = run_queue(q, queue_sweep(reports, sweeps))
        after = q.get(item.id)
    (run_dir,) = [p for p in reports.iterdir() if p.is_dir()]
    assert sweeps.recorded_at_start == str(run_dir) and run_dir.name.endswith(f"-q{item.id}")
    assert (after.state, after.run_dir) == ("completed", str(run_dir))
    assert [o.status for _, o in result.ran] == ["completed"]
