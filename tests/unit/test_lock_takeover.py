"""A run resumed from a shared queue whose claim proves the earlier controller gone (PostgreSQL:
the item's advisory lock died with it) takes over that run's own testbed locks, also when the
earlier controller ran on another machine; never another run's lock, and never without that proof."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fakes import FakeUnit, Role, make_bed

from orchestrator.edges.lock import LockInfo, TestbedLock
from orchestrator.errors import LockError
from orchestrator.team.overnight import QueueSweep
from orchestrator.team.queuestore import QueueItem


def _bed():  # type: ignore[no-untyped-def]
    return make_bed({"decode": Role("X=0\n", [FakeUnit("decode-server", active=True)])})


def _left_by_another_machine(bed, run_id: str) -> None:  # type: ignore[no-untyped-def]
    """The lock a controller on host `far-away` left when it died mid-run."""
    dead = TestbedLock(bed.deployment, LockInfo(run_id, "ann", 4242, "far-away", "2026-11-30T01:00:00"))
    dead.acquire()


def test_without_proof_a_lock_from_another_machine_is_refused() -> None:
    bed = _bed()
    _left_by_another_machine(bed, "night-1")
    with pytest.raises(LockError, match="far-away"):
        TestbedLock.for_run(bed.deployment, "night-1", "2026-11-30T02:00:00").acquire()


def test_with_proof_the_runs_own_lock_is_taken_over_and_released() -> None:
    bed = _bed()
    _left_by_another_machine(bed, "night-1")
    lock = TestbedLock.for_run(bed.deployment, "night-1", "2026-11-30T02:00:00", owner_gone=True)
    lock.check()
    lock.acquire()
    assert len(lock.held) == 1
    lock.release()
    assert not any(p.endswith(".orch-lock") for t in bed.transports.values() for p in t.files)


def test_proof_never_takes_another_runs_lock() -> None:
    bed = _bed()
    _left_by_another_machine(bed, "someone-elses-run")
    lock = TestbedLock.for_run(bed.deployment, "night-1", "2026-11-30T02:00:00", owner_gone=True)
    with pytest.raises(LockError, match="someone-elses-run"):
        lock.check()
    with pytest.raises(LockError, match="someone-elses-run"):
        lock.acquire()


class _Recorder:
    def __init__(self) -> None:
        self.resumed: list[object] = []

    def resume(self, request, progress, *, warn):  # type: ignore[no-untyped-def]
        self.resumed.append(request)
        raise LockError("stop here")


@pytest.mark.parametrize("owner_gone", [False, True])
def test_the_queue_passes_its_stores_proof_to_the_resume(tmp_path: Path, owner_gone: bool) -> None:
    run_dir = tmp_path / "night-1"
    run_dir.mkdir()
    (run_dir / "run.json").write_text("{}")
    item = QueueItem(
        id=1, matrix="/m.yaml", inventory="/i.yaml", testbed=None, priority=0, webhooks=(), state="resumable",
        added="", updated="", run_dir=str(run_dir), claimed_by=None, message="",
    )  # fmt: skip
    sweeps = _Recorder()
    sweep = QueueSweep(
        tmp_path, terminal=lambda s: None, show=lambda o: None, note=lambda m: None,  # type: ignore[arg-type, return-value]
        error=lambda i, m: None, warn=lambda m: None, sweeps=sweeps, owner_gone=owner_gone,  # type: ignore[arg-type]
    )  # fmt: skip
    outcome = sweep(item, None, lambda p: None)
    assert outcome.status == "locked"
    assert [dataclasses.asdict(r)["owner_gone"] for r in sweeps.resumed] == [owner_gone]  # type: ignore[call-overload]


def test_stores_state_whether_claims_prove_the_owner_gone() -> None:
    from orchestrator.team.queue import Queue
    from orchestrator.team.queuestore_pg import PgQueue

    assert PgQueue.claims_prove_owner_gone is True and Queue.claims_prove_owner_gone is False
