"""`python -m helpers.killtrace ORCH-ARGS`: the orch CLI with phase marks, and a signal sent to
itself at a chosen moment (the kill-point harness, helpers/killpoints.py).

Each phase of the controller (backup, env writes, restarts, health waits, the repro, log
collection, journaling, the final restore, the report) writes one line to ORCH_KILLTRACE_FILE as
it begins and as it ends: one O_APPEND write, in the kernel before the next instruction, so a
SIGKILL never loses the mark of where it landed. ORCH_KILLTRACE_AT=`PHASE:NTH:DELAY:SIGNALS`
sends SIGNALS (`KILL`, `TERM`, `INT`, or `INT+INT@0.3`: a second one 0.3 s after the first) DELAY
seconds after the NTH start of PHASE, from a timer thread in the controller itself: a window of a
millisecond (an env file's write) is hit as surely as one of a second, which a poll from outside
cannot do. The mark `signal SIG` is written just before each signal. Nothing in orchestrator/ is
changed: the wrappers are put on the classes here, before the CLI runs.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

_FD: int | None = None
_SEEN: Counter[str] = Counter()
_AT: tuple[str, int, float, list[tuple[float, signal.Signals]]] | None = None
_T0 = time.monotonic()


def mark(name: str) -> None:
    """One line `SECONDS NAME` (seconds since the interpreter started); arms the signal timer at
    the chosen start of the chosen phase."""
    if _FD is not None:
        os.write(_FD, f"{time.monotonic() - _T0:.4f} {name}\n".encode())
    _SEEN[name] += 1
    if _AT is not None and name == _AT[0] and _SEEN[name] == _AT[1]:
        _arm(_AT[2], _AT[3])


def _arm(delay: float, signals: list[tuple[float, signal.Signals]]) -> None:
    def fire() -> None:
        last = 0.0
        for at, sig in signals:
            time.sleep(max(0.0, at - last))
            last = at
            mark(f"signal {sig.name}")
            os.kill(os.getpid(), sig)

    if delay <= 0 and len(signals) == 1 and signals[0][0] == 0:
        fire()  # at the very start of the phase, before its first instruction
        return
    timer = threading.Timer(delay, fire)
    timer.daemon = True
    timer.start()


def parse_at(text: str) -> tuple[str, int, float, list[tuple[float, signal.Signals]]]:
    """`health:3:0.12:INT+INT@0.3` -> ("health", 3, 0.12, [(0, SIGINT), (0.3, SIGINT)])."""
    phase, nth, delay, sigs = text.split(":")
    signals = []
    for part in sigs.split("+"):
        name, _, after = part.partition("@")
        signals.append((float(after or 0), signal.Signals[f"SIG{name}"]))
    return phase, int(nth), float(delay), signals


def traced(cls: Any, method: str, begin: str, end: str | None) -> None:
    """Wrap cls.method: mark `begin` when it is called and `end` when it returns or raises."""
    fn: Callable[..., Any] = getattr(cls, method)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        mark(begin)
        try:
            return fn(*args, **kwargs)
        finally:
            if end is not None:
                mark(end)

    setattr(cls, method, wrapper)


def install() -> None:
    from orchestrator.edges import lock
    from orchestrator.edges.transport import local
    from orchestrator.report import site
    from orchestrator.sweep import api, hosts, phases, runner, session
    from orchestrator.team import livestatus, overnight, queue

    # a file written on a host (an env file, a backup copy): its temp file exists from here to the
    # rename, the narrowest window a kill can land in
    traced(local, "_fill", "host-write", None)
    traced(local.LocalTransport, "write_bytes_atomic", "host-write-start", "host-written")

    traced(session, "create_run_dir", "run-dir", "run-folder")  # the run exists from here on
    traced(site, "write_index", "index", None)  # the runs index: as the run starts, and after its report
    traced(hosts.HostGuard, "backup", "backup", "backed-up")
    traced(phases.Services, "apply", "env-write", "env-written")
    traced(phases.Services, "restart", "restart", "restarted")
    traced(phases.Services, "wait_healthy", "health", "verify")
    traced(phases.Repro, "run", "repro", "checks")
    traced(phases.Repro, "collect_logs", "logs", None)  # beside the checks, in a thread
    traced(runner.Runner, "_record", "journal", "next-trial")
    traced(runner.Runner, "restore", "restore", "restored")
    traced(api, "_write_report", "report", "reported")
    traced(livestatus.LiveStatus, "_write", "status", "status-written")  # status.json: start, trials, restore
    # the way back (`orch resume`, `orch restore`): the testbed lock taken, the killed controller's
    # repro stopped, the journal's torn tail repaired, the originals it saved read back
    traced(lock.TestbedLock, "acquire", "lock", "locked")
    traced(api, "stop_orphaned_repros", "orphans", None)
    traced(api, "_take_up", "take-up", "taken-up")
    traced(runner.Runner, "adopt_backup", "adopt", "adopted")
    traced(hosts.HostGuard, "_restore_host", "host-restore", "host-restored")
    # `orch queue run` (helpers/killqueue.py): an item claimed, its sweep (prepare, then the run or
    # the resume), the queue's record of how it ended, and from there to the next claim
    traced(queue.Queue, "claim", "claim", "claimed")
    traced(overnight.QueueSweep, "__call__", "item", "item-ended")
    traced(queue.Queue, "finish", "finish", "between")


def main() -> int:
    global _FD, _AT
    path = os.environ.get("ORCH_KILLTRACE_FILE")
    if path:
        _FD = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    at = os.environ.get("ORCH_KILLTRACE_AT")
    _AT = parse_at(at) if at else None
    mark("spawn")
    install()
    from orchestrator.cli.main import main as orch_main

    return orch_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
