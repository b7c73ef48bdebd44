"""A lock write the host refuses (its disk full) leaves nothing behind and says so; a lock file
that names no holder is described as what it is, and --break-lock takes it.

Found on a real testbed with /etc/sglang full: `orch run` exited 2 and left an empty
decode.env.orch-lock (the noclobber `>` created it, then the write failed), and from then on every
run, and --break-lock, said "locked on decode ... by run unknown by unknown (pid 0 on unknown, since
unknown) (it runs on another controller; ... remove ... by hand)"."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import types
from collections.abc import Sequence
from pathlib import Path

import pytest
from fakes import FakeBed, FakeUnit, Role, make_bed

from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.edges.lock import CREATE as LOCK_CREATE
from orchestrator.edges.lock import EMPTY_LOCK, FOREIGN_LOCK, LockInfo, TestbedLock, lock_path
from orchestrator.edges.transport import Result
from orchestrator.edges.transport.local import LocalTransport
from orchestrator.errors import LockError

pytestmark = pytest.mark.timeout(60)
DEAD_PID = 4_194_305  # above the largest pid_max Linux allows (2^22): never a live process


class _FullDisk(LocalTransport):
    """A host whose disk takes no more data: every file write of a shell command fails (the
    file size limit is 0 bytes; SIGXFSZ ignored, so the write returns EFBIG as ENOSPC would)."""

    def run(self, command: str | Sequence[str], **kw: object) -> Result:
        if not isinstance(command, str) and list(command[:2]) == ["sh", "-c"]:
            command = ["sh", "-c", "trap '' XFSZ; ulimit -f 0; " + command[2], *command[3:]]
        return super().run(command, **kw)  # type: ignore[arg-type]


def _lock_on(tmp_path: Path, transport: LocalTransport, run_id: str = "run-1") -> TestbedLock:
    env = tmp_path / "decode.env"
    env.write_text("A=1\n")
    host = types.SimpleNamespace(env_file=str(env), ssh=None, label="decode (local)")
    handle = HostHandle(host, transport, None)  # type: ignore[arg-type]
    deployment = Deployment(types.SimpleNamespace(name="tb"), {"decode": handle})  # type: ignore[arg-type]
    return TestbedLock.for_run(deployment, run_id, "now")


@pytest.mark.process
def test_a_lock_the_disk_cannot_hold_is_not_left_behind_and_the_error_says_why(tmp_path: Path) -> None:
    lock = _lock_on(tmp_path, _FullDisk())
    with pytest.raises(LockError) as info:
        lock.acquire()
    message = str(info.value)
    assert message.startswith(f"decode (local): cannot write lock {tmp_path}/decode.env.orch-lock: ")
    assert "the host refused the write (" in message and "File too large" in message, message
    assert "nothing was left behind" in message and "unknown" not in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decode.env"]  # no lock, no temp file
    assert not lock.held
    lock = _lock_on(tmp_path, LocalTransport())  # space again: the testbed is free, nothing to break
    lock.acquire()
    umask = os.umask(0)
    os.umask(umask)
    # readable as a shell's `>` made it, not mktemp's 0600: another login user must see the holder
    assert (tmp_path / "decode.env.orch-lock").stat().st_mode & 0o777 == 0o666 & ~umask
    lock.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decode.env"]


@pytest.mark.process
def test_a_takeover_the_disk_cannot_hold_leaves_the_old_lock_as_it_was(tmp_path: Path) -> None:
    """--break-lock of a dead run's lock on a full disk: the dead holder's lock stays whole (it was
    replaced by an empty file, then read as "run unknown" on another controller)."""
    dead = _lock_on(tmp_path, LocalTransport(), "dead-run")
    dead.info = dataclasses.replace(dead.info, pid=DEAD_PID)
    dead.acquire()
    path = tmp_path / "decode.env.orch-lock"
    before = path.read_bytes()
    lock = _lock_on(tmp_path, _FullDisk())
    with pytest.raises(LockError, match="the host refused the write"):
        lock.acquire(break_stale=True)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decode.env", "decode.env.orch-lock"]


def _bed_with_lock(text: bytes) -> tuple[FakeBed, str]:
    bed = make_bed({"decode": Role("X=0\n", [FakeUnit("decode-server", active=True)])})
    path = lock_path(bed.deployment.hosts["decode"], "fakebed")
    bed.transports["decode"].files[path] = text
    return bed, path


@pytest.mark.parametrize(
    ("text", "why"),
    [(b"", EMPTY_LOCK), (b"\n", EMPTY_LOCK), (b"{not json", FOREIGN_LOCK), (b'{"run_id": 1}\n', FOREIGN_LOCK)],
    ids=["empty", "newline", "not-json", "not-orchs"],
)
def test_a_lock_file_naming_no_holder_is_said_so_and_break_lock_takes_it(text: bytes, why: str) -> None:
    bed, path = _bed_with_lock(text)
    lock = TestbedLock.for_run(bed.deployment, "run-2", "now")
    expected = f"testbed 'fakebed' cannot be locked on {bed.deployment.hosts['decode'].host.label}: {path} is {why}"
    for step in (lock.check, lock.acquire):
        with pytest.raises(LockError) as info:
            step()
        assert str(info.value).startswith(expected), info.value
        assert "--break-lock" in str(info.value) and "unknown" not in str(info.value)
    assert bed.transports["decode"].files[path] == text  # refused: left as it was
    lock.check(break_stale=True)
    lock.acquire(break_stale=True)
    assert json.loads(bed.transports["decode"].files[path])["run_id"] == "run-2"
    lock.release()
    assert path not in bed.transports["decode"].files


def test_break_lock_still_refuses_a_live_runs_lock() -> None:
    live = {"run_id": "busy", "user": "ann", "pid": os.getppid(), "controller": socket.gethostname(), "started": "t"}
    bed, path = _bed_with_lock((json.dumps(live) + "\n").encode())
    lock = TestbedLock.for_run(bed.deployment, "run-2", "now")
    for step in (lock.check, lock.acquire):
        with pytest.raises(LockError, match="locked on .* by run busy by ann"):
            step(break_stale=True)
    assert json.loads(bed.transports["decode"].files[path]) == live


def test_a_lock_orch_wrote_is_still_read_as_its_holder() -> None:
    holder = LockInfo("night-1", "ann", 4242, "far-away", "2026-11-30T01:00:00", "fakebed")
    bed, path = _bed_with_lock((json.dumps(dataclasses.asdict(holder)) + "\n").encode())
    with pytest.raises(LockError, match="by run night-1 by ann .*another controller"):
        TestbedLock.for_run(bed.deployment, "run-2", "now").check(break_stale=True)


def test_an_interrupt_that_lands_once_a_hosts_lock_is_written_leaves_no_lock() -> None:
    """Ctrl-C or SIGTERM while a host's lock command runs: the lock may be on the host already when
    the interrupt is raised. acquire() released only the hosts it had noted as locked, after
    their command returned, so that one stayed behind (seen: a SIGTERM to `orch run -t all` on
    1,000 testbeds, while it locked them, left tb21's lock naming a dead run). Every host the
    lock was asked of is released now (only a lock this one wrote is removed)."""
    bed = make_bed({"prefill": Role("P=1\n"), "decode": Role("D=1\n")})
    decode = bed.transports["decode"]

    def written_then_interrupted(text: str, argv: Sequence[str] | None) -> object:
        decode._create_exclusive(text, argv)  # the lock is on the host ...
        raise KeyboardInterrupt  # ... when the interrupt reaches the controller

    decode.script(("sh", "-c", LOCK_CREATE), written_then_interrupted)
    lock = TestbedLock.for_run(bed.deployment, "run-1", "now")
    with pytest.raises(KeyboardInterrupt):
        lock.acquire()
    path = lock_path(bed.deployment.hosts["decode"], "fakebed")
    assert path not in decode.files, "the interrupted host's lock was left behind"
    assert lock_path(bed.deployment.hosts["prefill"], "fakebed") not in bed.transports["prefill"].files


def test_a_lock_held_by_another_run_is_left_to_it_when_the_acquire_fails() -> None:
    """The release after a refused acquire reads each lock and removes only its own."""
    bed = make_bed({"prefill": Role("P=1\n"), "decode": Role("D=1\n")})
    other = LockInfo("run-0", "bob", os.getppid(), socket.gethostname(), "t", "fakebed", "")  # alive
    path = lock_path(bed.deployment.hosts["decode"], "fakebed")
    bed.transports["decode"].files[path] = (json.dumps(dataclasses.asdict(other)) + "\n").encode()
    with pytest.raises(LockError, match="run-0"):
        TestbedLock.for_run(bed.deployment, "run-1", "now").acquire()
    assert json.loads(bed.transports["decode"].files[path])["run_id"] == "run-0"
    assert lock_path(bed.deployment.hosts["prefill"], "fakebed") not in bed.transports["prefill"].files
