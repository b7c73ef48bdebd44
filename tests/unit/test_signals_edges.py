"""sweep.signals' leave_lost_terminal for real, on this process's own stdout and stderr: a SIGHUP's
restore must not die writing to the terminal that hung up (EIO), and output sent to a file goes on
there. A pty whose master is closed is that terminal (no process is started); fds 1 and 2 are put
back after each test."""

from __future__ import annotations

import os
import pty
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.errors import Interrupted
from orchestrator.sweep import signals


@pytest.fixture
def own_fds() -> Iterator[None]:
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    try:
        yield
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


def _same_file(fd: int, path: str | Path) -> bool:
    mine, there = os.fstat(fd), os.stat(path)
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


@pytest.mark.parametrize("terminal_fd", [1, 2])
def test_a_hung_up_terminal_is_left_and_a_file_kept(own_fds: None, tmp_path: Path, terminal_fd: int) -> None:
    """stdout (or stderr) on the terminal that hung up goes to /dev/null; the other, sent to a log
    file (`orch run ... 2> log`), still writes there."""
    other_fd = 3 - terminal_fd
    master, slave = pty.openpty()
    log = tmp_path / "log"
    with open(log, "wb") as f:
        os.dup2(slave, terminal_fd)
        os.dup2(f.fileno(), other_fd)
    os.close(slave)
    os.close(master)  # the hang-up: a write to the terminal now fails with EIO
    with pytest.raises(OSError):
        os.write(terminal_fd, b"x")

    signals.leave_lost_terminal()

    assert _same_file(terminal_fd, os.devnull)
    assert os.write(terminal_fd, b"the restore goes on\n") == 20
    assert _same_file(other_fd, log)
    os.write(other_fd, b"kept\n")
    assert log.read_bytes() == b"kept\n"


def test_both_on_the_lost_terminal_both_leave_it(own_fds: None) -> None:
    master, slave = pty.openpty()
    for fd in (1, 2):
        os.dup2(slave, fd)
    os.close(slave)
    os.close(master)
    signals.leave_lost_terminal()
    assert _same_file(1, os.devnull) and _same_file(2, os.devnull)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_blocked_by_the_parent_reaches_orch(sig: signal.Signals) -> None:
    """A signal mask is inherited across exec: orch started from a thread that had blocked SIGTERM
    (measured with the demo: `kill -TERM` and the sweep ran on, its handler never ran). Inside the
    block the signal is unblocked, and the parent's mask comes back after it."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
    raised = KeyboardInterrupt if sig == signal.SIGINT else Interrupted
    try:
        with pytest.raises(raised):
            with signals.signals_as_interrupt():
                assert sig not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
                os.kill(os.getpid(), sig)
                time.sleep(5)  # delivered at once, so never slept through
        assert sig in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.sigtimedwait({sig}, 0)  # one left pending must not reach this process's own handler
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def test_sigchld_ignored_by_the_parent_is_the_default_inside_and_back_after() -> None:
    """SIG_IGN survives exec: started with SIGCHLD ignored, the kernel reaps orch's children before
    Python's wait, and subprocess reads every exit code as 0 (measured: `sh -c 'exit 3'` -> 0; the
    demo was refused at its own testbed lock, "an empty lock file, left by a write that failed")."""
    before = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        with signals.signals_as_interrupt():
            assert signal.getsignal(signal.SIGCHLD) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGCHLD) is signal.SIG_IGN
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        with signals.signals_as_interrupt():  # a default one is left alone
            assert signal.getsignal(signal.SIGCHLD) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGCHLD) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGCHLD, before)
