"""The kill-point harness's new kinds (tests/helpers/killmore.py, bench_kill_points.py
--kill-way-back, --command hunt) kept in CI at three seeded points on the simulator:

- `orch resume` SIGKILLed while its own final restore puts a host back (the run SIGKILLed in its
  second trial before): status names the way back, and a second `orch resume` ends with every
  planned trial once, the trials finished before either resume unchanged, hosts restored;
- `orch restore` SIGKILLed while it puts its second host back: status still names the way back,
  and a second `orch restore` leaves every env file byte-identical, no unit, lock or copy;
- `orch hunt` SIGKILLed while a configuration past its first wave collects its logs (its trial not
  journaled, its env file in no plan): `orch resume` refused the hunt (exit 2, "changed, not by
  orch") before hunt-handed.json; now it ends the hunt, that configuration run again, the
  finished ones unchanged, hosts restored (the bench also compares every trial with an
  unsignalled hunt's: too long for CI).

Each point checks every promise of the harness; a broken one fails with the list.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.killmore import hunt_args, hunt_bed, hunt_checks, run_way_back_once
from helpers.killpoints import KillPoint, Outcome, finished_records, landed_in, spawn_traced
from helpers.smallhunt import FLAGS

from faults.helpers import cleanup_processes

pytestmark = pytest.mark.sim

FIRST_WAVE = 6  # the hunt's endpoints and its four single-flag drops
NEW_AT = 15  # the 15th trial of the small hunt (--seed 2) is a configuration the search picked first

# (the run's SIGKILL, the way back's signal, where the latter must land)
WAY_BACK = [
    (
        KillPoint(seed=1, target="repro", nth=2, delay=0.1, signals="KILL", way_back="resume"),
        KillPoint(seed=1, target="host-restore", nth=2, delay=0.0, signals="KILL", way_back="resume"),
        "host-restore",
    ),
    (
        KillPoint(seed=2, target="repro", nth=2, delay=0.1, signals="KILL", way_back="restore"),
        KillPoint(seed=2, target="host-restore", nth=2, delay=0.0, signals="KILL", way_back="restore"),
        "host-restore",
    ),
]


@pytest.mark.parametrize(("first", "point", "landed"), WAY_BACK, ids=lambda v: getattr(v, "way_back", None))
def test_the_way_back_killed_then_run_again_breaks_no_promise(
    tmp_path: Path, first: KillPoint, point: KillPoint, landed: str
) -> None:
    out = run_way_back_once(tmp_path, first, point)
    assert out.landed == landed, f"{point.at}: landed in {out.landed}, not {landed}"
    assert not out.violations, f"{point.at} landed in {out.landed}:\n" + "\n".join(out.violations)


def test_a_hunt_killed_in_a_new_configurations_trial_resumes_and_runs_it_again(tmp_path: Path) -> None:
    bed = hunt_bed(tmp_path / "bed")
    point = KillPoint(seed=0, target="logs", nth=NEW_AT, delay=0.0, signals="KILL", way_back="resume")
    out = Outcome(point)
    try:
        out.exit_code = spawn_traced(bed, point, "k", hunt_args(bed)).wait(120)
        out.landed = landed_in(bed.root / "trace")
        assert out.landed == "logs/metrics", f"{point.at}: landed in {out.landed}"
        run_dir = bed.run_dir("k")
        killed = max(int(p.name[:4]) for p in (run_dir / "trials").iterdir())  # the trial it was running
        decode = dict(line.split("=", 1) for line in bed.env_file("decode").read_text().splitlines())
        cell = ",".join(f"{f}={('off', 'on')[decode[f'HUNT_{f.upper()}'] == '1']}" for f in FLAGS)
        tried = {r.cell for r in finished_records(run_dir).values()}
        # the point is one the fix is about: past the first wave, a configuration not tried before
        assert killed >= FIRST_WAVE and killed not in finished_records(run_dir) and cell not in tried, (killed, cell)
        assert not (broken := hunt_checks(bed, point, out, None)), f"{point.at}:\n" + "\n".join(broken)
        assert cell in {r.cell for t, r in finished_records(run_dir).items() if t >= killed}  # asked for again
    finally:
        cleanup_processes(bed)
