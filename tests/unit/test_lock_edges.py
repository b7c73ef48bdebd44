"""edges.lock's answers on the fakes where only process-tier tests looked (bench/mutants.py round
nine): a create the host refuses to write, a create that fails with nothing there, the liveness
probe of a holder, and the lock read's byte bound."""

from __future__ import annotations

import io
import json
import os
import socket

import pytest
from fakes import FakeBed, FakeUnit, Reply, Role, make_bed

from orchestrator.edges import lock as lockmod
from orchestrator.edges.lock import CREATE, FOREIGN_LOCK, NOT_WRITTEN, TAKE_OVER, LockInfo, TestbedLock, lock_path
from orchestrator.errors import LockError


def _bed() -> tuple[FakeBed, str]:
    bed = make_bed({"decode": Role("X=0\n", [FakeUnit("decode-server", active=True)])})
    return bed, lock_path(bed.deployment.hosts["decode"], "fakebed")


@pytest.mark.parametrize(
    ("stderr", "why"),
    [
        ("mktemp: ok\nprintf: write error: No space left on device\n", "printf: write error: No space left on device"),
        ("", "no reason given"),
    ],
)
def test_a_create_the_host_refused_to_write_says_so_not_that_it_cannot_create(stderr: str, why: str) -> None:
    bed, path = _bed()
    bed.transports["decode"].script(("sh", "-c", CREATE), Reply(NOT_WRITTEN, stderr=stderr))
    with pytest.raises(LockError) as info:
        TestbedLock.for_run(bed.deployment, "run-1", "now").acquire()
    assert str(info.value).startswith(
        f"{bed.deployment.hosts['decode'].host.label}: cannot write lock {path}: the host refused the write "
        f"({why}); nothing was left behind"
    )
    assert path not in bed.transports["decode"].files


def test_a_create_that_failed_with_no_lock_there_names_the_hosts_error() -> None:
    bed, path = _bed()
    denied = Reply(1, stderr=f"sh: 1: cannot create {path}.new-XXXXXX: Permission denied\n")
    bed.transports["decode"].script(("sh", "-c", CREATE), denied)
    with pytest.raises(LockError, match=r"cannot create lock .*: sh: 1: cannot create .*: Permission denied$"):
        TestbedLock.for_run(bed.deployment, "run-1", "now").acquire()


def test_a_holders_liveness_is_probed_with_signal_0(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        sent.append((pid, sig))
        raise ProcessLookupError

    monkeypatch.setattr(lockmod.os, "kill", kill)
    assert LockInfo("night-1", "ann", 4242, socket.gethostname(), "t").is_stale() is True
    assert sent == [(4242, 0)]


def _holder_of_bytes(size: int) -> bytes:
    """A holder orch could have written, padded (a long run_dir) to exactly `size` bytes."""
    base = LockInfo("night-1", "ann", 4242, "far-away", "t", "fakebed", "")
    empty = len((json.dumps(base.__dict__) + "\n").encode())
    return (json.dumps({**base.__dict__, "run_dir": "r" * (size - empty)}) + "\n").encode()


@pytest.mark.parametrize(("size", "read_whole"), [(64 * 1024 + 1, True), (64 * 1024 + 2, False)])
def test_the_lock_is_read_up_to_64_kib(size: int, read_whole: bool) -> None:
    """Its first 64 KiB: a holder of 64 KiB and its newline is read; one byte more, and the
    closing brace is cut off (not orch's JSON)."""
    bed, path = _bed()
    bed.transports["decode"].files[path] = _holder_of_bytes(size)
    with pytest.raises(LockError) as info:
        TestbedLock.for_run(bed.deployment, "run-2", "now").check()
    shown = "by run night-1 by ann" if read_whole else FOREIGN_LOCK
    assert shown in str(info.value), info.value


def test_a_takeover_lost_twice_to_another_controller_is_refused_not_taken_as_held() -> None:
    """A resume finds its dead controller's lock; each time it swaps it, another controller got
    there first (TAKE_OVER exit 5: a new lock appeared between the rename and the create)."""
    bed, path = _bed()
    dead = LockInfo("run-1", "ann", 4_194_305, socket.gethostname(), "t", "fakebed")  # above any pid_max
    bed.transports["decode"].files[path] = (json.dumps(dead.__dict__) + "\n").encode()
    bed.transports["decode"].script(("sh", "-c", TAKE_OVER), Reply(5))
    lock = TestbedLock.for_run(bed.deployment, "run-1", "now")
    with pytest.raises(LockError, match=rf"decode.*: lost the race for {path} to another controller; try again"):
        lock.acquire()
    assert json.loads(bed.transports["decode"].files[path]) == dead.__dict__


def test_this_runs_lock_held_by_a_live_process_says_the_run_is_still_running() -> None:
    """`orch resume` of a run whose controller still runs: stop that one first (not "wait for it to
    finish", which is the advice for another run)."""
    bed, path = _bed()
    live = LockInfo("run-1", "ann", os.getppid(), socket.gethostname(), "t", "fakebed")
    bed.transports["decode"].files[path] = (json.dumps(live.__dict__) + "\n").encode()
    with pytest.raises(LockError) as info:
        TestbedLock.for_run(bed.deployment, "run-1", "now").check()
    assert str(info.value).endswith(
        f"by run run-1 by ann (pid {os.getppid()} on {socket.gethostname()}, since t) "
        f"(that run is still running: stop it first; `kill -TERM {os.getppid()}` restores its hosts)"
    )


def test_only_a_process_whose_stat_says_zombie_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A holder that answers kill(0) is stale only as a zombie; a stat that cannot be read proves
    nothing, so its lock is not called stale."""
    assert lockmod._is_zombie(0) is False  # no /proc/0
    assert lockmod._is_zombie(os.getpid()) is False
    stat = b"42 (a) b) Z 1 42 42 0 -1\n"
    monkeypatch.setattr(lockmod, "open", lambda path, mode="r": io.BytesIO(stat), raising=False)
    assert lockmod._is_zombie(42) is True
