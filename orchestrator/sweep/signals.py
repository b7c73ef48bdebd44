"""SIGINT, SIGTERM and SIGHUP as an interrupt: the one place orch installs signal handlers.

Why: a sweep killed by SIGTERM (systemd stop, `kill`, a CI timeout) must restore the hosts just
as Ctrl-C does, so SIGTERM raises Interrupted in the main thread and every `finally` (restore,
lock release, journal close) runs. So does SIGHUP, which the kernel sends when the terminal orch
runs in goes away (an SSH connection dropped, a terminal window closed): its default action ended
orch on the spot, hosts on a cell's flags and the local simulator's servers left running. Its
handler first points stdout and stderr, where they are that terminal, at /dev/null: a write to a
hung-up terminal fails (EIO), and the restore's own messages must not stop the restore.
`nohup orch run ...` starts with SIGHUP ignored and keeps ignoring it (the sweep runs on). A
SIGCHLD ignored by the parent (SIG_IGN survives exec) made subprocess read every exit code as 0
(the kernel reaps the children before Python's wait: each command of the local transport
"succeeded", and the demo was refused at its own testbed lock); inside the block it is the
default again. A
signal *blocked* at start is another matter: a mask is inherited across exec, so a parent that had
blocked SIGTERM in the thread that started orch (a Python scheduler's worker thread) made orch deaf
to `systemctl stop` and `kill`: measured, the sweep ran on. Inside the block they are unblocked.

Signals reach only the main thread, so the handler also sets a `stopping` Event that worker
threads (health pollers, parallel testbeds and the local repros their runners wait on) check. A
background job (`orch run ... &`) starts with SIGINT ignored and keeps ignoring it. Inside an
edges.interrupts.uninterrupted() section (a process being started and recorded) the exception
waits until the section ends.
"""

from __future__ import annotations

import errno
import os
import signal
import termios
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType

from orchestrator.edges.interrupts import raise_now_or_later
from orchestrator.errors import Interrupted

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # each raises Interrupted in the main thread


@contextmanager
def signals_as_interrupt(stopping: threading.Event | None = None, *, sigint: bool = True) -> Iterator[threading.Event]:
    """Inside the block SIGTERM and SIGHUP raise Interrupted and (sigint=True) SIGINT raises
    KeyboardInterrupt, all after setting `stopping` (a new Event when none is given; it is
    yielded). The previous handlers come back on exit. Outside the main thread nothing is
    installed (Python allows handlers only there); the Event still works."""
    event = stopping if stopping is not None else threading.Event()
    previous: dict[signal.Signals, object] = {}
    mask: set[int | signal.Signals] | None = None
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, *STOP_SIGNALS) if sigint else STOP_SIGNALS:
            if sig in (signal.SIGINT, signal.SIGHUP) and signal.getsignal(sig) is signal.SIG_IGN:
                continue  # a background job keeps ignoring Ctrl-C; `nohup orch ...` the hang-up
            previous[sig] = signal.signal(sig, _handler(event))
        if signal.getsignal(signal.SIGCHLD) is signal.SIG_IGN:  # inherited across exec, as SIG_IGN is
            # ignored, the kernel reaps orch's children itself: subprocess then reads every exit code as 0
            # (each local transport command "succeeds"), so it is the default again
            previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # a mask blocking them is inherited across exec (a parent that blocked them in the thread
        # that started orch): blocked, SIGTERM never reached the handler and the sweep ran on
        mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, *STOP_SIGNALS})
    try:
        yield event
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def sigterm_as_interrupt() -> AbstractContextManager[threading.Event]:
    """For a whole command (cli/main.py, the team queue): SIGTERM raises Interrupted so its
    `finally` blocks run; Ctrl-C keeps Python's own KeyboardInterrupt."""
    return signals_as_interrupt(sigint=False)


def _handler(stopping: threading.Event) -> Callable[[int, FrameType | None], None]:
    def handle(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        if signum == signal.SIGINT:
            raise_now_or_later(KeyboardInterrupt())
        elif signum == signal.SIGHUP:
            leave_lost_terminal()
            raise_now_or_later(Interrupted("received SIGHUP: the terminal closed"))
        else:
            raise_now_or_later(Interrupted(f"received {signal.Signals(signum).name}"))

    return handle


def leave_lost_terminal() -> None:
    """Point stdout and stderr at /dev/null where they are a terminal (the one that hung up):
    output to a file or a pipe (`orch run ... > log`) goes on where it went."""
    with open(os.devnull, "wb") as null:
        for fd in (1, 2):
            if _terminal(fd):
                os.dup2(null.fileno(), fd)


def _terminal(fd: int) -> bool:
    """Whether `fd` is a terminal, a hung-up one too: os.isatty says False of those (the kernel
    answers its TCGETS with EIO, where a file or a pipe answers ENOTTY)."""
    try:
        termios.tcgetattr(fd)
    except termios.error as exc:
        return exc.args[0] == errno.EIO
    return True


def interrupted_by(exc: BaseException) -> str:
    """What a run's `run_interrupted` event says stopped it: the signal when the exception is the
    handler's own (`orch status` and the report show it: a closed terminal reads otherwise than a
    Ctrl-C); a thread that saw the stop Event knows only that one came."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by Ctrl-C (SIGINT)"
    said = str(exc)
    return f"interrupted: {said}" if said.startswith("received SIG") else "interrupted by the user or a signal"
