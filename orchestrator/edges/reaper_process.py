"""The reaper a local repro runs under: a process of its own, started by edges.reaper (EDGE, Linux).

Run as ``python -I -S -c 'import reaper_process ...' DIR FD`` (edges.reaper), FD one end of a
socket pair whose other end orch holds. It makes itself a child subreaper (prctl
PR_SET_CHILD_SUBREAPER), reads the repro's command and environment from FD, starts ``/bin/sh -c
COMMAND`` in a session of its own, and from then on every process the repro orphans (``env -i
setsid daemon &``, a double fork) becomes its child instead of init's: orch finds them as the
reaper's descendants (/proc/PID/task/TID/children), marked or not, and stops them
(edges.reaper.Reaped). It reaps whatever of its children exits, so none stays a zombie, and tells
orch on FD:
  ``START PID SUBREAPER MONOTONIC_NS TICKS\\n``  once the shell exec'd: its pid (also its process
                                          group), 1 if the prctl took, when it was forked
                                          (CLOCK_MONOTONIC, as orch's), and its start time
                                          (/proc/PID/stat's clock ticks since boot: read here,
                                          before the shell can be reaped, for orch's repro.pid)
  ``EXIT WAITSTATUS\\n``                  the shell's raw wait status, once it exited
orch says nothing more: when FD reaches its end (orch closed it once the trial's leftovers were
stopped, or orch died, kill -9 included) the reaper SIGKILLs whatever of the repro is left (its
process group and its descendants), reaps it and exits. So a killed controller leaves neither its
repro's daemons nor a reaper behind.

Why only C modules (``_ctypes``, ``_signal``, ``select``): it starts once per trial, and
``ctypes``/``signal`` import ``enum`` and more (+30 ms on a 42 ms ``-I -S -c pass`` at load 9.6,
where ``_ctypes``/``_signal``/``select`` added 4 ms); it imports nothing of orch for the same
reason.
"""

from __future__ import annotations

import _ctypes
import os
import select
import sys
import time

TYPE_CHECKING = False  # typing, collections.abc and signal: imported for mypy only (their start cost)
if TYPE_CHECKING:
    import signal as _signal
    from collections.abc import Callable, Mapping
else:
    import _signal

__all__ = ["decode", "descendants", "encode", "parent_and_state", "start_ticks", "under"]

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PR_SET_CHILD_SUBREAPER = 36
SHELL = "/bin/sh"
FINISH_S = 5.0  # how long the reaper goes on SIGKILLing what is left once orch is gone
MAX_SPEC_BYTES = 64 << 20  # the command and environment (execve takes far less)
MAX_DEPTH = 4096  # ancestors looked at to tell a descendant
_POLL_MS = 10
_STATE_ZOMBIE = (b"Z", b"X")


# ---------------------------------------------------------------- shared with orch (PURE and /proc)


def encode(command: str, env: Mapping[str, str]) -> bytes:
    """What orch sends: ``LENGTH\\n`` and the command and ``NAME=VALUE`` entries joined by NULs.
    ValueError for a NUL inside one (execve could not pass it, as subprocess refuses it)."""
    parts = [os.fsencode(command), *(os.fsencode(f"{name}={value}") for name, value in env.items())]
    if any(b"\0" in part for part in parts):
        raise ValueError("embedded null byte")
    payload = b"\0".join(parts)
    return b"%d\n" % len(payload) + payload


def decode(payload: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    """encode's payload (without its length line) -> (command, environment)."""
    command, *entries = payload.split(b"\0")
    env = {}
    for entry in entries:
        name, _, value = entry.partition(b"=")
        env[name] = value
    return command, env


def children(pid: int) -> list[int]:
    """The children of process `pid`, of all its threads ([] once it is gone)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    kids: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return kids


def _stat_fields(pid: int) -> list[bytes] | None:
    """/proc/PID/stat's fields after the command name (which may hold spaces and parentheses):
    state, ppid, pgrp, ...; None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def start_ticks(pid: int) -> int:
    """When process `pid` started (/proc/PID/stat field 22, clock ticks since boot); 0 if unread.
    Read before the reaper reaps it: a repro that ends at once is gone by the time orch looks."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else 0
    except (ValueError, IndexError):
        return 0


def parent_and_state(pid: int) -> tuple[int, bytes] | None:
    """(parent pid, state letter) of process `pid` from /proc/PID/stat; None once it is gone."""
    fields = _stat_fields(pid)
    try:
        return (int(fields[1]), fields[0]) if fields is not None else None
    except (ValueError, IndexError):
        return None


def descendants(
    pid: int,
    read_children: Callable[[int], list[int]] = children,
    read_stat: Callable[[int], tuple[int, bytes] | None] = parent_and_state,
) -> list[int]:
    """Every live (not zombie) descendant of `pid`, parents before their children."""
    found: list[int] = []
    seen = {pid}
    todo = [pid]
    while todo:
        for kid in read_children(todo.pop()):
            if kid in seen:
                continue
            seen.add(kid)
            todo.append(kid)
            got = read_stat(kid)
            if got is not None and got[1] not in _STATE_ZOMBIE:
                found.append(kid)
    return found


def under(pid: int, ancestor: int) -> bool:
    """Is `pid` a live (not zombie) descendant of `ancestor`? Asked once its pidfd is open: a pid
    reused by another process since it was found leads to init, not to `ancestor`."""
    got = parent_and_state(pid)
    if got is None or got[1] in _STATE_ZOMBIE:
        return False
    for _ in range(MAX_DEPTH):
        if got is None or got[0] <= 1:
            return False
        if got[0] == ancestor:
            return True
        got = parent_and_state(got[0])
    return False


# ---------------------------------------------------------------- the reaper (EDGE)


def main(argv: list[str]) -> None:
    ctl = int(argv[1])
    os.set_inheritable(ctl, False)  # the repro never holds orch's socket: its end means orch's end
    prctl = _prctl()
    subreaper = prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    spec = _read_spec(ctl)
    if spec is None:  # orch went away before it said what to run
        os._exit(0)
    command, env = decode(spec)
    wake = _wake_on_sigchld()
    execed, exec_done = os.pipe()  # both close-on-exec: EOF once the shell runs (or its child died)
    started = time.monotonic_ns()
    shell = os.fork()
    if shell == 0:
        _exec_shell(command, env, prctl, os.getppid())
    os.close(exec_done)
    os.read(execed, 1)  # START only then: a group kill before the child's setsid() found no group
    os.close(execed)
    _send(ctl, b"START %d %d %d %d\n" % (shell, subreaper, started, start_ticks(shell)))
    reaped = _serve(ctl, wake, shell)
    _finish(None if reaped else shell, wake)
    os._exit(0)


class _Int(_ctypes._SimpleCData):
    _type_ = "i"


class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


class _Libc:
    _handle = 0


def _prctl() -> Callable[..., int] | None:
    """libc's prctl through _ctypes (what ctypes.CDLL(None).prctl does, without importing ctypes)."""
    try:
        _Libc._handle = _ctypes.dlopen(None, 0)  # type: ignore[arg-type]
        fn: Callable[..., int] = _Function(("prctl", _Libc))  # type: ignore[arg-type]
    except (OSError, AttributeError):
        return None
    return fn


def _read_spec(ctl: int) -> bytes | None:
    """The length line and payload orch sends (None: its end closed first)."""
    data = b""
    while b"\n" not in data:
        if len(data) > 32:  # no length line orch writes: refused now, not at the next read
            return None
        chunk = _read(ctl, 65536)
        if not chunk:
            return None
        data += chunk
    head, _, payload = data.partition(b"\n")
    size = int(head)
    if size > MAX_SPEC_BYTES:
        return None
    parts = [payload]
    while (got := sum(map(len, parts))) < size:
        chunk = _read(ctl, min(1 << 20, size - got))
        if not chunk:
            return None
        parts.append(chunk)
    return b"".join(parts)


def _wake_on_sigchld() -> int:
    """A pipe that becomes readable when a child exits (SIGCHLD through the wakeup fd)."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    _signal.set_wakeup_fd(w)
    _signal.signal(_signal.SIGCHLD, lambda signum, frame: None)
    return r


def _exec_shell(command: bytes, env: dict[bytes, bytes], prctl: Callable[..., int] | None, reaper: int) -> None:
    """In the forked child: a session of its own (a timeout or an interrupt kills its group), SIGKILL
    when the reaper dies (PR_SET_PDEATHSIG), the signals Python ignores back to their defaults."""
    try:
        os.setsid()
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)
        if os.getppid() != reaper:  # the reaper died before the prctl: nobody would stop the repro
            os.kill(os.getpid(), _signal.SIGKILL)
        for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):
            _signal.signal(sig, _signal.SIG_DFL)
        os.execve(SHELL, [os.fsencode(SHELL), b"-c", command], env)
    finally:
        os._exit(127)


def _send(ctl: int, line: bytes) -> bool:
    try:
        os.write(ctl, line)
    except OSError:  # orch is gone
        return False
    return True


def _serve(ctl: int, wake: int, shell: int) -> bool:
    """Reap children as they exit, telling orch the shell's status, until orch's end closes.
    Returns whether the shell was reaped."""
    poller = select.poll()
    poller.register(ctl, select.POLLIN)
    poller.register(wake, select.POLLIN)
    reaped = False
    while True:
        for fd, _ in poller.poll():
            if fd == wake:
                _drain(wake)
                status = _reap().get(shell)
                if status is not None:
                    reaped = True
                    if not _send(ctl, b"EXIT %d\n" % status):
                        return reaped
            elif not _read(ctl, 4096):
                return reaped


def _read(ctl: int, size: int) -> bytes:
    """What orch sent, b"" once its end closed. A close with a line of ours unread in it (orch
    interrupted before reading START or EXIT, or killed -9) reads ECONNRESET, not an end: taken
    as one, or the reaper would die of it before stopping what the repro left."""
    try:
        return os.read(ctl, size)
    except OSError:
        return b""


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _reap() -> dict[int, int]:
    """Reap every child that exited: pid -> wait status."""
    reaped: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped[pid] = status


def _finish(shell: int | None, wake: int) -> None:
    """orch's end closed: SIGKILL the repro's group (while its shell runs: once reaped, its pid
    may name another group; what was left in it is under the reaper), and every descendant left
    (orch stopped them already, unless it died), reaping them, for up to FINISH_S; what may not be
    killed (another user's) is left to init."""
    if shell is not None:
        try:
            os.killpg(shell, _signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + FINISH_S
    me = os.getpid()
    while True:
        _reap()
        killed = [pid for pid in descendants(me) if _kill(pid, me)]
        if not killed or time.monotonic() >= deadline:
            return
        select.select([wake], [], [], _POLL_MS / 1000)
        _drain(wake)


def _kill(pid: int, me: int) -> bool:
    """SIGKILL `pid` through a pidfd, if it is still under the reaper once that is open (False:
    nothing sent)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if not under(pid, me):
            return False
        _signal.pidfd_send_signal(fd, _signal.SIGKILL)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


if __name__ == "__main__":
    main(sys.argv)
