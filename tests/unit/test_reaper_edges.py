"""edges.reaper's Reaped, orch's side of a repro's reaper, without a process (mutation round
eleven): how long close() lets the reaper finish, what find() asks /proc, and the waits' poll in
milliseconds. The test plays the reaper on a socket pair, as tests/unit/test_reaper.py does."""

from __future__ import annotations

import os
import select
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.edges import reaper, reaper_process
from orchestrator.edges.reaper import Reaped
from orchestrator.errors import WorkloadError

REAPER_PID = 4000


class RecordingReaper:
    """The reaper's Popen as Reaped uses it, keeping each wait's timeout."""

    def __init__(self) -> None:
        self.pid, self.killed = REAPER_PID, 0
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> int:
        self.timeouts.append(timeout)
        return 0

    def kill(self) -> None:
        self.killed += 1


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


def test_close_gives_the_reaper_its_last_round_and_more_before_killing_it(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """Once orch's end closed, the reaper SIGKILLs what is left for up to FINISH_S, then exits: a
    shorter wait would kill it mid-round (its own leftovers then orphaned to init, unreaped)."""
    ours, _ = pair
    fake = RecordingReaper()
    Reaped(fake, ours, 4001, True, 0.0).close()  # type: ignore[arg-type]
    assert fake.timeouts == [reaper.EXIT_TIMEOUT_S] and fake.killed == 0
    assert reaper.EXIT_TIMEOUT_S > reaper_process.FINISH_S


def test_find_names_the_live_processes_under_this_repros_reaper(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, _ = pair
    asked: list[int] = []

    def descendants(pid: int) -> list[int]:
        asked.append(pid)
        return [4001, 4002]

    monkeypatch.setattr(reaper_process, "descendants", descendants)
    repro = Reaped(RecordingReaper(), ours, 4001, True, 0.0)  # type: ignore[arg-type]
    assert repro.find() == [4001, 4002] and asked == [REAPER_PID]


class RecordingPoll:
    """select.poll() that says what it was asked to wait, in milliseconds, and that nothing came."""

    waited: list[float | None] = []

    def register(self, fd: object, mask: int) -> None:
        pass

    def poll(self, timeout_ms: float | None = None) -> list[tuple[int, int]]:
        self.waited.append(timeout_ms)
        return []


@pytest.mark.parametrize(("timeout_s", "polled_ms"), [(0.25, 250.0), (3, 3000.0), (-1.0, 0.0), (None, None)])
def test_the_wait_polls_its_timeout_in_milliseconds_and_none_for_ever(
    pair: tuple[socket.socket, socket.socket],
    monkeypatch: pytest.MonkeyPatch,
    timeout_s: float | None,
    polled_ms: float | None,
) -> None:
    ours, _ = pair
    RecordingPoll.waited = []
    monkeypatch.setattr(select, "poll", RecordingPoll)
    repro = Reaped(RecordingReaper(), ours, 4001, True, 0.0)  # type: ignore[arg-type]
    assert repro._ready(timeout_s) is False
    assert RecordingPoll.waited == [polled_ms]


def test_a_wait_without_a_timeout_returns_the_exit_already_sent(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    theirs.sendall(b"EXIT %d\n" % (7 << 8))
    repro = Reaped(RecordingReaper(), ours, 4001, True, 0.0)  # type: ignore[arg-type]
    assert repro.wait() == 7 and repro.returncode == 7


def test_a_wait_that_times_out_says_so_as_popen_does(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, _ = pair
    repro = Reaped(RecordingReaper(), ours, 4001, True, 0.0)  # type: ignore[arg-type]
    with pytest.raises(subprocess.TimeoutExpired):
        repro.wait(timeout=0.01)
    assert repro.returncode is None


def test_a_reaper_that_cannot_be_started_is_that_error_and_leaves_no_socket_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`repro.command` in a folder that is gone: the spawn's WorkloadError is what the trial says
    (not an error of the cleanup), and both ends of the socket pair are closed (a sweep of
    thousands of trials must not run out of descriptors)."""

    def spawn(fd: int, *a: object) -> RecordingReaper:
        raise WorkloadError("repro: cannot start 'true' in /gone: No such file or directory")

    monkeypatch.setattr(reaper, "_spawn_reaper", spawn)
    before = len(os.listdir("/proc/self/fd"))
    with open(tmp_path / "o", "wb") as out, pytest.raises(WorkloadError, match="cannot start 'true' in /gone") as no:
        reaper.start("true", tmp_path, {}, out, out)
    assert len(os.listdir("/proc/self/fd")) == before and no.value.__traceback__ is not None  # closed, not collected


def test_a_first_line_like_start_but_not_start_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only START names the shell: any other five-word line is no pid to time, watch or stop; the
    reaper is let go (killed only if it does not exit by itself) and orch's end of the socket closed."""
    fake, ends = RecordingReaper(), []

    def spawn(fd: int, *a: object) -> RecordingReaper:
        theirs = socket.socket(fileno=os.dup(fd))
        theirs.sendall(b"ERROR 4001 1 5000000000 777\n")
        ends.append(theirs)
        return fake

    monkeypatch.setattr(reaper, "_spawn_reaper", spawn)
    before = len(os.listdir("/proc/self/fd"))
    with (
        open(tmp_path / "o", "wb") as out,
        pytest.raises(WorkloadError, match=r"did not start it \(b'ERROR 4001") as refused,
    ):
        reaper.start("true", tmp_path, {}, out, out)
    assert (fake.timeouts, fake.killed) == ([reaper.EXIT_TIMEOUT_S], 0)  # let go: it exited by itself
    for end in ends:
        end.close()
    # orch's end is closed at once, not when the error (kept by a trial's failure, its traceback
    # holding start's frame) is collected
    assert len(os.listdir("/proc/self/fd")) == before and refused.value.__cause__ is not None
