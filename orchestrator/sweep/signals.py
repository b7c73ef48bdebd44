"""SIGINT and SIGTERM as an interrupt: the one place orch installs signal handlers.

Why: a sweep killed by SIGTERM (systemd stop, `kill`, a CI timeout) must restore the hosts just
as Ctrl-C does, so SIGTERM raises Interrupted in the main thread and every `finally` (restore,
lock release, journal close) runs. Signals reach only the main thread, so the handler also sets
a `stopping` Event that worker threads (health pollers, parallel testbeds and the local repros
their runners wait on) check. A background job (`orch run ... &`) starts with SIGINT ignored and
keeps ignoring it. Inside an edges.interrupts.uninterrupted() section (a process being started
and recorded) the exception waits until the section ends.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType

from orchestrator.edges.interrupts import raise_now_or_later
from orchestrator.errors import Interrupted


@contextmanager
def signals_as_interrupt(stopping: threading.Event | None = None, *, sigint: bool = True) -> Iterator[threading.Event]:
    """Inside the block SIGTERM raises Interrupted and (sigint=True) SIGINT raises
    KeyboardInterrupt, both after setting `stopping` (a new Event when none is given; it is
    yielded). The previous handlers come back on exit. Outside the main thread nothing is
    installed (Python allows handlers only there); the Event still works."""
    event = stopping if stopping is not None else threading.Event()
    previous: dict[signal.Signals, object] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM) if sigint else (signal.SIGTERM,):
            if sig == signal.SIGINT and signal.getsignal(sig) is signal.SIG_IGN:
                continue  # a background job keeps ignoring Ctrl-C
            previous[sig] = signal.signal(sig, _handler(event))
    try:
        yield event
    finally:
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
        else:
            raise_now_or_later(Interrupted(f"received {signal.Signals(signum).name}"))

    return handle
