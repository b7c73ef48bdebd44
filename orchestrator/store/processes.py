"""Is a process still alive? Told by its pid and that pid's start time (STORE, no orch imports).

Why the start time: a pid is reused once its process is gone, so "pid 4242 exists" can be another
process. /proc/<pid>/stat's 22nd field (ticks since boot) tells them apart. A process on another
machine cannot be looked at: it counts as alive, so nothing is ever taken from a live controller.
Used by the status views (store.liveness) and the queue's claims (team.queuestore): one rule.
"""

from __future__ import annotations

import socket


def process_start(pid: int) -> int | None:
    """Start time (ticks since boot) of a live, non-zombie process, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == b"Z":
        return None
    return int(fields[19])


def process_alive(host: str, pid: int, start: int) -> bool:
    """False only when it can be told: the process ran on this machine and is gone (or its pid
    now belongs to another process). One on another machine counts as alive."""
    if host != socket.gethostname():
        return True
    return process_start(pid) == start
