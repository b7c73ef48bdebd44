"""A queue controller for the PostgreSQL tests, run as its own process: the real `run_queue` and
the real PgQueue, with a cheap fake sweep (where the sweep is not the point).

    python pg_controller.py URL REPORTS LOG [HEARTBEAT_S]

Each item's matrix path says how long its sweep takes: /m/s2.5-name.yaml sleeps 2.5 s (a resumed
item sleeps 0.1 s). The sweep appends `<monotonic> <event> <item> <testbeds> <pid>` lines to LOG
(start, resume, done); a new item gets a run directory with a run.json, so it can be resumed.
On exit it prints JSON: exit code, backend pids seen (first, last), `lost`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Callable

from orchestrator.team.queue import QueueItem, SweepOutcome, run_queue
from orchestrator.team.queuestore_pg import PgQueue


def main() -> int:
    url, reports, log = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    heartbeat = float(sys.argv[4]) if len(sys.argv) > 4 else 0.2
    queue = PgQueue(url, heartbeat_s=heartbeat, reconnect_s=20)
    pids = [queue._conn.info.backend_pid]

    def write(event: str, item: QueueItem) -> None:
        line = f"{time.monotonic():.6f} {event} {item.id} {','.join(item.testbeds)} {os.getpid()}\n"
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def sweep(item: QueueItem, deadline: float | None, record: Callable[[Path], None]) -> SweepOutcome:
        resumed = item.resumable_run
        run_dir = resumed or reports / f"run-{item.id}"
        if resumed is None:
            # a controller killed before record() left the folder but not its place in the queue:
            # the next one starts the item afresh in it
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "run.json").write_text("{}")
            record(run_dir)
        # logged once the queue knows the run directory: a test that kills on "start" kills a
        # controller whose item is resumable, as a real sweep's is once its run.json exists
        write("resume" if resumed else "start", item)
        time.sleep(0.1 if resumed else float(Path(item.matrix).stem.split("-")[0][1:]))
        pids.append(queue._conn.info.backend_pid)
        write("done", item)
        return SweepOutcome("completed", 0, run_dir, f"done by {os.getpid()}")

    try:
        result = run_queue(queue, sweep)
    except KeyboardInterrupt:  # what PgQueue's on_lost does to a sweep it must stop
        queue.close()
        print(json.dumps({"exit": 130, "pids": pids, "lost": queue.lost, "ran": 0}))
        return 130
    queue.close()
    print(json.dumps({"exit": result.exit_code, "pids": pids, "lost": queue.lost, "ran": len(result.ran)}))
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
