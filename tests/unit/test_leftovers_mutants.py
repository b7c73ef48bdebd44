"""edges.leftovers without a repro process (the unit tier starts none): which /proc entries a mark
is looked for in. Mutation survivors of edges/leftovers.py (bench/README.md, round ten): its own
tests that start repros are process tier, so the unit tier never called Marked.find or
_candidates, nor marked_env with an env of its own, nor named a command line holding a DEL; and stop() and
settle() ran only on real leftovers. Here stop() is given this test's own process, which no signal
ends: every signal is recorded, none sent (signal.pidfd_send_signal and os.kill replaced)."""

from __future__ import annotations

import errno
import os
import signal
import time

import pytest

from orchestrator.edges import leftovers
from orchestrator.edges.leftovers import KILL_ROUNDS, MARK_VAR, Marked, marked_env, new_mark, settle, shown, stop


def test_a_mark_looked_for_since_the_repro_started_reads_only_newer_pids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Marked(since_start=True) reads only the pids handed out since its leader started: pid 1 is
    not among them, the leader is. The window is the module doc's cost promise (one listing and a
    few reads for a repro that left nothing). The last pid handed out is pinned to the leader's
    (no process started since): on a busy machine the real counter wraps (pid_max 32768 here, a
    million forks since boot) and a wrapped window rightly takes in the low pids, pid 1 too.
    /proc/stat's fork count and pid_max are the real ones."""
    me = os.getpid()
    monkeypatch.setattr(leftovers, "_last_pid_and_threads", lambda: (me, 100))
    marked = Marked(new_mark(), me)
    candidates = marked._candidates()
    assert candidates == [me], candidates[:20]
    assert marked.find() == []  # no process carries a fresh mark (this one's environ has none)


def test_a_mark_looked_for_without_a_start_reads_every_pid() -> None:
    """since_start=False (a controller killed -9: the repro may have started long ago): every pid is
    a candidate, and nothing carrying a fresh mark is found."""
    marked = Marked(new_mark(), os.getpid(), since_start=False)
    candidates = marked._candidates()
    assert {1, os.getpid()} <= set(candidates)
    assert marked.find() == []


def test_the_repros_env_is_the_one_given_with_its_mark_else_orchs_own() -> None:
    assert marked_env({"A": "1"}, "m1") == {"A": "1", MARK_VAR: "m1"}  # not orch's own environment
    own = marked_env(None, "m2")
    assert own == {**os.environ, MARK_VAR: "m2"}


def test_a_del_character_in_a_command_line_is_written_out() -> None:
    """DEL (0x7f) is a control character like those below 32: shown as \\x7f, never raw."""
    assert shown(5, b"a\x7fb\0c\0") == r"pid 5 (a\x7fb c)"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Every signal stop() sends: ("pidfd", fd, sig) or ("kill", pid, sig); none reaches a process."""
    said: list[tuple[str, int, int]] = []
    monkeypatch.setattr(signal, "pidfd_send_signal", lambda fd, sig, *a: said.append(("pidfd", fd, int(sig))))
    monkeypatch.setattr(os, "kill", lambda pid, sig: said.append(("kill", pid, int(sig))))
    return said


def test_a_process_that_outlives_every_signal_is_returned_and_its_pidfd_closed(
    sent: list[tuple[str, int, int]],
) -> None:
    """SIGTERM, then SIGKILL in each of the KILL_ROUNDS, through the pidfd; the process is returned
    as a survivor (not ours to kill) and no pidfd is left open."""
    me, fds = os.getpid(), _open_fds()
    left = stop([me], rescan=lambda: [me], ours=lambda pid: pid == me, grace_s=0.02)
    assert left == [me]
    assert [(way, sig) for way, _, sig in sent] == [("pidfd", signal.SIGTERM)] + [
        ("pidfd", signal.SIGKILL)
    ] * KILL_ROUNDS
    assert len({fd for _, fd, _ in sent}) == 1  # one pidfd, opened once (known pids are not opened again)
    assert _open_fds() == fds


def test_a_pid_no_longer_ours_when_its_pidfd_is_opened_is_left_alone(sent: list[tuple[str, int, int]]) -> None:
    fds = _open_fds()
    assert stop([os.getpid()], rescan=list, ours=lambda pid: False, grace_s=0.02) == []
    assert sent == [] and _open_fds() == fds


def test_without_pidfds_a_process_is_signalled_by_pid_after_checking_it_is_ours(
    monkeypatch: pytest.MonkeyPatch, sent: list[tuple[str, int, int]]
) -> None:
    """An old kernel (pidfd_open: ENOSYS): os.kill, each time after `ours`; alive is `ours`."""

    def no_pidfd(pid: int) -> int:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    me = os.getpid()
    asked: list[int] = []

    def ours(pid: int) -> bool:
        asked.append(pid)
        return pid == me

    assert stop([me], rescan=lambda: [me], ours=ours, grace_s=0.02) == [me]
    assert sent == [("kill", me, signal.SIGTERM)] + [("kill", me, signal.SIGKILL)] * KILL_ROUNDS
    assert set(asked) == {me}
    sent.clear()
    gone = stop([me], rescan=list, ours=lambda pid: False, grace_s=0.02)  # reused: never signalled
    assert gone == [] and sent == []


def test_settle_returns_what_is_still_there_once_it_stops_changing_or_the_time_is_up() -> None:
    assert settle(list, 5.0) == []
    answers = [[7, 8], [7], []]
    assert settle(lambda: answers.pop(0), 5.0) == [] and answers == []
    started = time.monotonic()
    assert settle(lambda: [9], 0.05) == [9]
    assert 0.05 <= time.monotonic() - started < 10.0


class FakePidfd:
    """os.pidfd_open answered with a pipe's read end: readable (POLLIN) once the "process" exits,
    as a pidfd is. `exits_on`: the signal that makes it exit (None: it has exited already)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, exits_on: int | None) -> None:
        self.read, self.write = os.pipe()
        self.sent: list[int] = []
        self.exits_on = exits_on
        if exits_on is None:
            os.write(self.write, b"x")
        monkeypatch.setattr(os, "pidfd_open", lambda pid: self.read)
        monkeypatch.setattr(signal, "pidfd_send_signal", self.signal)

    def signal(self, fd: int, sig: int, *args: object) -> None:
        assert fd == self.read
        self.sent.append(int(sig))
        if sig == self.exits_on:
            os.write(self.write, b"x")

    def close(self) -> None:
        os.close(self.write)
        with pytest.raises(OSError):  # stop() closed the read end it was given
            os.fstat(self.read)


def test_a_process_that_exits_on_sigterm_gets_no_sigkill(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakePidfd(monkeypatch, exits_on=signal.SIGTERM)
    assert stop([os.getpid()], rescan=lambda: [os.getpid()], ours=lambda pid: True, grace_s=5.0) == []
    assert fake.sent == [signal.SIGTERM]
    fake.close()


def test_a_process_gone_before_the_signal_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakePidfd(monkeypatch, exits_on=None)
    started = time.monotonic()
    assert stop([os.getpid()], rescan=list, ours=lambda pid: True, grace_s=5.0) == []
    assert time.monotonic() - started < 4.0  # not the 5 s grace
    assert fake.sent == [signal.SIGTERM]  # sent to its pidfd: harmless to a process already gone
    fake.close()


def test_the_wait_for_an_exit_sleeps_in_poll_not_in_a_busy_loop(
    monkeypatch: pytest.MonkeyPatch, sent: list[tuple[str, int, int]]
) -> None:
    """_await_exit waits on the pidfds (woken at the first exit), one poll per wake: counted here
    over stop()'s four waits of 50 ms for a process that never exits."""
    polls: list[float] = []
    exited = leftovers._exited

    def counted(fds: list[int], timeout_s: float) -> bool:
        polls.append(timeout_s)
        return exited(fds, timeout_s)

    monkeypatch.setattr(leftovers, "_exited", counted)
    me = os.getpid()
    assert stop([me], rescan=lambda: [me], ours=lambda pid: pid == me, grace_s=0.05) == [me]
    assert len(polls) < 60, len(polls)
    assert sum(polls) >= 4 * 0.04  # the waits were in poll


def test_the_last_pid_and_the_thread_count_are_read_from_loadavg(monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/loadavg's fourth field is running/total scheduling entities: the total (every thread,
    each holding a pid) bounds the pids the window may not cover, not the running count."""
    monkeypatch.setattr(leftovers, "_read", lambda path: "0.00 0.01 0.05 1/123 4567\n")
    assert leftovers._last_pid_and_threads() == (4567, 123)
