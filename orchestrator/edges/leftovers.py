"""What a repro leaves running: marked when it starts, found and stopped when it ends (EDGE, Linux).

Why: a repro that daemonises a helper (``setsid loadgen &``, a double fork) takes it out of the
repro's process group and session, so killing that group missed it. On a real testbed such a load
generator, started by trial 0, loaded the deployment through every later trial (decode anomalies
81-152 against 36-51 on a clean run), the sweep said "8 trials completed, 0 failed", and it was
still running after orch exited.

How: every repro runs with ``ORCH_REPRO_MARK=<random>`` in its environment. Children inherit it
through fork, exec, setsid and double forks alike, so once the repro has exited, a live process
carrying that mark is one it started (Jenkins' ProcessTreeKiller finds a build's processes by the
same kind of cookie). Each repro has its own mark: the repros of a parallel sweep, the local
simulator's units and orch's other children (which carry none) are told apart exactly. Processes
are signalled through pidfds opened after the mark was read, so a pid reused meanwhile is never hit.
A local repro is found a second way too: it runs under a reaper of its own (edges.reaper), a child
subreaper that adopts whatever the repro orphans, so what clears its environment is still found,
as a descendant of that reaper (Either: found by either way, stopped the same way).

Why not the alternatives (evaluated):
- prctl(PR_SET_CHILD_SUBREAPER) on orch itself: orphans then become orch's children, with nothing
  left to say which repro (of several running at once), unit or helper command they came from, and
  orch must reap every one of them, which it cannot do safely: waitpid(-1) takes the exit status a
  subprocess.Popen of another thread is waiting for (Popen then reads 0), and an unreaped orphan
  stays a zombie that a liveness check still counts. The local units would be adopted too. On a
  process of its own per repro (edges.reaper) none of that holds: it reaps with waitpid(-1) as it
  has nothing else to wait for, and adopts that repro's orphans only. That is the second way above.
- A cgroup v2 group per repro (cgroup.kill): exact, but orch may rarely create one: an ssh login's
  cgroup belongs to root, and hybrid hosts (cgroup v1 controllers, an empty v2 tree) exist; a
  second mechanism used on some controllers only would be the less tested path.

Cost: only processes newer than the repro can carry its mark, and Linux hands out pids in
increasing order until the counter wraps, so only the /proc entries the counter passed since the
repro started are read (all of them when it may have gone round once more). A repro that left
nothing costs one directory listing and three small /proc reads; its reaper, one interpreter start
per trial (bench/bench_reaper.py) and one read of the reaper's children.

Limits: a process that clears or replaces its environment (``env -i``, sudo's env_reset, a
setproctitle that overwrites it) carries no mark, and one whose environ orch may not read (another
user's) cannot be seen by it. On the controller the repro's reaper still finds those (also another
user's, though orch may not stop those), unless they were never in its tree (a process another
service starts on its behalf: systemd-run, docker run, at) or the reaper was killed by someone
else (its shell dies with it, its orphans go to init). A repro on a host (``repro.on``: run over
SSH, edges.remote_leftovers) has no reaper: there its mark, its process group and, where orch is
root on a systemd host, its transient scope (edges.remote_scope) find what it started; without the
scope an unmarked daemon there still outlives it.
"""

from __future__ import annotations

import os
import re
import secrets
import select
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from orchestrator.core import words

__all__ = [
    "MARK_VAR",
    "RUN_VAR",
    "Either",
    "Finder",
    "Marked",
    "counted",
    "describe",
    "marked_env",
    "new_mark",
    "new_pids",
    "settle",
    "shown",
    "stop",
    "survivors_shown",
    "unnamed_shown",
]

MARK_VAR = "ORCH_REPRO_MARK"
# the run's id, beside the mark of a repro on a host: `orch restore --testbed` (the run folder, which
# records each repro's mark, gone) finds by it what a killed controller's repro still runs there
RUN_VAR = "ORCH_REPRO_RUN"
MAX_SHOWN_CHARS = 160  # of a leftover's command line in a message
CMDLINE_BYTES = 4 * MAX_SHOWN_CHARS  # read of a leftover's /proc/PID/cmdline (UTF-8: up to 4 bytes a char)
KILL_ROUNDS = 3  # KILL, look again (what was forked meanwhile), KILL again
_RESERVED_PIDS = 300  # Linux never hands out a pid below this once it wrapped
_POLL_S = 0.01


class Finder(Protocol):
    """A way to find what a repro started: its mark (Marked), its reaper (edges.reaper.Reaped)."""

    def find(self) -> list[int]: ...

    def carries(self, pid: int) -> bool: ...


class Either:
    """Several ways of finding a repro's processes as one: found by any, ours if any says so."""

    def __init__(self, *ways: Finder) -> None:
        self.ways = ways

    def find(self) -> list[int]:
        return sorted({pid for way in self.ways for pid in way.find()})

    def carries(self, pid: int) -> bool:
        return any(way.carries(pid) for way in self.ways)


class Marked:
    """One repro's mark, and the live processes that carry it.

    `leader` is the repro's pid. `since_start` False: the repro may have started long ago (a
    controller killed -9): every process is looked at."""

    def __init__(self, mark: str, leader: int, since_start: bool = True) -> None:
        self.mark, self.leader = mark, leader
        self._needle = f"\0{MARK_VAR}={mark}\0".encode()
        self._forks = _forks() if since_start else None

    def find(self) -> list[int]:
        """The live processes carrying the mark (the leader included while it runs)."""
        return [pid for pid in self._candidates() if self.carries(pid)]

    def carries(self, pid: int) -> bool:
        """Does process `pid` carry the mark? False once it exited (a zombie has no environment)."""
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                return self._needle in b"\0" + f.read()
        except OSError:  # gone, or not ours to read
            return False

    def _candidates(self) -> list[int]:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
        window = self._window()
        return pids if window is None else [pid for pid in pids if window(pid)]

    def _window(self) -> Callable[[int], bool] | None:
        """Which pids can have been handed out since the leader started (None: any)."""
        if self._forks is None:
            return None
        try:
            last, threads = _last_pid_and_threads()
            pid_max = int(_read("/proc/sys/kernel/pid_max"))
        except (OSError, ValueError, IndexError):
            return None
        forks = _forks()
        if forks is None:
            return None
        return new_pids(self.leader, last, forks - self._forks, threads, pid_max)


def new_pids(leader: int, last: int, forks: int, threads: int, pid_max: int) -> Callable[[int], bool] | None:
    """Which pids can belong to processes started since `leader` (None: any), given the last pid
    handed out, the forks since `leader` started, the threads now and pid_max (PURE).

    Linux hands out pids upwards from the last one; past pid_max it wraps to _RESERVED_PIDS. With
    `last` >= `leader` and no wrap, new pids are in [leader, last]; with `last` below `leader` it
    wrapped once: above `leader` or up to `last`. Going all the way round more than once takes
    nearly pid_max forks (every free pid is handed out before one comes back): with fewer forks
    than the pids that are not held by threads now (counted twice, for those held meanwhile),
    that cannot have happened."""
    if forks + 2 * threads >= pid_max - _RESERVED_PIDS:
        return None
    if last >= leader:
        return lambda pid: leader <= pid <= last
    return lambda pid: pid >= leader or pid <= last


def new_mark() -> str:
    """A fresh mark (64 random bits: no two repros share one)."""
    return secrets.token_hex(8)


_MARK_FORM = re.compile(r"[0-9a-f]{16}")  # new_mark's


def is_mark(text: str) -> bool:
    """Whether `text` has a mark's form (new_mark's): what a record read back from a trial folder
    (a local repro's group, a remote repro's) must hold before orch signals anything by it."""
    return _MARK_FORM.fullmatch(text) is not None


def marked_env(env: Mapping[str, str] | None, mark: str) -> dict[str, str]:
    """The repro's environment (`env`, or orch's own when None) with its mark."""
    return {**(os.environ if env is None else env), MARK_VAR: mark}


def describe(pid: int) -> str:
    """``pid N (command line)``, the command line shortened (it may be gone already: then none)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(CMDLINE_BYTES)
    except OSError:
        raw = b""
    return shown(pid, raw)


# an argument's line breaks and other control characters, written out: the name is one line of the
# progress display and of the report's list (`sh -c 'a\nb'` broke both in two)
_ESCAPED = {c: repr(chr(c))[1:-1] for c in range(32)} | {127: "\\x7f"}


def shown(pid: int, cmdline: bytes) -> str:
    """``pid N (command line)`` from /proc/N/cmdline's bytes, shortened (PURE: a leftover on a host
    is named as one on the controller, edges.remote_leftovers)."""
    command = cmdline.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", errors="replace").translate(_ESCAPED)
    if len(command) > MAX_SHOWN_CHARS:
        command = command[: MAX_SHOWN_CHARS - 3] + "..."
    return f"pid {pid} ({command or '?'})"


def survivors_shown(pids: Iterable[int]) -> str:
    """The line that names what outlived SIGKILL (another user's: orch may not signal it)."""
    return f"{_SURVIVORS}{', '.join(map(str, pids))}"


def unnamed_shown(n: int) -> str:
    """The one entry for `n` leftovers found (and stopped) past a check's bound on names
    (edges.remote_leftovers.MAX_NAMED)."""
    return f"{words.counted(n, 'more process')} carrying its mark (not named)"


def counted(entries: Iterable[str]) -> int:
    """How many processes a repro's left_behind stands for (PURE): one per named process, N for the
    entry of N not named, none for the line of those that outlived SIGKILL (found, so counted,
    already). Why: with the entries counted as processes, 64 named and 10 more read "65 processes"."""
    n = 0
    for entry in entries:
        unnamed = _UNNAMED.fullmatch(entry)
        if unnamed:
            n += int(unnamed.group(1))
        elif not entry.startswith(_SURVIVORS):
            n += 1
    return n


_SURVIVORS = "still running, could not be stopped: pid "
_UNNAMED = re.compile(r"(\d+) more process(?:es)? carrying its mark \(not named\)")


def settle(find: Callable[[], list[int]], seconds: float) -> list[int]:
    """What `find` still returns after up to `seconds` (at once when it returns nothing): a process
    on its way out when the repro exited (a pool's worker, a resource tracker) is no leftover."""
    deadline = time.monotonic() + seconds
    while True:
        found = find()
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(_POLL_S)


def stop(
    found: Iterable[int], rescan: Callable[[], Iterable[int]], ours: Callable[[int], bool], grace_s: float
) -> list[int]:
    """SIGTERM every process in `found`; SIGKILL what is left after `grace_s`, and what `rescan`
    finds meanwhile (children forked before their parent died). `ours(pid)` is asked after a pid's
    pidfd is opened, so a pid reused since it was found is left alone. Returns the pids still
    alive at the end (none, unless a process is not ours to kill)."""
    procs = _open_all(found, ours, {})
    _signal_all(procs.values(), signal.SIGTERM)
    _await_exit(procs.values(), grace_s)
    for _ in range(KILL_ROUNDS):
        procs = _open_all(rescan(), ours, procs)
        live = [p for p in procs.values() if p.alive()]
        if not live:
            break
        _signal_all(live, signal.SIGKILL)
        _await_exit(live, grace_s)
    survivors = [p.pid for p in procs.values() if p.alive()]
    for p in procs.values():
        p.close()
    return survivors


class _Proc:
    """A process to stop: its pidfd (Linux >= 5.3), else its pid and the `ours` check."""

    def __init__(self, pid: int, fd: int | None, ours: Callable[[int], bool]) -> None:
        self.pid, self.fd, self._ours = pid, fd, ours

    def alive(self) -> bool:
        if self.fd is None:
            return self._ours(self.pid)
        return not _exited([self.fd], 0)

    def send(self, sig: signal.Signals) -> None:
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            elif self._ours(self.pid):
                os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):  # gone; or not ours to kill (reported as a survivor)
            pass

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _open_all(pids: Iterable[int], ours: Callable[[int], bool], known: dict[int, _Proc]) -> dict[int, _Proc]:
    got = dict(known)
    for pid in pids:
        if pid in got:
            continue
        try:
            fd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        except (AttributeError, OSError):  # an old kernel: signal by pid, checking it first
            fd = None
        proc = _Proc(pid, fd, ours)
        if fd is not None and not ours(pid):  # another process on a reused pid, or gone already
            proc.close()
            continue
        got[pid] = proc
    return got


def _signal_all(procs: Iterable[_Proc], sig: signal.Signals) -> None:
    for p in procs:
        p.send(sig)


def _await_exit(procs: Iterable[_Proc], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    waiting = list(procs)
    while waiting := [p for p in waiting if p.alive()]:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        fds = [p.fd for p in waiting if p.fd is not None]
        if len(fds) == len(waiting):
            _exited(fds, left)  # wakes at the first exit
        else:
            time.sleep(min(left, _POLL_S))


def _exited(fds: list[int], timeout_s: float) -> bool:
    """Has one of these pidfds' processes exited (a pidfd is readable from then on)? Waits up to
    `timeout_s` for one to."""
    waiter = select.poll()
    for fd in fds:
        waiter.register(fd, select.POLLIN)
    return bool(waiter.poll(timeout_s * 1000))


def _forks() -> int | None:
    """Processes (and threads) forked since boot, from /proc/stat (None: unknown)."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"processes "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _last_pid_and_threads() -> tuple[int, int]:
    """The last pid handed out in orch's pid namespace, and how many threads exist (/proc/loadavg:
    ``0.00 0.01 0.05 1/123 4567``)."""
    fields = _read("/proc/loadavg").split()
    return int(fields[4]), int(fields[3].split("/")[1])


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()
