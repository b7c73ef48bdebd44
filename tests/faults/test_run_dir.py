"""An unwritable or full run directory: one clear error line, exit != 0, no traceback, a journal
that still reads back, and hosts restored (or never touched, when the problem shows before the
first edit). The full-disk cases use a small tmpfs mounted under tmp_path (root only).
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.store.journal import read_journal

from .helpers import (
    SimBed,
    assert_clean,
    assert_no_traceback,
    count_trials,
    error_lines,
    journal_tally,
    output_of,
    run_cli,
    spawn_orch,
    trial_records,
    wait_for,
)

pytestmark = pytest.mark.sim

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def tmpfs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """mount(size, read_only) -> a fresh tmpfs under tmp_path, unmounted at the end."""
    mounted: list[Path] = []

    def mount(size: str, read_only: bool = False) -> Path:
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        opts = f"size={size},mode=0755" + (",ro" if read_only else "")
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "orch-test", str(where)], check=True)
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        if subprocess.run(["umount", str(where)]).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=True)


def assert_one_error_line(text: str, *needles: str) -> str:
    assert_no_traceback(text)
    lines = error_lines(text)
    assert len(lines) == 1, text
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_out_below_a_file_is_refused_before_any_change(bed: SimBed, capsys) -> None:
    (bed.root / "afile").write_text("not a folder\n")
    out = bed.root / "afile" / "reports"
    done = run_cli(["run", str(bed.matrix), "-i", str(bed.inventory), "--out", str(out), "--run-id", "x"], capsys)
    assert done.code == 2, done.output
    assert_one_error_line(
        done.output, "cannot create run directory", "Not a directory", "a parent of this path is a file"
    )
    assert_clean(bed)  # no lock, no backup, no unit started


@needs_root
def test_out_on_a_read_only_file_system_is_refused_before_any_change(bed: SimBed, tmpfs, capsys) -> None:
    out = tmpfs("1m", read_only=True)
    done = run_cli(["run", str(bed.matrix), "-i", str(bed.inventory), "--out", str(out), "--run-id", "x"], capsys)
    assert done.code == 2, done.output
    assert_one_error_line(done.output, "Read-only file system", "choose another --out")
    assert_clean(bed)


@needs_root
def test_tiny_disk_stops_the_sweep_with_a_clear_error_and_hosts_restored(bed: SimBed, tmpfs, capsys) -> None:
    """40 KiB: the run directory and its manifest fit, the first trial's files do not."""
    out = tmpfs("40k")
    done = run_cli(["run", str(bed.matrix), "-i", str(bed.inventory), "--out", str(out), "--run-id", "x"], capsys)
    assert done.code == 1, done.output
    assert_one_error_line(done.output, "No space left on device", "the disk is full")
    assert "every host was restored" in done.output
    contents = read_journal(out / "x" / "journal.jsonl")  # readable, nothing half-written
    assert not contents.torn_tail
    assert_clean(bed)


@needs_root
def test_disk_filling_up_mid_sweep_then_resume_after_freeing_space(bed: SimBed, tmpfs, capsys) -> None:
    out = tmpfs("8m")
    run_dir = out / "full"
    proc = spawn_orch(bed, ["run", str(bed.matrix), "-i", str(bed.inventory), "--out", str(out), "--run-id", "full"])
    assert wait_for(lambda: count_trials(run_dir) >= 2, 60), output_of(proc)
    filler = fill(out / "filler")
    code = proc.wait(60)
    text = output_of(proc)
    assert code == 1, text
    assert_one_error_line(text, "No space left on device", "free space, then `orch resume` the run")
    assert "every host was restored" in text
    assert_clean(bed)
    contents = read_journal(run_dir / "journal.jsonl")
    assert not contents.torn_tail
    # the full disk is not blamed on a trial: every recorded trial completed
    assert all(t.status == "completed" for t in trial_records(run_dir))

    filler.unlink()
    done = run_cli(["resume", str(run_dir)], capsys)
    assert done.code == 0, done.output
    planned, lost, twice = journal_tally(run_dir)
    assert (planned, lost, twice) == (8, [], [])
    assert_clean(bed)


def fill(path: Path) -> Path:
    """Write zeros until the file system is full."""
    chunk = b"\0" * (64 * 1024)
    with open(path, "wb", buffering=0) as f:  # unbuffered: nothing left to flush (and fail) at close
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return path
