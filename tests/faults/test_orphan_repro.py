"""kill -9 of the controller while a repro runs: the repro (its own session, started by orch) is
orphaned, and only the dead controller enforced its timeout. `orch resume` and `orch restore` must
stop it (its process group is recorded in trials/NNNN/repro.pid) before they do anything else,
and the re-run trial's output and metrics must be the re-run's own, never the orphan's.
(Ported from a review: /tmp/review_crash/test_orphan_repro.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from orchestrator.edges.workload import stop_recorded_group

from .helpers import (
    assert_no_traceback,
    cleanup_processes,
    journal_tally,
    kill_group,
    make_simbed,
    matrix_yaml,
    output_of,
    pid_running,
    run_cli,
    spawn_orch,
    trial_records,
)

pytestmark = pytest.mark.sim

SCRIPT = textwrap.dedent("""\
    #!/bin/sh
    # $1 = trial number, $2 = marker dir. The run's very first repro: a slow workload (it prints
    # progress, then its summary after $3 s). Any later attempt: clean (0/6); the rerun of that
    # first trial takes 6 s (so an orphan that survived would write into it), the others none.
    m="$2/first"
    if mkdir "$2/lock" 2>/dev/null; then
      echo "$$ $1" > "$m"
      i=0; while [ $i -lt 40 ]; do echo "session $i: progress line ........................"; i=$((i+1)); done
      sleep "$3"
      echo "CORRUPTION sessions: 6/6 (from the FIRST, orphaned attempt)"
      echo "wall=$3s"
    else
      read -r _ first_trial < "$m"
      if [ "$1" = "$first_trial" ]; then sleep 6; fi
      echo "CORRUPTION sessions: 0/6"
      echo "wall=1s"
    fi
""")


def _setup(tmp_path: Path, first_sleep: float, timeout: float):  # type: ignore[no-untyped-def]
    bed = make_simbed(tmp_path / "bed")
    marks = bed.root / "marks"
    marks.mkdir()
    (bed.root / "repro.sh").write_text(SCRIPT)
    cmd = f"sh {bed.root}/repro.sh {{trial}} {marks} {first_sleep}"
    bed.write_matrix(matrix_yaml(replicates=1, command=cmd, timeout=timeout))
    return bed, marks


def _kill_when_first_repro_runs(bed, marks, run_id):  # type: ignore[no-untyped-def]
    """SIGKILL the controller and the reaper its repro runs under (edges.reaper) at once, as a
    cgroup kill or the OOM killer may: the reaper alone would stop the repro as soon as the
    controller's end of their socket closed, and these tests are about what the record is for.
    The reaper is stopped first (SIGSTOP) so that it cannot act between the two kills; its death
    kills the repro's shell (PR_SET_PDEATHSIG), as the controller's death did before the reaper."""
    proc = spawn_orch(bed, bed.run_args(run_id))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        m = marks / "first"
        if m.exists() and m.read_text().strip():
            time.sleep(0.3)
            pid, trial = m.read_text().split()
            reaper = _reaper_of(int(pid))
            os.kill(reaper, signal.SIGSTOP)
            kill_group(proc)
            os.kill(reaper, signal.SIGKILL)
            return int(trial), int(pid)
        time.sleep(0.02)
    raise AssertionError(output_of(proc))


def _reaper_of(pid: int) -> int:
    """The repro's reaper: the nearest ancestor of `pid` that runs edges.reaper_process."""
    for _ in range(10):
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if b"reaper_process" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    raise AssertionError(f"no reaper above pid {pid}")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group `pgid`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def _kill_orphan(orphan: int | None) -> None:
    if orphan:
        try:
            os.killpg(orphan, signal.SIGKILL)  # our own repro's group (it leads its session)
        except ProcessLookupError:
            pass


def test_orphaned_repro_of_a_killed_controller_is_stopped_by_resume(tmp_path: Path, capsys) -> None:
    bed, marks = _setup(tmp_path, first_sleep=600, timeout=8)  # a hung workload, 8 s timeout
    orphan = None
    try:
        trial, orphan = _kill_when_first_repro_runs(bed, marks, "o1")
        t_orphan = time.monotonic()
        run_dir = bed.run_dir("o1")
        assert (run_dir / "trials" / f"{trial:04d}" / "repro.pid").exists()  # recorded while it runs
        done = run_cli(["resume", str(run_dir)], capsys)
        assert done.code == 0, done.output
        assert f"trial {trial:04d}: stopped its repro" in done.output, done.output
        planned, lost, twice = journal_tally(run_dir)
        assert not lost and not twice
        done = run_cli(["restore", str(run_dir)], capsys)
        assert done.code == 0, done.output
        # gone as soon as resume and restore have finished (resume stops the group and waits until
        # it is gone): no waiting out the repro's 8 s timeout, which would let a process that
        # outlived resume by a few seconds pass
        assert not pid_running(orphan), (
            f"repro pid {orphan} started by the killed controller is still running "
            f"{time.monotonic() - t_orphan:.0f} s later (timeout 8 s), after resume and restore"
        )
        # the whole group, not only its leader (its `sleep 600` child is not reached by PDEATHSIG)
        assert not group_members(orphan), f"repro group {orphan} still has {group_members(orphan)}"
        assert not list(run_dir.glob("trials/*/repro.pid")), "a repro.pid outlived its repro"
    finally:
        _kill_orphan(orphan)
        cleanup_processes(bed)


def test_orphaned_repro_is_stopped_by_restore(tmp_path: Path, capsys) -> None:
    bed, marks = _setup(tmp_path, first_sleep=600, timeout=8)
    orphan = None
    try:
        trial, orphan = _kill_when_first_repro_runs(bed, marks, "o3")
        done = run_cli(["restore", str(bed.run_dir("o3"))], capsys)
        assert done.code == 0, done.output
        assert f"trial {trial:04d}: stopped its repro" in done.output, done.output
        assert not group_members(orphan), f"repro group {orphan} still has {group_members(orphan)}"
    finally:
        _kill_orphan(orphan)
        cleanup_processes(bed)


def test_orphaned_repro_never_writes_into_the_rerun_trials_output_or_metric(tmp_path: Path, capsys) -> None:
    bed, marks = _setup(tmp_path, first_sleep=7, timeout=60)
    orphan = None
    try:
        trial, orphan = _kill_when_first_repro_runs(bed, marks, "o2")
        done = run_cli(["resume", str(bed.run_dir("o2"))], capsys)
        assert done.code == 0, done.output
        assert_no_traceback(done.output)
        rec = [r for r in trial_records(bed.run_dir("o2")) if r.trial == trial and r.status == "completed"]
        assert len(rec) == 1 and rec[0].repro is not None
        # the rerun has a folder of its own (store.attempts); the killed attempt's keeps its output
        assert rec[0].repro.stdout_path == f"trials/{trial:04d}-attempt2/repro.out", rec[0].repro.stdout_path
        cut_off = (bed.run_dir("o2") / "trials" / f"{trial:04d}" / "repro.out").read_bytes()
        assert b"session 0: progress line" in cut_off, cut_off[-160:]
        out = (bed.run_dir("o2") / rec[0].repro.stdout_path).read_bytes()
        corr = rec[0].metrics["corruption"]
        # the resumed attempt printed 0/6; the journal must say so, and its output file must be its own
        assert b"FIRST" not in out, f"the orphan's output is in the rerun's repro.out: {out[-160:]!r}"
        assert getattr(corr, "k", None) == 0, f"trial {trial}: journaled {corr} (the orphan's 6/6)"
    finally:
        _kill_orphan(orphan)
        cleanup_processes(bed)


@pytest.mark.process
def test_a_recorded_group_is_stopped_only_when_its_leader_has_the_recorded_start_time(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 600 & sleep 600"], start_new_session=True)
    record = tmp_path / "repro.pid"
    try:
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
        record.write_text(f"{proc.pid} {ticks + 1}\n")  # a reused pid: another process, another start
        assert stop_recorded_group(record) is None
        assert proc.poll() is None and not record.exists()
        record.write_text(f"{proc.pid} {ticks}\n")
        assert stop_recorded_group(record) == proc.pid
        proc.wait(5)
        assert not group_members(proc.pid) and not record.exists()
        assert stop_recorded_group(record) is None  # nothing recorded: nothing to do
    finally:
        _kill_orphan(proc.pid)
        proc.wait(5)
