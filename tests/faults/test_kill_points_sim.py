"""The kill-point harness (tests/helpers/killpoints.py, bench/bench_kill_points.py) kept in CI at
three seeded points of a real sweep on the simulator (2 factors, 1 replicate: 4 trials):

- SIGKILL the moment the run folder exists (testbed locked, nothing backed up), then `orch restore`:
  status says stale and names both ways back (the folder had no status.json then: not listed);
- SIGKILL inside a host file's write (its temp file made, not yet renamed), then `orch resume`:
  every trial once, each one journaled before the kill unchanged in the report;
- SIGTERM while the runs index is written as the run starts: exit 130, no host touched, then `orch
  resume` runs every trial (the SIGTERM was swallowed there as a failure to write the index: the
  sweep ran all its trials and exited 0).

Each point checks every promise of the harness; a broken one fails with the list.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.killpoints import KillPoint, run_once

pytestmark = pytest.mark.sim

# each point, and the phase its signal must land in (the last phase mark before it)
POINTS = [
    (KillPoint(seed=0, target="run-folder", nth=1, delay=0.0, signals="KILL", way_back="restore"), "run-folder"),
    (KillPoint(seed=2, target="host-write", nth=8, delay=0.0, signals="KILL", way_back="resume"), "write:restart"),
    (KillPoint(seed=3, target="index", nth=1, delay=0.0, signals="TERM", way_back="resume"), "index"),
]


def _id(value: object) -> str:
    return f"{value.signals}-{value.target}" if isinstance(value, KillPoint) else str(value)


@pytest.mark.parametrize(("point", "landed"), POINTS, ids=_id)
def test_a_signal_at_a_seeded_point_breaks_no_promise(tmp_path: Path, point: KillPoint, landed: str) -> None:
    out = run_once(tmp_path, point, replicates=1)
    assert out.landed == landed, f"{point.at}: landed in {out.landed}, not {landed}"
    assert not out.violations, f"{point.at} landed in {out.landed}:\n" + "\n".join(out.violations)
