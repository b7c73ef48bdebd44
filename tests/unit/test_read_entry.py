"""Transport.read_entry: an env file's bytes and what the path is (missing, a symlink and where to,
mode and owner), in one read, for the restore to tell a deleted or relinked file from the one the
run began with (sweep.drift). The local transport on real files; the SSH transport's answer as its
parser reads it (its script runs on real hosts in tests/remote/test_restore_drift_ssh.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.edges.transport import FileEntry
from orchestrator.edges.transport.local import LocalTransport
from orchestrator.edges.transport.ssh import parse_entry
from orchestrator.errors import ConfigError


def test_local_read_entry_tells_a_file_a_link_a_dangling_link_and_nothing(tmp_path: Path) -> None:
    t = LocalTransport("ctl")
    env = tmp_path / "decode.env"
    env.write_bytes(b"K=1\n")
    env.chmod(0o640)
    uid, gid = os.getuid(), os.getgid()
    assert t.read_entry(str(env)) == FileEntry(b"K=1\n", None, 0o640, uid, gid)
    (tmp_path / "link.env").symlink_to("decode.env")
    assert t.read_entry(str(tmp_path / "link.env")) == FileEntry(b"K=1\n", "decode.env", 0o640, uid, gid)
    (tmp_path / "dangling.env").symlink_to("gone.env")
    assert t.read_entry(str(tmp_path / "dangling.env")) == FileEntry(None, "gone.env")
    assert t.read_entry(str(tmp_path / "missing.env")) == FileEntry(None)
    os.mkfifo(tmp_path / "fifo.env")
    # the path itself: said what it is, never opened (a FIFO blocks its reader); the restore moves
    # it aside (sweep.drift, `special`). Through a link it is still refused, as read_bytes does.
    assert t.read_entry(str(tmp_path / "fifo.env")) == FileEntry(None, special="a FIFO")
    (tmp_path / "dir.env").mkdir()
    assert t.read_entry(str(tmp_path / "dir.env")) == FileEntry(None, special="a directory")
    (tmp_path / "to-fifo.env").symlink_to("fifo.env")
    with pytest.raises(ConfigError, match="not a regular file"):
        t.read_entry(str(tmp_path / "to-fifo.env"))


def test_the_ssh_answer_is_parsed_byte_for_byte() -> None:
    data = b"K=\xff\r\norch-file 1 2 3\n"  # bytes that look like a header inside the file stay data
    assert parse_entry(b"orch-file 640 0 12\n" + data) == FileEntry(data, None, 0o640, 0, 12)
    assert parse_entry(b"orch-link /etc/team.env\norch-file 644 0 0\nT=1\n") == FileEntry(
        b"T=1\n", "/etc/team.env", 0o644, 0, 0
    )
    assert parse_entry(b"orch-link gone.env\norch-missing\n") == FileEntry(None, "gone.env")
    assert parse_entry(b"orch-missing\n") == FileEntry(None)
    assert parse_entry(b"orch-special fifo\n") == FileEntry(None, special="a FIFO")  # stat -c %F
    assert parse_entry(b"orch-special directory\n") == FileEntry(None, special="a directory")
    assert parse_entry(b"orch-special character special file\n") == FileEntry(None, special="a device")
    assert parse_entry(b"orch-file 644 0\nK=1\n") is None  # not one of its answers
    assert parse_entry(b"Welcome to the host\norch-missing\n") is None


def test_reading_a_small_env_file_allocates_about_its_size_not_the_cap(tmp_path: Path) -> None:
    """f.read(64 MiB + 1) allocated the whole cap before reading a 4 KiB file: under an
    address-space limit (ulimit -v) the restore's read raised MemoryError and left the hosts as
    the sweep had edited them. The file is read in pieces, each at most what is left to read."""
    import tracemalloc

    env = tmp_path / "decode.env"
    env.write_bytes(b"K=1\n" * 1024)
    t = LocalTransport("ctl")
    tracemalloc.start()
    try:
        assert t.read_bytes(str(env)) == env.read_bytes()
        assert t.read_entry(str(env)).data == env.read_bytes()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"{peak:,} bytes allocated to read a 4 KiB file"
