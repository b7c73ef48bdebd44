"""`orch restore RUN_DIR` / `orch resume RUN_DIR` of a run whose hosts were put back already must
not write that run's old backup over what the env files hold now: a host whose host-side backup
(<env>.orch-backup-<run_id>, removed once the host is restored) is gone and whose file changed
since is left as it is by restore (said so, exit 0) and makes resume refuse (exit 2, naming the
host and file). The normal paths still work: restore after a kill -9 restores, twice is
idempotent, resume after a kill -9 and a restore continues. (Ported from a review:
/tmp/review_crash/test_restore_clobbers.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import (
    assert_clean,
    cleanup_processes,
    count_trials,
    journal_tally,
    kill_group,
    make_simbed,
    matrix_yaml,
    output_of,
    run_cli,
    spawn_orch,
    wait_for,
)

pytestmark = pytest.mark.sim

EDIT = b"\nSIM_SEED=8\n"  # what a teammate added to prefill.env after the run was restored


def test_orch_restore_of_a_completed_run_leaves_a_later_edit_alone(tmp_path: Path, capsys) -> None:
    bed = make_simbed(tmp_path / "bed")
    bed.write_matrix(matrix_yaml(replicates=1))
    try:
        done = run_cli(bed.run_args("a"), capsys)
        assert done.code == 0, done.output
        edited = bed.originals["prefill"] + EDIT
        bed.env_file("prefill").write_bytes(edited)
        done = run_cli(["restore", str(bed.run_dir("a"))], capsys)
        assert done.code == 0, done.output
        assert bed.env_file("prefill").read_bytes() == edited, done.output
        assert f"already restored; not touched (the file changed since: {bed.env_file('prefill')})" in done.output
        assert "already restored, not touched: prefill" in done.output
        # the others were restored at the run's end: nothing is done to them (no unit restarted)
        assert "restored already, nothing to do: decode, router" in done.output
        again = run_cli(["restore", str(bed.run_dir("a"))], capsys)
        assert again.code == 0 and bed.env_file("prefill").read_bytes() == edited, again.output
    finally:
        cleanup_processes(bed)


def _killed_then_restored(bed, run_id: str, capsys) -> Path:  # type: ignore[no-untyped-def]
    run_dir = bed.run_dir(run_id)
    proc = spawn_orch(bed, bed.run_args(run_id))  # a real process: it is killed
    assert wait_for(lambda: count_trials(run_dir) >= 1, 120), output_of(proc)
    kill_group(proc)  # kill -9, mid-run: the hosts hold a cell, their host-side backups are there
    done = run_cli(["restore", str(run_dir)], capsys)
    assert done.code == 0, done.output
    assert "not touched" not in done.output, done.output
    assert_clean(bed, grace_s=5)
    return run_dir


def test_resume_after_restore_refuses_when_a_host_was_edited_since(tmp_path: Path, capsys) -> None:
    bed = make_simbed(tmp_path / "bed")
    bed.write_matrix(matrix_yaml(replicates=1))
    try:
        run_dir = _killed_then_restored(bed, "b", capsys)
        edited = bed.originals["prefill"] + EDIT
        bed.env_file("prefill").write_bytes(edited)  # the team changes a flag while the run waits
        done = run_cli(["resume", str(run_dir)], capsys)
        assert done.code == 2, done.output
        assert "cannot resume" in done.output and f"prefill (local): {bed.env_file('prefill')}" in done.output
        assert bed.env_file("prefill").read_bytes() == edited
        bed.env_file("prefill").write_bytes(bed.originals["prefill"])  # put back: now it resumes
        done = run_cli(["resume", str(run_dir)], capsys)
        assert done.code == 0, done.output
        _, lost, twice = journal_tally(run_dir)
        assert not lost and not twice
        assert_clean(bed, grace_s=5)
    finally:
        cleanup_processes(bed)


def test_restore_twice_after_a_kill_then_resume_finishes(tmp_path: Path, capsys) -> None:
    bed = make_simbed(tmp_path / "bed")
    bed.write_matrix(matrix_yaml(replicates=1))
    try:
        run_dir = _killed_then_restored(bed, "c", capsys)
        again = run_cli(["restore", str(run_dir)], capsys)
        assert again.code == 0 and "not touched" not in again.output, again.output
        assert_clean(bed, grace_s=5)
        done = run_cli(["resume", str(run_dir)], capsys)
        assert done.code == 0, done.output
        _, lost, twice = journal_tally(run_dir)
        assert not lost and not twice
        assert_clean(bed, grace_s=5)
    finally:
        cleanup_processes(bed)
