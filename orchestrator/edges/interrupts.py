"""Sections an interrupt must not split: starting a process and recording that it was started.

Why: orch turns SIGINT and SIGTERM into an exception raised in the main thread, at whatever
bytecode it happens to be running (sweep/signals.py). Landing between `subprocess.Popen`
returning and the caller noting the new pid, it leaves a process nobody knows about: the restore
cannot stop it and the atexit sweep does not see it (a simulated decode server outlived a
SIGTERM'd sweep this way). Inside `uninterrupted()` the signal handler only records the interrupt;
it is raised when the outermost section ends, so the process is either never started or tracked.

Sections must be short (a fork, a few assignments, a small file write): the interrupt waits for
them. Only the main thread counts, because Python runs signal handlers only there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0
_pending: BaseException | None = None


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Defer an interrupt that arrives inside the block until the block has ended."""
    global _depth, _pending
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers never run in other threads: nothing to defer
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _pending is not None:
            exc, _pending = _pending, None
            raise exc


def raise_now_or_later(exc: BaseException) -> None:
    """For a signal handler: raise `exc` now, or when the current uninterrupted() section ends."""
    global _pending
    if _depth > 0 and threading.current_thread() is threading.main_thread():
        if _pending is None:  # the first interrupt is the one to report
            _pending = exc
        return
    raise exc
