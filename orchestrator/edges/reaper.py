"""A local repro run under a reaper of its own, which adopts what the repro orphans (EDGE, Linux).

Why: a repro's daemon that clears its environment (``env -i setsid loadgen &``) carries no mark
(edges.leftovers), so it outlived its trial and loaded every later one. Linux hands an orphan to
its nearest ancestor that is a child subreaper (prctl PR_SET_CHILD_SUBREAPER), not to init. orch
itself may not be one (edges.leftovers says why), so each repro gets a small process that is:
edges.reaper_process, started here with ``python -I -S`` (no site, C modules only: the cost per
trial is one interpreter start, bench/bench_reaper.py). Whatever the repro started that still runs
once it exited is then a descendant of its reaper, however it left the repro's group, session or
environment; a parallel sweep's repros each have their own reaper, so they are told apart exactly.

How orch and the reaper talk: one socket pair. orch sends the command and the environment
(never the reaper's own: Python coerces the C locale into its environment); the reaper answers
with the shell's pid and start time once the shell runs (it exec'd: its group exists, so a kill
right after the start reaches it), later with its exit status; orch closes its end once the
trial's leftovers are stopped, and the reaper then kills what is left, reaps it and exits. orch
reads the reaper's descendants from /proc/PID/task/TID/children (its process stays orch's child,
unreaped, until it exited: its pid cannot be reused meanwhile). A controller killed -9 closes its
end too: the reaper stops the repro and all it started, where before the repro's shell died
(PR_SET_PDEATHSIG) and its daemons ran on.

Timing: the duration starts when the reaper forked the shell (its CLOCK_MONOTONIC stamp, the
clock orch reads) and ends when orch learns the exit, so the interpreter's start is not the
repro's; the exit reaches orch through the socket (a pidfd of the shell could name another process
once the reaper reaped it and its pid was reused).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from orchestrator.edges import reaper_process
from orchestrator.errors import WorkloadError

__all__ = ["REAPER", "Reaped", "start"]

REAPER = str(Path(reaper_process.__file__).resolve())
# Imported, not run as a script: a script is compiled at every start (3-9 ms here), a module's
# bytecode is cached (orch's own import of it wrote that cache)
_BOOT = "import sys; sys.path[0:0] = sys.argv[1:2]; import reaper_process; reaper_process.main(sys.argv[1:])"
START_TIMEOUT_S = 30.0  # the reaper's interpreter start on a loaded machine: tens of ms, rarely more
EXIT_TIMEOUT_S = reaper_process.FINISH_S + 5.0  # the reaper's last round, once orch's end closed
MAX_LINE = 128  # a line from the reaper: `START PID 0|1 NS TICKS` or `EXIT STATUS`


class Reaped:
    """A repro's shell under its reaper: what run_command uses of a subprocess.Popen (pid, poll,
    wait), a file descriptor that becomes readable on its exit (exit_fd), and the processes it
    left (find, carries: as a leftovers.Marked). `close` lets the reaper go and waits for it."""

    def __init__(
        self,
        reaper: subprocess.Popen[bytes],
        ctl: socket.socket,
        pid: int,
        subreaper: bool,
        started: float,
        ticks: int = 0,
    ) -> None:
        self.reaper, self._ctl = reaper, ctl
        self.pid, self.subreaper, self.started = pid, subreaper, started
        self.start_ticks = ticks  # the shell's /proc start time as its reaper read it (0: unread)
        self.returncode: int | None = None

    def exit_fd(self) -> int:
        """A new file descriptor (the caller closes it) that is readable once the shell exited."""
        return os.dup(self._ctl.fileno())

    def poll(self) -> int | None:
        """The shell's exit code (-SIGNUM for a signal, as Popen's) once it exited, else None."""
        if self.returncode is None and self._ready(0):
            self._read_exit()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._ready(timeout):
                raise subprocess.TimeoutExpired(f"{reaper_process.SHELL} -c", timeout or 0.0)
            self._read_exit()
        assert self.returncode is not None
        return self.returncode

    def find(self) -> list[int]:
        """The live processes under the reaper: the shell while it runs, then what it left."""
        return reaper_process.descendants(self.reaper.pid)

    def carries(self, pid: int) -> bool:
        """Is `pid` a live process under the reaper (asked once its pidfd is open: a pid reused by
        another process is no descendant)?"""
        return reaper_process.under(pid, self.reaper.pid)

    def close(self) -> None:
        """orch's end closed: the reaper kills what is left of the repro (nothing, once its
        leftovers were stopped), reaps it and exits; waited for, so neither it nor a zombie stays."""
        _let_go(self.reaper, self._ctl)

    def _ready(self, timeout: float | None) -> bool:
        waiter = select.poll()
        waiter.register(self._ctl, select.POLLIN)
        return bool(waiter.poll(None if timeout is None else max(0.0, timeout) * 1000))

    def _read_exit(self) -> None:
        line = _read_line(self._ctl)
        fields = line.split()
        if len(fields) == 2 and fields[0] == b"EXIT":
            self.returncode = os.waitstatus_to_exitcode(int(fields[1]))
        else:  # the reaper died (SIGKILL, out of memory): so did the shell, by PR_SET_PDEATHSIG
            self.returncode = -signal.SIGKILL


def start(command: str, cwd: Path, env: Mapping[str, str], out: BinaryIO, err: BinaryIO) -> Reaped:
    """Start the reaper, and through it ``/bin/sh -c command`` with exactly `env`, in `cwd`, its
    output to `out` and `err`, in a session of its own; returns once the shell runs. WorkloadError
    when it cannot be started (ValueError, as subprocess's, for a NUL in the command or `env`)."""
    spec = reaper_process.encode(command, env)
    ours, theirs = socket.socketpair()
    try:
        reaper = _spawn_reaper(theirs.fileno(), cwd, out, err, command)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    try:
        ours.sendall(spec)
        line = _read_line(ours, START_TIMEOUT_S)
        kind, pid, subreaper, started_ns, ticks = line.split()
        if kind != b"START":
            raise ValueError(line)
        return Reaped(reaper, ours, int(pid), subreaper == b"1", int(started_ns) / 1e9, int(ticks))
    except (OSError, ValueError) as exc:
        _let_go(reaper, ours)
        raise WorkloadError(
            f"repro: cannot start {command!r}: its reaper (pid {reaper.pid}) did not start it ({exc or 'no answer'}; "
            "see the repro's stderr)"
        ) from exc
    except BaseException:  # a Ctrl-C under Python's own handler (orch's waits past the start: edges.interrupts)
        _let_go(reaper, ours)
        raise


def _let_go(reaper: subprocess.Popen[bytes], ours: socket.socket) -> None:
    """Close orch's end and wait for the reaper: seeing it close, the reaper kills what of the repro
    is left (its group, and what it orphaned), reaps it and exits. SIGKILLed only if it has not
    exited by EXIT_TIMEOUT_S: killed at once, a shell it started dies with it (PR_SET_PDEATHSIG) but
    the shell's children run on under init."""
    ours.close()
    try:
        reaper.wait(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait()


def _spawn_reaper(fd: int, cwd: Path, out: BinaryIO, err: BinaryIO, command: str) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _BOOT, str(Path(REAPER).parent), str(fd)],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            pass_fds=(fd,),
            start_new_session=True,  # a terminal's Ctrl-C reaches orch only: orch stops the repro
        )
    except OSError as exc:
        raise WorkloadError(
            f"repro: cannot start {command!r} in {cwd}: {exc.strerror} (check repro.command and its directory)"
        ) from exc


def _read_line(sock: socket.socket, timeout_s: float | None = None) -> bytes:
    """One line from the reaper, never more (the next one stays in the socket, so its pollable end
    still says whether it came); b"" when the reaper's end closed first."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError("no answer")
        waiter = select.poll()
        waiter.register(sock, select.POLLIN)
        if not waiter.poll(None if left is None else left * 1000):
            continue
        seen = sock.recv(MAX_LINE, socket.MSG_PEEK)
        end = seen.find(b"\n")
        if end >= 0:
            return sock.recv(end + 1)
        if not seen or len(seen) >= MAX_LINE:
            return b""
        time.sleep(0.001)  # the rest of a line being written
