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
    """Alive: not a zombie waiting to be reaped (it runs nothing), nor dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split(" ", 1)[0] not in ("Z", "X")


def stop_running(pids: list[int]) -> list[int]:
    """Those of `pids` still running, each SIGKILLed then (kill_by_pid), so a test that fails on
    them leaves none behind."""
    running = [pid for pid in pids if pid_running(pid)]
    for pid in running:
        kill_by_pid(pid)
    return running


def wait_for_lines(path: Path, n: int, timeout: float = 5.0) -> None:
    """Until `path` holds at least `n` words (pids a shell wrote there); AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().split()) >= n:
            return
        time.sleep(0.01)
    raise AssertionError(f"{path} never got {n} lines")


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
