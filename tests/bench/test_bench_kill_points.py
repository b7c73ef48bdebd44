"""bench/bench_kill_points.py's parts that start no process: its kill points take turns over every
phase and replay by seed, and its table tallies kills, promises held and broken per phase. The
kills themselves run in tests/faults/test_kill_points_sim.py (sim)."""

from __future__ import annotations

from helpers.benchrun import bench_module
from helpers.killpoints import PHASES, KillPoint, Outcome

bk = bench_module("bench_kill_points.py")


def test_the_points_aim_at_every_phase_and_replay_by_seed() -> None:
    points = bk.points(len(PHASES), 0, None)
    assert sorted(p.target for p in points) == sorted(PHASES)
    assert [p.seed for p in points] == list(range(len(PHASES)))
    assert bk.points(1, 0, 5) == [points[5]]  # --only SEED draws that iteration again


def test_the_table_counts_each_phase_and_the_broken_promises() -> None:
    point = KillPoint.draw(1)
    outcomes = [
        Outcome(point, landed="health"),
        Outcome(point, landed="health", violations=["after orch restore: decode.env changed"]),
        Outcome(point, landed="restore"),
    ]
    rows = bk.table(outcomes).splitlines()
    assert rows[1:] == [
        "health             2     1      1",
        "restore            1     1      0",
        "all                3     2      1",
    ]
