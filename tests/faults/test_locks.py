"""One sweep per testbed: a second `orch run` (or a second `orch resume` of the same run) while
one runs exits 2 naming the holder; a dead owner's lock is reported as stale and taken only with
--break-lock; and a dead run's unrestored hosts are never adopted as "originals" by a new run.
"""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from .helpers import (
    PYTHON,
    ROLES,
    SimBed,
    assert_clean,
    assert_no_traceback,
    count_trials,
    error_lines,
    kill_group,
    matrix_yaml,
    output_of,
    run_cli,
    spawn_orch,
    wait_for,
)

pytestmark = pytest.mark.sim


def one_error(text: str) -> str:
    assert_no_traceback(text)
    lines = error_lines(text)
    assert len(lines) == 1, text
    return lines[0]


def locks(bed: SimBed) -> list[str]:
    return sorted(p.name for p in bed.root.glob("*.orch-lock"))


def test_second_run_and_second_resume_exit_2_naming_the_holder(bed: SimBed, capsys) -> None:
    bed.write_matrix(matrix_yaml(replicates=3))  # long enough to still hold the lock for both attempts
    first = spawn_orch(bed, bed.run_args("first"))
    run_dir = bed.run_dir("first")
    assert wait_for(lambda: count_trials(run_dir) >= 1, 60), output_of(first)
    assert locks(bed) == [f"{r}.env.orch-lock" for r in sorted(ROLES)]

    second = run_cli(bed.run_args("second"), capsys)
    assert second.code == 2, second.output
    line = one_error(second.output)
    assert "testbed 'sim' is locked" in line
    assert "run first by" in line and f"pid {first.pid} on {socket.gethostname()}" in line
    assert not bed.run_dir("second").exists()

    again = run_cli(["resume", str(run_dir)], capsys)  # the same run, twice at once
    assert again.code == 2, again.output
    assert "that run is still running" in one_error(again.output)

    assert first.wait(120) == 0, output_of(first)  # the holder was not disturbed
    assert_clean(bed)


def dead_pid() -> int:
    proc = subprocess.Popen([PYTHON, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_lock_is_reported_and_broken_only_with_break_lock(bed: SimBed, capsys) -> None:
    holder = {
        "run_id": "ghost",
        "user": "nobody",
        "pid": dead_pid(),
        "controller": socket.gethostname(),
        "started": "2026-11-30T03:00:00.000+00:00",
    }
    for role in ROLES:
        (bed.root / f"{role}.env.orch-lock").write_text(json.dumps(holder) + "\n")

    refused = run_cli(bed.run_args("new"), capsys)
    assert refused.code == 2, refused.output
    line = one_error(refused.output)
    assert f"run ghost by nobody (pid {holder['pid']}" in line
    assert "that process is gone (stale lock); rerun with --break-lock to take it" in line
    assert not bed.run_dir("new").exists()

    taken = run_cli(bed.run_args("new", "--break-lock"), capsys)
    assert taken.code == 0, taken.output
    assert_clean(bed)  # the lock was taken over, then released


def test_break_lock_never_adopts_a_dead_runs_unrestored_hosts(bed: SimBed, capsys) -> None:
    bed.write_matrix(matrix_yaml(replicates=1))
    dead = spawn_orch(bed, bed.run_args("dead"))
    dead_dir = bed.run_dir("dead")
    # two trials: the first one's cell is the baseline, byte-identical to the original, so a kill
    # just after it could leave every env file original (then the refusal says that instead)
    assert wait_for(lambda: count_trials(dead_dir) >= 2, 60), output_of(dead)
    kill_group(dead)  # kill -9: hosts left in a cell, lock and host backups left behind

    stale = run_cli(bed.run_args("next"), capsys)
    assert stale.code == 2 and "stale lock" in one_error(stale.output)
    refused = run_cli(bed.run_args("next", "--break-lock"), capsys)
    assert refused.code == 2, refused.output
    line = one_error(refused.output)
    assert "still holds the changes of run dead" in line and f"orch restore {dead_dir}" in line
    assert not bed.run_dir("next").exists()

    restored = run_cli(["restore", str(dead_dir)], capsys)
    assert restored.code == 0, restored.output
    assert_clean(bed, grace_s=15)
    done = run_cli(bed.run_args("next"), capsys)  # no --break-lock needed any more
    assert done.code == 0, done.output
    assert_clean(bed)
