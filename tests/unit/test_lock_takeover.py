"""A run resumed from a shared queue whose claim proves the earlier controller gone (PostgreSQL:
the item's advisory lock died with it) takes over that run's own testbed locks, also when the
earlier controller ran on another machine; never another run's lock, and never without that proof."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from fakes import FakeUnit, Role, make_bed

from orchestrator.edges.lock import TAKE_OVER, LockInfo, TestbedLock, lock_path
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


def test_a_live_owners_lock_names_how_to_stop_it_not_break_lock() -> None:
    """A lock held by a live run on this controller: --break-lock refuses it (only a dead owner's
    is taken) and `orch queue run`, which said it, has no such flag."""
    bed = _bed()
    other = _live_pid()
    TestbedLock(bed.deployment, LockInfo("night-1", "ann", other, socket.gethostname(), "2026-11-30")).acquire()
    with pytest.raises(LockError) as refused:
        TestbedLock.for_run(bed.deployment, "night-2", "2026-11-30T02:00:00").acquire()
    assert "--break-lock" not in str(refused.value) and f"kill -TERM {other}" in str(refused.value)


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


# ---------------------------------------------------------------- takeover races (compare-and-swap)
DEAD_PID = 4_194_305  # above the largest pid_max Linux allows (2^22): never a live process


def _live_pid() -> int:
    """A live process that is neither this one nor pid 1: the parent, or, when the parent is gone
    and this process was handed to pid 1 (a test run started in the background by a shell that
    ended), another live process; two "controllers" sharing pid 1 would be one."""
    if os.getppid() != 1:
        return os.getppid()
    pids = (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
    return next(pid for pid in pids if pid not in (1, os.getpid()))


def _holder(bed, run_id: str, pid: int) -> TestbedLock:  # type: ignore[no-untyped-def]
    info = LockInfo(run_id, "ann", pid, socket.gethostname(), "2026-12-02T01:00:00", bed.deployment.testbed.name)
    return TestbedLock(bed.deployment, info)


def _race(bed, first: TestbedLock, second: TestbedLock, **kw: bool) -> None:  # type: ignore[no-untyped-def]
    """`first` reads the dead holder; before its next command, `second` runs its whole acquire
    (a second controller started a few milliseconds later)."""
    t = bed.transports["decode"]
    cat, fired = t._cat, []

    def cat_then_second(text: str, argv: object) -> object:
        reply = cat(text, argv)
        if not fired:
            fired.append(1)
            second.acquire(**kw)
        return reply

    t.script(("cat",), cat_then_second)
    first.acquire(**kw)


@pytest.mark.parametrize("break_stale", [False, True], ids=["resume-own-run", "break-lock"])
def test_two_controllers_taking_over_one_dead_lock_cannot_both_win(break_stale: bool) -> None:
    bed = _bed()
    _holder(bed, "dead-run" if break_stale else "night-1", DEAD_PID).acquire()  # left by a kill -9
    # two live controllers (pid 1 and our parent: alive, not us) at once
    first = _holder(bed, "run-x" if break_stale else "night-1", 1)
    other = _live_pid()
    second = _holder(bed, "run-y" if break_stale else "night-1", other)
    with pytest.raises(LockError, match="locked on decode"):
        _race(bed, first, second, break_stale=break_stale)
    assert second.held and not first.held
    text = bed.transports["decode"].files[lock_path(bed.deployment.hosts["decode"], "fakebed")].decode()
    assert json.loads(text)["pid"] == other  # the winner's lock stands


def test_two_testbeds_of_one_run_naming_the_same_env_file_cannot_both_lock_it() -> None:
    bed = _bed()
    other = make_bed({"decode": Role("X=0\n", [FakeUnit("decode-server", active=True)])}, name="tb2")
    other.deployment.hosts["decode"].transport = bed.transports["decode"]  # a copied testbed, same host
    TestbedLock.for_run(bed.deployment, "par-run", "t").acquire()
    with pytest.raises(LockError, match="name the same env file"):
        TestbedLock.for_run(other.deployment, "par-run", "t").acquire()


def test_a_lock_written_before_locks_named_their_testbed_is_still_a_runs_own() -> None:
    bed = _bed()
    path = lock_path(bed.deployment.hosts["decode"], "fakebed")
    old = {"run_id": "night-1", "user": "ann", "pid": DEAD_PID, "controller": socket.gethostname(), "started": "t"}
    bed.transports["decode"].files[path] = (json.dumps(old) + "\n").encode()
    lock = TestbedLock.for_run(bed.deployment, "night-1", "2026-12-02T02:00:00")
    lock.acquire()
    assert json.loads(bed.transports["decode"].files[path])["pid"] == os.getpid()


@pytest.mark.process
def test_the_takeover_script_swaps_only_the_holder_it_read(tmp_path: Path) -> None:
    """TAKE_OVER run by a real sh: replaced when it still holds what was read; a lock that is gone
    or names someone else now is left as it is."""
    lock = tmp_path / "decode.env.orch-lock"

    def take_over(expected: str) -> int:
        argv = ["sh", "-c", TAKE_OVER, "orch-lock", expected, str(lock), '{"pid": 2}']
        return subprocess.run(argv, capture_output=True, check=False).returncode

    lock.write_text('{"pid": 1}\n')
    assert take_over('{"pid": 1}') == 0 and lock.read_text() == '{"pid": 2}\n'
    assert take_over('{"pid": 1}') == 4 and lock.read_text() == '{"pid": 2}\n'  # someone else's now
    lock.unlink()
    assert take_over('{"pid": 1}') == 3 and not lock.exists()  # taken and released meanwhile
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing left aside
