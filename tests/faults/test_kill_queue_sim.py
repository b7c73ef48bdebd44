"""`orch queue run` signalled (tests/helpers/killqueue.py, bench_kill_points.py --command queue)
kept in CI at four points on the simulator, a queue of two sweeps of 4 trials each:

- SIGTERM in the queue's record of a finished sweep (its transaction): the item was left stored
  `running`, claimed by the runner that had exited, until the next `queue run` took it back and
  resumed a finished run; now it is recorded completed, the second item still queued;
- SIGTERM just as a claim has committed (its result on the way back to the loop): the item was
  left claimed the same way; now it is put back, queued;
- SIGKILL while a new run is announced (the runs index written, its folder made, its testbed
  locked): the item named no run, so the next `queue run` started it anew into the dead run's
  stale lock and refused both items (exit 1, night after night); now the item names its folder
  from the moment it exists, and the next `queue run` resumes it;
- SIGKILL once the testbed is locked, before the run's folder is made: the lock named a run whose
  folder never appeared, and the next `queue run` refused both items over it (exit 1, night after
  night); now the item names that run from before the lock, and the next `queue run` starts it
  again under its id, taking over its own dead start's lock (and saying so).

Each point then runs the queue again and checks every promise: each item completed exactly once
(one run folder with trials, every planned trial once, trials finished before the signal
unchanged), `orch queue list` and `orch status` telling the truth at each step, env files
byte-identical, nothing left. A broken one fails with the list.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.killpoints import KillPoint
from helpers.killqueue import QueueReference, run_queue_once

pytestmark = pytest.mark.sim

NO_REFERENCE = QueueReference({}, 0, {})  # the bench compares the trials with a reference queue's: too long here
POINTS = [
    (KillPoint(1, "finish", 1, 0.0, "TERM", "queue"), "finish"),
    (KillPoint(2, "claimed", 1, 0.0, "TERM", "queue"), "item start"),
    (KillPoint(3, "index", 1, 0.0, "KILL", "queue"), "index"),
    (KillPoint(4, "locked", 1, 0.0, "KILL", "queue"), "locked"),
]


@pytest.mark.parametrize(("point", "landed"), POINTS, ids=lambda v: getattr(v, "at", None))
def test_the_queue_signalled_then_run_again_breaks_no_promise(tmp_path: Path, point: KillPoint, landed: str) -> None:
    out = run_queue_once(tmp_path, point, NO_REFERENCE)
    assert out.landed == landed, f"{point.at}: landed in {out.landed}, not {landed}"
    assert not out.violations, f"{point.at} landed in {out.landed}:\n" + "\n".join(out.violations)
