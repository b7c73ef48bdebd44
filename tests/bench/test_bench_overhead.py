"""bench/bench_overhead.py: the measurement arithmetic (pure), and smoke runs of the whole script
on the simulator and on the real testbed with all three tools (orch, Ansible, the bash loop).

The smoke runs check that the figures are printed and sane (each tool measured every trial, the
overhead is what is left of the wall time); they never assert a speed."""

from __future__ import annotations

import fcntl
import os
import re
import sys
from pathlib import Path

import pytest
from helpers.benchrun import bench_module, bench_output

REPO = Path(__file__).resolve().parents[2]


bo = bench_module("bench_overhead.py")


def stamp(epoch: float) -> str:
    from datetime import datetime, timezone

    t = datetime.fromtimestamp(epoch, timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{t.microsecond:06d}Z"


# ----------------------------------------------------------------------------- pure
def test_parse_times_orders_by_trial() -> None:
    spans = bo.parse_times("1 110.5 111.0 0\n0 100.25 100.75 0\n\n")
    assert [(s.trial, s.start, s.end, s.exit_code) for s in spans] == [(0, 100.25, 100.75, 0), (1, 110.5, 111.0, 0)]


def test_parse_events_reads_the_servers_own_timestamps() -> None:
    log = "\n".join(
        [
            f"{stamp(1000.5)} [decode] stopping",
            "-- orch: starting bench-decode --",
            f"{stamp(1000.9)} [decode] sim-0.1 decode listening on 127.0.0.1:1 pid=2 ...",
            f"{stamp(1001.75)} [decode] ready",
            f"{stamp(1001.8)} [decode] decode req=1/0 tool=x ready",  # a request line is not an event
        ]
    )
    events = bo.parse_events(log)
    assert [(round(e.at, 3), e.kind) for e in events] == [(1000.5, "stopping"), (1001.75, "ready")]


def test_measure_subtracts_restart_and_repro_from_the_trial_wall_time() -> None:
    # trial 0: repro 100-101; trial 1: stop 101.2, ready 102.4, repro 102.5-103.0
    spans = bo.parse_times("0 100.0 101.0 0\n1 102.5 103.0 0\n")
    events = [bo.LogEvent(100.5, "ready"), bo.LogEvent(101.2, "stopping"), bo.LogEvent(102.4, "ready")]
    [sample] = bo.measure("t", spans, events, 1)
    assert sample.trial == 1
    assert sample.wall_s == pytest.approx(2.0)
    assert sample.restart_s == pytest.approx(1.2)
    assert sample.repro_s == pytest.approx(0.5)
    assert sample.overhead_s == pytest.approx(0.3)


def test_measure_takes_the_last_stop_before_the_repro() -> None:
    """A tool that restarted twice (e.g. verification restarted again) is measured from the
    last stop: the first restart-to-healthy is the tool's overhead."""
    spans = bo.parse_times("0 0 1 0\n1 9 10 0\n")
    events = [bo.LogEvent(2, "stopping"), bo.LogEvent(3, "ready"), bo.LogEvent(5, "stopping"), bo.LogEvent(7, "ready")]
    [sample] = bo.measure("t", spans, events, 1)
    assert sample.restart_s == pytest.approx(2)
    assert sample.overhead_s == pytest.approx(9 - 2 - 1)


def test_measure_refuses_a_trial_without_a_restart_or_a_failed_repro() -> None:
    spans = bo.parse_times("0 0 1 0\n1 9 10 0\n")
    with pytest.raises(bo.BenchError, match="trial 1: no stop and ready"):
        bo.measure("t", spans, [bo.LogEvent(5, "stopping")], 1)
    with pytest.raises(bo.BenchError, match="failed in trials"):
        bo.measure("t", bo.parse_times("0 0 1 0\n1 9 10 3\n"), [], 1)
    with pytest.raises(bo.BenchError, match="expected repro times"):
        bo.measure("t", bo.parse_times("0 0 1 0\n"), [], 1)


def test_orch_breakdown_splits_the_overhead_into_phases() -> None:
    spans = bo.parse_times("0 0 1 0\n1 4.5 5.5 0\n")
    marks = [bo.TrialMarks(0, -2.0, 1.1), bo.TrialMarks(1, 1.15, 5.6)]
    events = [bo.LogEvent(1.3, "stopping"), bo.LogEvent(4.4, "ready")]
    phases = dict(bo.orch_breakdown(marks, spans, events, 1))
    assert list(phases.values()) == pytest.approx([0.1, 0.05, 0.15, 0.1])
    [sample] = bo.measure("orch", spans, events, 1)
    assert sum(phases.values()) == pytest.approx(sample.overhead_s)


def test_table_and_verdict_show_ratios_against_orch() -> None:
    def summary(tool: str, overhead: float) -> object:
        return bo.Summary(tool, (bo.Sample(1, 2.0 + overhead, 1.5, 0.5),))

    table = bo.format_table([summary("orch", 0.1), summary("ansible", 3.0)])
    assert re.search(r"^orch\s+1\s+2\.100 s\s+1\.500 s\s+0\.500 s\s+0\.100 s\s+0\.100 s\s+1\.0x$", table, re.M)
    assert re.search(r"^ansible\s.*\s3\.000 s\s+3\.000 s\s+30\.0x$", table, re.M)
    lines = bo.verdict([summary("orch", 0.1), summary("ansible", 3.0)])
    assert "orch / Ansible = 0.033 (target: <= 0.1)" in lines


def test_summary_takes_medians_and_the_p90_over_the_trials() -> None:
    """The smoke runs measure one trial a tool; the median and p90 over several are held here."""
    summary = bo.Summary("orch", tuple(bo.Sample(i, 2.0 + i / 10, 1.5, 0.5) for i in range(1, 11)))
    assert summary.median(lambda x: x.overhead_s) == pytest.approx(0.55)
    assert summary.median(lambda x: x.wall_s) == pytest.approx(2.55)
    assert summary.p90(lambda x: x.overhead_s) == pytest.approx(0.91)  # inclusive: 0.1 + 0.9 * 0.9
    table = bo.format_table([summary])
    assert re.search(r"^orch\s+10\s+2\.550 s\s+1\.500 s\s+0\.500 s\s+0\.550 s\s+0\.910 s\s+1\.0x$", table, re.M)


def test_baseline_checkouts_run_first_and_their_figures_sit_beside_orchs(tmp_path: Path) -> None:
    args = bo.parse_args(["--baseline-checkout", f"{REPO}=old", "--baseline-checkout", str(REPO), "--repeat", "2"])
    legs = bo.orch_legs(args)
    assert [leg.name for leg in legs] == ["orch@old", f"orch@{REPO.name}", "orch"]
    assert [leg.checkout for leg in legs] == [REPO, REPO, None]  # None: this checkout, as installed
    assert args.repeat == 2
    with pytest.raises(SystemExit):
        bo.parse_args(["--baseline-checkout", str(tmp_path)])  # no orchestrator/ package there
    merged = bo.merge_breakdowns([[("a", 1.0), ("b", 2.0)], [("a", 3.0), ("b", 4.0)], [("a", 2.0)]])
    assert merged == [("a", 2.0), ("b", 3.0)]

    def summary(tool: str, overhead: float) -> object:
        return bo.Summary(tool, (bo.Sample(1, 2.0 + overhead, 1.5, 0.5),))

    lines = bo.verdict([summary("orch@old", 0.2), summary("orch", 0.1)])
    assert "orch / orch@old = 0.500 (same run; no worse than the baseline: <= 1)" in lines
    table = bo.format_table([summary("orch@old", 0.2), summary("orch", 0.1)])
    assert re.search(r"^orch@old\s.*\s0\.200 s\s+0\.200 s\s+2\.0x$", table, re.M)


def test_orch_matrix_alternates_the_flag_and_runs_at_least_trials_plus_one(tmp_path: Path) -> None:
    from orchestrator.core.config import read_matrix
    from orchestrator.core.matrix import expand, order_trials

    s = bo.Settings(3, 2, 1, 0.2, 0.2, 30, sys.executable, tmp_path)
    (tmp_path / "m.yaml").write_text(bo.matrix_text(s, tmp_path / "times.txt"))
    matrix = read_matrix(tmp_path / "m.yaml")
    trials = order_trials(matrix, expand(matrix), seed=1)
    assert len(trials) >= 4
    assert [t.cell.as_dict()["overlap"] for t in trials[:4]] == ["0", "1", "0", "1"]
    assert "timed_repro.sh" in matrix.repro.command and "--seed {trial}" in matrix.repro.command


# ----------------------------------------------------------------------------- smoke runs
# The smallest run that still prints every figure: 1 measured trial per tool (each tool still
# runs 2, the first absorbing its start-up: the measured trial has a repro before it, a restart
# and a repro of its own; orch's matrix is then 2 trials, not 4), a 0.05 s warm-up (the restart
# still waits for it) and peers polling every 0.05 s (they were 0.2 s and 0.2 s). The medians
# and p90 over several trials are Summary's arithmetic, held by the pure test above. The smoke
# runs never assert a speed.
SMOKE_TRIALS = 1
SMOKE = ("--trials", str(SMOKE_TRIALS), "--sessions", "2", "--warmup", "0.05", "--peer-poll", "0.05")
ROW = r"^{tool}\s+(\d+)\s+([0-9.]+) s\s+([0-9.]+) s\s+([0-9.]+) s\s+(-?[0-9.]+) s\s+(-?[0-9.]+) s\s+([0-9.]+x|-)$"


@pytest.fixture(scope="session")
def ansible_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ansible-core in a private venv, built once per test run by the script's own
    ensure_ansible. Under pytest-xdist the workers share it (in the run's common temp folder):
    the first to get the lock builds it, the others wait, so both smoke runs need not share a worker."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    with open(root / "ansible-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        bo.ensure_ansible(root / "ansible-venv", sys.executable)
    return root / "ansible-venv"


def check_figures(out: str, trials: int, tools: tuple[str, ...]) -> None:
    for tool in tools:
        m = re.search(ROW.format(tool=tool), out, re.M)
        assert m, f"no figures for {tool} in:\n{out}"
        n, wall, restart, repro, overhead = int(m[1]), *(float(m[i]) for i in range(2, 6))
        assert n == trials
        assert restart > 0 and repro > 0
        assert overhead == pytest.approx(wall - restart - repro, abs=0.05)  # medians of a few trials
    assert "orch median overhead" in out and "orch / Ansible = " in out and "orch / bash loop = " in out
    assert "where orch's overhead goes" in out


@pytest.mark.sim
def test_overhead_bench_on_the_simulator_with_all_three_tools(ansible_venv: Path) -> None:
    out = bench_output(
        "bench_overhead.py",
        "--target",
        "sim",
        *SMOKE,
        "--ansible-venv",
        str(ansible_venv),
        timeout=600,
    )
    check_figures(out, SMOKE_TRIALS, ("orch", "ansible", "bash"))


@pytest.mark.testbed
def test_overhead_bench_on_the_ssh_testbed_with_all_three_tools(ansible_venv: Path) -> None:
    from testbed.fixture import require_support

    require_support()
    out = bench_output(
        "bench_overhead.py",
        "--target",
        "testbed",
        *SMOKE,
        "--ansible-venv",
        str(ansible_venv),
        timeout=600,
    )
    assert "testbed booted" in out
    check_figures(out, SMOKE_TRIALS, ("orch", "ansible", "bash"))
