"""edges.reaper and edges.reaper_process without a process (the unit tier starts none): the spec
orch sends, the lines the reaper answers (the test plays the reaper on a socket pair), the walk of
its descendants on a faked /proc, the leftovers' two ways of finding processes as one.
tests/test_repro_reaper.py runs the real reaper."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.edges import leftovers, reaper, reaper_process
from orchestrator.edges.reaper import Reaped
from orchestrator.errors import WorkloadError

REAPER_PID = 4000


class FakeReaper:
    """What Reaped uses of the reaper's subprocess.Popen: pid, wait(timeout), kill()."""

    def __init__(self, exits: bool = True) -> None:
        self.pid, self.exits, self.waited, self.killed = REAPER_PID, exits, 0, 0

    def wait(self, timeout: float | None = None) -> int:
        self.waited += 1
        if not self.exits and not self.killed:
            raise subprocess.TimeoutExpired("reaper", timeout or 0.0)
        return 0

    def kill(self) -> None:
        self.killed += 1


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(orch's end, the reaper's end)."""
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


@pytest.fixture
def wake() -> Iterator[tuple[int, int]]:
    """(read end, write end) of the reaper's SIGCHLD wake-up pipe, its read end non-blocking as
    _wake_on_sigchld makes it (_drain reads it until it would block)."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    yield read_end, write_end
    os.close(read_end)
    os.close(write_end)


def _reaped(ours: socket.socket, fake: FakeReaper | None = None) -> Reaped:
    return Reaped(fake or FakeReaper(), ours, 4001, True, 12.5)  # type: ignore[arg-type]


def _readable(fd: int) -> bool:
    waiter = select.poll()
    waiter.register(fd, select.POLLIN)
    try:
        return bool(waiter.poll(0))
    finally:
        os.close(fd)


# ---------------------------------------------------------------- the spec orch sends (PURE)


def test_the_command_and_environment_reach_the_reaper_byte_for_byte() -> None:
    env = {"ODD": "a=b c\nd", "EMPTY": "", "ÜNI": "ç"}
    sent = reaper_process.encode("echo 'x y'\nexit 3", env)
    head, _, payload = sent.partition(b"\n")
    assert int(head) == len(payload)
    command, got = reaper_process.decode(payload)
    assert command == b"echo 'x y'\nexit 3"
    assert got == {b"ODD": b"a=b c\nd", b"EMPTY": b"", "ÜNI".encode(): "ç".encode()}
    assert reaper_process.decode(reaper_process.encode("true", {}).partition(b"\n")[2]) == (b"true", {})


def test_a_nul_in_the_command_or_environment_is_refused_as_subprocess_refuses_it() -> None:
    with pytest.raises(ValueError, match="embedded null byte"):
        reaper_process.encode("echo \0", {})
    with pytest.raises(ValueError, match="embedded null byte"):
        reaper_process.encode("true", {"A": "b\0c"})


def test_the_reaper_reads_the_spec_in_pieces_and_nothing_once_orch_is_gone(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    sent = reaper_process.encode("true", {"A": "b" * 200_000})
    ours.setblocking(False)
    written = ours.send(sent)  # what fits now; the rest once the reader made room
    got: list[bytes | None] = []
    reader = threading.Thread(target=lambda: got.append(reaper_process._read_spec(theirs.fileno())))
    reader.start()
    ours.setblocking(True)
    ours.sendall(sent[written:])
    reader.join(10)
    assert got == [sent.partition(b"\n")[2]]
    ours.close()
    assert reaper_process._read_spec(theirs.fileno()) is None


def _read_spec_in_thread(fd: int) -> list[bytes | None]:
    """_read_spec in a daemon thread given 5 s: [] if it is still reading (a hang under a mutant)."""
    got: list[bytes | None] = []
    reader = threading.Thread(target=lambda: got.append(reaper_process._read_spec(fd)), daemon=True)
    reader.start()
    reader.join(5)
    return got


def test_a_spec_cut_short_by_orchs_end_is_nothing_to_run(pair: tuple[socket.socket, socket.socket]) -> None:
    """orch gone after the length line and part of the payload: the reaper runs nothing (its
    loop ended on the first empty read, not on a count it would never reach)."""
    ours, theirs = pair
    ours.sendall(b"100\n" + b"x" * 10)
    ours.close()
    assert _read_spec_in_thread(theirs.fileno()) == [None]


def test_a_length_over_the_cap_or_a_length_line_too_long_is_refused_without_waiting(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """Neither waits for a payload orch is still sending (orch's end stays open here)."""
    ours, theirs = pair
    assert reaper_process.MAX_SPEC_BYTES == 64 << 20  # stated here: a test reading the cap moves with it
    ours.sendall(b"%d\n" % ((64 << 20) + 1))
    assert _read_spec_in_thread(theirs.fileno()) == [None]
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"1" * 40)  # no newline within 32 bytes: not a length orch writes
        assert _read_spec_in_thread(b.fileno()) == [None]


def test_a_spec_at_the_cap_is_read_whole(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    payload = b"true\0" + b"A=" + b"b" * (reaper_process.MAX_SPEC_BYTES - 7)
    assert len(payload) == reaper_process.MAX_SPEC_BYTES
    sender = threading.Thread(target=lambda: ours.sendall(b"%d\n" % len(payload) + payload), daemon=True)
    sender.start()
    got = _read_spec_in_thread(theirs.fileno())
    sender.join(5)
    assert len(got) == 1 and got[0] == payload


def test_a_process_gone_has_no_start_time_and_no_parent() -> None:
    gone = 2**22 + 1  # above pid_max's default: no such process
    assert reaper_process.start_ticks(gone) == 0 and reaper_process.parent_and_state(gone) is None
    fields = open(f"/proc/{os.getpid()}/stat", "rb").read().rsplit(b")", 1)[1].split()
    assert reaper_process.start_ticks(os.getpid()) == int(fields[19]) > 0  # field 22 of the whole line
    assert reaper_process.parent_and_state(os.getpid()) == (os.getppid(), fields[0])


def test_a_stat_line_that_cannot_be_read_has_no_start_time_or_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Too short, or not numbers where numbers are (a kernel's format orch does not know)."""
    monkeypatch.setattr(reaper_process, "_stat_fields", lambda pid: [b"S", b"1"])
    assert reaper_process.start_ticks(7) == 0 and reaper_process.parent_and_state(7) == (1, b"S")
    monkeypatch.setattr(reaper_process, "_stat_fields", lambda pid: [b"S", b"x", *[b"0"] * 17, b"y"])
    assert reaper_process.start_ticks(7) == 0 and reaper_process.parent_and_state(7) is None


def test_a_parent_gone_during_the_walk_ends_it_not_under_the_reaper(monkeypatch: pytest.MonkeyPatch) -> None:
    chain = {10: (11, b"S"), 11: (12, b"S")}  # 12 exited while the walk went up
    monkeypatch.setattr(reaper_process, "parent_and_state", chain.get)
    assert reaper_process.under(10, REAPER_PID) is False


def test_a_parent_chain_that_never_reaches_the_reaper_or_init_ends_not_under_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A walk of parents is bounded (MAX_DEPTH): a chain that never ends is not the reaper's."""
    monkeypatch.setattr(reaper_process, "parent_and_state", lambda pid: (pid + 1, b"S"))
    assert reaper_process.under(10, 5) is False  # 5 is below every pid of the chain
    monkeypatch.setattr(reaper_process, "parent_and_state", lambda pid: (pid + 1, b"S") if pid < 20 else (1, b"S"))
    assert reaper_process.under(10, 1) is False  # init adopts every orphan: reaching it is not being ours


def test_the_reaper_says_whether_it_reaped_the_shell_so_its_pid_is_never_killed_again(
    monkeypatch: pytest.MonkeyPatch, pair: tuple[socket.socket, socket.socket], wake: tuple[int, int]
) -> None:
    """_serve tells EXIT and returns True once the shell is reaped, False if orch's end closed
    first; _finish then SIGKILLs the shell's group only if it was not reaped (a reaped shell's pid
    may name another process group by then). No process is started or killed: waitpid, killpg and
    the walk of descendants are faked."""
    shell = 4321
    exits = [{4322: 0, shell: 256}]  # another child and the shell (exit code 1)
    monkeypatch.setattr(reaper_process, "_reap", lambda: exits.pop(0) if exits else {})
    killed: list[int] = []
    monkeypatch.setattr(reaper_process.os, "killpg", lambda pgid, sig: killed.append(pgid))
    monkeypatch.setattr(reaper_process, "descendants", lambda pid: [])
    ours, theirs = pair
    wake_r, wake_w = wake
    os.write(wake_w, b"x")
    got: list[bool] = []
    server = threading.Thread(target=lambda: got.append(reaper_process._serve(theirs.fileno(), wake_r, shell)))
    server.start()
    ours.settimeout(5)
    assert ours.recv(64) == b"EXIT 256\n"  # only the shell's exit is told
    os.write(wake_w, b"x")  # a later child's exit: nothing more to tell
    ours.shutdown(socket.SHUT_WR)  # orch's end closes
    server.join(5)
    assert got == [True]
    reaper_process._finish(None, wake_r)
    assert killed == []
    ours2, theirs2 = socket.socketpair()
    with ours2, theirs2:
        ours2.close()
        assert reaper_process._serve(theirs2.fileno(), wake_r, shell) is False  # orch gone, shell running
    reaper_process._finish(shell, wake_r)
    assert killed == [shell]


def test_a_shell_reaped_when_orch_is_gone_counts_as_reaped(
    monkeypatch: pytest.MonkeyPatch, pair: tuple[socket.socket, socket.socket], wake: tuple[int, int]
) -> None:
    """EXIT cannot be told (orch's end closed): the shell was still reaped, so _finish must not
    SIGKILL its pid's group."""
    shell = 4321
    monkeypatch.setattr(reaper_process, "_reap", lambda: {shell: 0})
    ours, theirs = pair
    ours.shutdown(socket.SHUT_RD)  # orch reads no more: the write of EXIT fails (EPIPE)
    os.write(wake[1], b"x")
    assert reaper_process._serve(theirs.fileno(), wake[0], shell) is True


def test_the_last_round_goes_on_while_something_is_left_to_kill(
    monkeypatch: pytest.MonkeyPatch, wake: tuple[int, int]
) -> None:
    """_finish SIGKILLs what is left under the reaper, reaps, and looks again until nothing is left
    (or FINISH_S): a daemon's child forked between two rounds is killed in the next one. Nothing
    real is killed: the pidfd calls and the walk are faked."""
    rounds = [[51, 52], [53], []]
    walks: list[int] = []

    def descendants(pid: int) -> list[int]:
        walks.append(pid)
        return rounds.pop(0) if rounds else []

    sent: list[int] = []
    opened: list[int] = []
    monkeypatch.setattr(reaper_process, "descendants", descendants)
    monkeypatch.setattr(reaper_process, "_reap", dict)
    monkeypatch.setattr(reaper_process, "under", lambda pid, me: True)
    monkeypatch.setattr(
        reaper_process.os, "pidfd_open", lambda pid: (opened.append(pid), os.open(os.devnull, os.O_RDONLY))[1]
    )
    monkeypatch.setattr(reaper_process._signal, "pidfd_send_signal", lambda fd, sig: sent.append(sig))
    reaper_process._finish(None, wake[0])
    assert opened == [51, 52, 53] and sent == [signal.SIGKILL] * 3
    assert walks == [os.getpid()] * 3  # two rounds that killed, one that found nothing


# ---------------------------------------------------------------- the reaper's descendants on a faked /proc


def test_descendants_are_every_live_process_under_the_reaper_parents_first() -> None:
    tree = {REAPER_PID: [10, 11], 10: [12], 12: [13], 11: [], 13: []}
    zombie = {11}
    found = reaper_process.descendants(REAPER_PID, tree.__getitem__, lambda pid: (0, b"Z" if pid in zombie else b"S"))
    assert sorted(found) == [10, 12, 13]
    assert found.index(10) < found.index(12) < found.index(13)


def test_a_process_gone_meanwhile_or_a_loop_of_reused_pids_ends_the_walk() -> None:
    tree = {REAPER_PID: [10, 11], 10: [REAPER_PID, 10], 11: [10]}
    assert reaper_process.descendants(REAPER_PID, tree.__getitem__, lambda pid: None if pid == 11 else (0, b"S")) == [
        10
    ]


def test_the_reapers_children_are_those_of_all_its_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"/proc/7/task/7/children": b"10 11 ", "/proc/7/task/8/children": b"12 "}
    monkeypatch.setattr(reaper_process.os, "listdir", lambda path: ["7", "8"] if path == "/proc/7/task" else [])
    monkeypatch.setattr(reaper_process, "open", lambda path, mode="r": _File(files[path]), raising=False)
    assert reaper_process.children(7) == [10, 11, 12]
    monkeypatch.setattr(reaper_process.os, "listdir", lambda path: (_ for _ in ()).throw(FileNotFoundError(path)))
    assert reaper_process.children(7) == []


class _File:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def __enter__(self) -> _File:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def read(self) -> bytes:
        return self.data


def test_a_process_is_the_reapers_when_its_parents_lead_to_it(
    monkeypatch: pytest.MonkeyPatch, pair: tuple[socket.socket, socket.socket]
) -> None:
    """Asked once its pidfd is open: a reused pid is another process, whose parents lead to init."""
    stat = {20: (21, b"S"), 21: (REAPER_PID, b"S"), 30: (1, b"S"), 31: (REAPER_PID, b"Z"), 32: (0, b"S")}
    monkeypatch.setattr(reaper_process, "parent_and_state", stat.get)
    repro = _reaped(pair[0])
    assert [pid for pid in (20, 21, 30, 31, 32, 99) if repro.carries(pid)] == [20, 21]


def test_the_reaper_never_kills_a_process_that_is_not_under_it() -> None:
    """Its last round SIGKILLs through a pidfd, after asking again: here the test process itself,
    found under a pretend reaper (a pid reused since the walk), is left alone."""
    assert reaper_process._kill(os.getpid(), REAPER_PID) is False
    assert reaper_process._kill(2**22 + 1, REAPER_PID) is False  # no such process


def test_leftovers_found_either_way_are_found_once_and_ours_if_either_says_so() -> None:
    class Way:
        def __init__(self, pids: list[int]) -> None:
            self.pids = pids

        def find(self) -> list[int]:
            return self.pids

        def carries(self, pid: int) -> bool:
            return pid in self.pids

    both = leftovers.Either(Way([5, 3]), Way([3, 9]))
    assert both.find() == [3, 5, 9]
    assert [both.carries(pid) for pid in (3, 5, 9, 4)] == [True, True, True, False]


# ---------------------------------------------------------------- orch's side of the socket


def test_the_exit_is_read_from_the_reapers_line_with_popens_meaning(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    repro = _reaped(ours)
    assert repro.poll() is None and not _readable(repro.exit_fd())
    with pytest.raises(subprocess.TimeoutExpired):
        repro.wait(timeout=0.01)
    theirs.sendall(b"EXIT %d\n" % (3 << 8))
    assert _readable(repro.exit_fd())
    assert (repro.poll(), repro.wait(), repro.returncode) == (3, 3, 3)
    killed = _reaped(theirs)
    ours.sendall(b"EXIT %d\n" % signal.SIGTERM)  # killed by a signal: -SIGNUM, as Popen says
    assert killed.wait(timeout=5) == -signal.SIGTERM


def test_a_reaper_that_died_without_a_word_counts_as_its_shell_killed(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """PR_SET_PDEATHSIG: the shell got SIGKILL when its reaper died."""
    ours, theirs = pair
    repro = _reaped(ours)
    theirs.close()
    assert repro.wait(timeout=5) == -signal.SIGKILL


def test_a_line_is_read_alone_so_the_next_one_still_wakes_the_wait(pair: tuple[socket.socket, socket.socket]) -> None:
    """A repro that exits at once: START and EXIT arrive together; reading the first must leave the
    second in the socket, or the wait's poll() would sleep until the timeout."""
    ours, theirs = pair
    theirs.sendall(b"START 4001 1 5000000000\nEXIT 0\n")
    assert reaper._read_line(ours, 5.0) == b"START 4001 1 5000000000\n"
    assert _readable(os.dup(ours.fileno()))
    assert reaper._read_line(ours, 5.0) == b"EXIT 0\n"
    with pytest.raises(TimeoutError):
        reaper._read_line(ours, 0.01)


def test_closing_lets_the_reaper_go_and_waits_for_it_or_kills_it(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    fine = FakeReaper()
    _reaped(ours, fine).close()
    assert theirs.recv(10) == b""  # the reaper sees orch's end close
    assert (fine.waited, fine.killed) == (1, 0)
    stuck, (mine, other) = FakeReaper(exits=False), socket.socketpair()
    _reaped(mine, stuck).close()
    other.close()
    assert (stuck.waited, stuck.killed) == (2, 1)


def _start_answered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeReaper, answer: bytes) -> None:
    """reaper.start with `fake` as the reaper, which answers `answer` on its end of the socket."""
    ends = []

    def spawn(fd: int, *a: object) -> FakeReaper:
        theirs = socket.socket(fileno=os.dup(fd))
        theirs.sendall(answer)
        ends.append(theirs)
        return fake

    monkeypatch.setattr(reaper, "_spawn_reaper", spawn)
    try:
        with open(tmp_path / "o", "wb") as out:
            reaper.start("true", tmp_path, {}, out, out)
    finally:
        for end in ends:
            end.close()


@pytest.mark.parametrize("exits", [True, False], ids=["exits", "stuck"])
def test_a_reaper_that_answers_nonsense_is_let_go_or_killed_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exits: bool
) -> None:
    """Let go first (orch's end closed, the reaper waited for: it stops what it started), killed
    only when it has not exited by then: killed at once, it left the shell's children running."""
    fake = FakeReaper(exits=exits)
    with pytest.raises(WorkloadError, match=r"its reaper \(pid 4000\) did not start it"):
        _start_answered(tmp_path, monkeypatch, fake, b"HELLO\n")
    assert (fake.waited, fake.killed) == ((1, 0) if exits else (2, 1))


def test_an_interrupt_while_start_reads_the_answer_lets_the_reaper_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C under Python's own handler, landing while START is read: the interrupt goes on, and
    the reaper, let go, stops the shell it started (tests/test_repro_reaper.py: on real processes)."""
    fake = FakeReaper()

    def interrupted(sock: socket.socket, timeout_s: float | None = None) -> bytes:
        raise KeyboardInterrupt

    monkeypatch.setattr(reaper, "_read_line", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _start_answered(tmp_path, monkeypatch, fake, b"START 4001 1 5000000000 777\n")
    assert (fake.waited, fake.killed) == (1, 0)


def test_the_duration_starts_at_the_reapers_fork(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its CLOCK_MONOTONIC stamp, in seconds: the interpreter's start is not the repro's."""
    ends = []

    def spawn(fd: int, *a: object) -> FakeReaper:
        theirs = socket.socket(fileno=os.dup(fd))
        theirs.sendall(b"START 4001 0 12500000000 777\n")
        ends.append(theirs)
        return FakeReaper()

    monkeypatch.setattr(reaper, "_spawn_reaper", spawn)
    with open(tmp_path / "o", "wb") as out:
        repro = reaper.start("true", tmp_path, {}, out, out)
    assert (repro.pid, repro.subreaper, repro.started, repro.start_ticks) == (4001, False, 12.5, 777)
    assert reaper_process._read_spec(ends[0].fileno()) == reaper_process.encode("true", {}).partition(b"\n")[2]
    repro.close()
    ends[0].close()
