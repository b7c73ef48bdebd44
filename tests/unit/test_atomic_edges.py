"""store.atomic's error wording and its file operations in a run folder (mutation round eleven):
an OSError becomes one JournalError naming the path, the failed step, the reason and, only when
orch knows one, what to do."""

from __future__ import annotations

import errno
import io
import os
import sys
from pathlib import Path

import pytest

from orchestrator.errors import JournalError
from orchestrator.store.atomic import (
    STDOUT,
    fsync_dir,
    run_file_error,
    run_file_op,
    write_bytes_atomic,
    write_text_atomic,
)


def test_an_error_without_an_errno_gets_no_hint(tmp_path: Path) -> None:
    """An OSError with no errno (raised by a library with a message only) is said as it is: the
    permission hint belongs to EPERM (errno 1), never to an unknown cause."""
    said = str(run_file_error(tmp_path / "run.json", "cannot write file", OSError("the NFS server went away")))
    assert said == f"{tmp_path / 'run.json'}: cannot write file: the NFS server went away"
    assert "(" not in said


def test_a_known_errno_gets_its_hint(tmp_path: Path) -> None:
    exc = OSError(errno.EPERM, os.strerror(errno.EPERM))
    said = str(run_file_error(tmp_path, "cannot create folder", exc))
    assert said.endswith(": cannot create folder: Operation not permitted (check the permissions of the run directory)")


def test_a_failed_operation_in_a_run_folder_stops_the_sweep_with_one_error(tmp_path: Path) -> None:
    def full() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(JournalError, match="cannot make the trial folder: No space left on device") as exc:
        run_file_op(tmp_path / "trial-0001", "cannot make the trial folder", full)
    assert "free space, then `orch resume` the run" in str(exc.value)
    assert isinstance(exc.value.__cause__, OSError)
    done: list[bool] = []
    run_file_op(tmp_path, "x", lambda: done.append(True))
    assert done == [True]


def test_a_users_output_over_a_file_or_its_link_is_replaced_whole_not_rewritten_in_place(tmp_path: Path) -> None:
    """`-o report.csv` over an existing file: a new file renamed over it (a reader that opened the
    old one, `tail -f` or a browser, reads the old whole), never the old truncated and rewritten."""
    old = tmp_path / "report.csv"
    link = tmp_path / "latest.csv"
    link.symlink_to(old)
    for name in (old, link):
        old.write_bytes(b"old,data\n")
        with open(old, "rb") as reader:
            write_bytes_atomic(name, b"new,data\n", user_path=True)
            assert reader.read() == b"old,data\n"
        assert old.read_bytes() == b"new,data\n" and link.is_symlink()


def test_a_users_output_named_through_proc_for_a_deleted_file_is_written_in_place(tmp_path: Path) -> None:
    """/dev/stdout -> /proc/self/fd/1 -> a file since deleted: no name to rename over, so it is
    truncated and written where it is (what a shell's `>` of a deleted log does)."""
    gone = tmp_path / "deleted.log"
    gone.write_bytes(b"what was there before\n")
    fd = os.open(gone, os.O_RDWR)
    try:
        gone.unlink()
        write_bytes_atomic(Path(f"/proc/self/fd/{fd}"), b"export\n", user_path=True)
        assert os.pread(fd, 100, 0) == b"export\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temp file beside it
    finally:
        os.close(fd)


def test_a_device_that_refuses_the_write_is_one_error_with_its_hint() -> None:
    """`-o /dev/full`: written in place (a device is never renamed over), and its ENOSPC said."""
    with pytest.raises(JournalError, match="/dev/full: cannot write file: No space left on device \\(the disk is full"):
        write_bytes_atomic(Path("/dev/full"), b"x" * 10, user_path=True)


def test_stdout_gets_the_data_at_once_not_when_python_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    """`orch export -o - | reader`: flushed, so a reader (or a later write on fd 1) gets it now."""
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(raw, buffer_size=1 << 16)))
    write_bytes_atomic(STDOUT, b"trial,cell\n", user_path=True)
    assert raw.getvalue() == b"trial,cell\n"


def test_text_is_written_durably_unless_asked_otherwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    write_text_atomic(tmp_path / "summary.json", "{}\n")
    assert len(synced) == 2  # the file, then its folder
    write_text_atomic(tmp_path / "page.html", "<p>", fsync=False)
    assert len(synced) == 2


def test_making_a_folders_entries_durable_leaves_no_descriptor_open(tmp_path: Path) -> None:
    """Every atomic write ends with it: a sweep writes status.json after each trial, for days."""
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        fsync_dir(tmp_path)
    assert len(os.listdir("/proc/self/fd")) == before
