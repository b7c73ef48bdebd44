"""The testbed lock never hangs and never reads without bound: every lock command has a timeout,
and a lock path that exists but is not a regular file (a FIFO: `cat` waits for a writer, the
noclobber create for a reader; a link to /dev/zero: no end) is refused at once, naming the host
and the path. Found in review: TestbedLock.check() on a FIFO was still blocked after 8 s."""

from __future__ import annotations

import dataclasses
import os
import threading
import types
from collections.abc import Sequence
from pathlib import Path

import pytest
from fakes import FakeTransport, FakeUnit, Role, make_bed

from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.edges.lock import TestbedLock
from orchestrator.edges.transport import Result
from orchestrator.edges.transport.local import LocalTransport
from orchestrator.errors import LockError

pytestmark = pytest.mark.timeout(60)


class _Timed(FakeTransport):
    """A fake transport that also notes each command's timeout."""

    timeouts: list[float | None]

    def run(self, command: str | Sequence[str], *, timeout: float | None = None, **kw: bool) -> Result:
        self.timeouts.append(timeout)
        return super().run(command, timeout=timeout, **kw)


def test_every_lock_command_has_a_timeout() -> None:
    bed = make_bed({"decode": Role("X=0\n", [FakeUnit("decode-server", active=True)])})
    transport = bed.transports["decode"]
    transport.__class__ = _Timed
    transport.timeouts = []  # type: ignore[attr-defined]
    first = TestbedLock.for_run(bed.deployment, "run-1", "now")
    first.check()
    first.acquire()
    with pytest.raises(LockError, match="locked"):
        TestbedLock.for_run(bed.deployment, "run-2", "now").acquire()
    first.release()
    timeouts = transport.timeouts  # type: ignore[attr-defined]
    assert len(timeouts) >= 5 and None not in timeouts, timeouts


def _local_lock(tmp_path: Path) -> tuple[TestbedLock, Path]:
    env = tmp_path / "decode.env"
    env.write_text("A=1\n")
    host = types.SimpleNamespace(env_file=str(env), ssh=None, label="decode (local)")
    handle = HostHandle(host, LocalTransport(), None)  # type: ignore[arg-type]
    deployment = Deployment(types.SimpleNamespace(name="tb"), {"decode": handle})  # type: ignore[arg-type]
    return TestbedLock.for_run(deployment, "run-1", "now"), tmp_path / "decode.env.orch-lock"


def _within(seconds: float, call: object) -> BaseException | None:
    """Run call() in a thread; the exception it raised, failing the test if it is still blocked."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            call()  # type: ignore[operator]
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"the lock was still blocked after {seconds:g} s"
    return errors[0] if errors else None


@pytest.mark.process
@pytest.mark.parametrize("step", ["check", "acquire"])
def test_a_fifo_at_the_lock_path_is_refused_at_once(tmp_path: Path, step: str) -> None:
    lock, path = _local_lock(tmp_path)
    os.mkfifo(path)
    try:
        error = _within(8, getattr(lock, step))
    finally:  # a blocked reader or writer (without the fix) is released by the other side
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        os.close(fd)
    assert isinstance(error, LockError), error
    assert f"decode (local): lock path {path} exists but is not a regular file" in str(error)
    assert not lock.held and path.is_fifo()  # nothing taken, nothing replaced


@pytest.mark.process
def test_a_link_to_an_endless_device_at_the_lock_path_is_refused(tmp_path: Path) -> None:
    lock, path = _local_lock(tmp_path)
    path.symlink_to("/dev/zero")
    error = _within(8, lock.check)
    assert isinstance(error, LockError) and "not a regular file" in str(error), error
    error = _within(8, lock.acquire)
    assert isinstance(error, LockError) and "not a regular file" in str(error), error
    assert path.is_symlink() and os.readlink(path) == "/dev/zero"


@pytest.mark.process
def test_a_regular_lock_file_still_works_locally(tmp_path: Path) -> None:
    lock, path = _local_lock(tmp_path)
    lock.check()
    lock.acquire()
    assert path.is_file() and '"run_id": "run-1"' in path.read_text()
    with pytest.raises(LockError, match="locked on decode"):
        TestbedLock(lock.deployment, dataclasses.replace(lock.info, run_id="run-2")).acquire()
    lock.release()
    assert not path.exists()


def test_a_lock_file_nested_too_deep_for_json_is_a_foreign_lock_not_a_traceback() -> None:
    """60 KB (under the 64 KiB read cap) of nested lists: json.loads raises RecursionError, which
    is no ValueError, so `orch run` on a testbed with such a lock file ended in a traceback."""
    from orchestrator.edges.lock import FOREIGN_LOCK, _holder

    holder = _holder("[" * 30_000 + "]" * 30_000)
    assert holder.pid == 0 and holder.why == FOREIGN_LOCK
