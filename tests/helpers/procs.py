"""Processes a test started or must clean up after, found and stopped by pid: whether one is alive,
which live processes mention our ports or folders, and the last-resort SIGKILL."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def pid_running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split(" ", 1)[0] != "Z"


def processes_mentioning(needles: list[str]) -> list[tuple[int, str]]:
    """Live processes whose command line (arguments joined by spaces, one after the last) contains
    any needle (our ports, our tmp dir)."""
    found = []
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd and any(n in cmd for n in needles) and pid_running(int(entry.name)):
            found.append((int(entry.name), cmd))
    return found


def kill_by_pid(pid: int) -> None:
    """SIGKILL a process, or its whole process group when it leads one (a unit and its children)."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@contextmanager
def set_once(stop: threading.Event, ready: Callable[[], bool], timeout_s: float = 20.0) -> Iterator[None]:
    """Inside the block, `stop` is set (a Ctrl-C as the runner passes it on) once `ready()` holds,
    e.g. once a repro's daemon runs; bounded, so a repro that never starts cannot hang the test.
    On leaving, `stop` is set and the watcher joined."""

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while not stop.is_set() and not ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
