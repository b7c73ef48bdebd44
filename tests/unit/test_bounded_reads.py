"""core.bounded's promise, file by file: a user-named path that is no regular file (a FIFO, a
directory, /dev/null), is missing, cannot be read, or is over its cap is refused with its name
(ConfigError, exit 2), never read, waited on or loaded; a refusal leaves no file descriptor open;
bounded_or_why says the same in few words for a view. (Mutation round six: each test failed on a
mutant that the fuzz tests let through.)"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from orchestrator.core import bounded
from orchestrator.core.bounded import MiB, bounded_or_why, check_regular, read_bounded_bytes, read_bounded_text
from orchestrator.errors import ConfigError


def _refusal(path: Path, cap: int = MiB) -> str:
    with pytest.raises(ConfigError) as caught:
        read_bounded_text(path, cap, "matrices/m.yaml")
    assert caught.value.exit_code == 2 and caught.value.file == "matrices/m.yaml"
    return str(caught.value)


def _fifo(tmp_path: Path) -> Path:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return fifo


def test_a_file_at_its_cap_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_bytes(b"x" * 100)
    assert read_bounded_bytes(f, 100) == b"x" * 100
    f.write_bytes(b"x" * 101)
    assert _refusal(f, 100) == "matrices/m.yaml: file is larger than 100 bytes (is this the right file?)"
    f.write_bytes(b"x" * (MiB + 1))
    assert _refusal(f) == "matrices/m.yaml: file is larger than 1 MiB (is this the right file?)"


def test_what_is_no_regular_file_is_refused_by_its_kind_not_read(tmp_path: Path) -> None:
    """/dev/null would read as an empty matrix, a FIFO as 'cannot read' (or wait), a directory
    as 'Is a directory': each is named for what it is."""
    assert _refusal(Path("/dev/null")).startswith("matrices/m.yaml: not a regular file (a device)")
    assert _refusal(_fifo(tmp_path)).startswith("matrices/m.yaml: not a regular file (a FIFO)")
    assert _refusal(tmp_path).startswith("matrices/m.yaml: not a regular file (a directory)")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_refused_file_leaves_no_descriptor_open(tmp_path: Path) -> None:
    fifo, big = _fifo(tmp_path), tmp_path / "big"
    big.write_bytes(b"x" * 11)
    before = _open_fds()
    for _ in range(20):
        for path in (fifo, big, Path("/dev/null")):
            with pytest.raises(ConfigError):
                read_bounded_bytes(path, 10)
    assert _open_fds() == before


def test_a_read_that_fails_is_refused_with_its_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("a: 1\n")

    def broken(fd: int, n: int) -> bytes:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(bounded.os, "read", broken)
    assert _refusal(f) == "matrices/m.yaml: cannot read: Input/output error"


def test_check_regular_names_a_missing_file_and_a_fifo_without_opening_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        check_regular(tmp_path / "none.yaml", "inventory/none.yaml")
    assert str(caught.value) == "inventory/none.yaml: file not found"
    with pytest.raises(ConfigError) as caught:
        check_regular(_fifo(tmp_path))  # would block forever if opened
    assert "not a regular file (a FIFO)" in str(caught.value) and caught.value.exit_code == 2
    f = tmp_path / "ok.yaml"
    f.write_text("a: 1\n")
    check_regular(f)


def test_bounded_or_why_says_why_in_few_words(tmp_path: Path) -> None:
    f = tmp_path / "run.json"
    f.write_bytes(b"{}")
    assert bounded_or_why(f, MiB, "run.json") == b"{}"
    assert bounded_or_why(tmp_path / "none", MiB, "run.json") is None
    assert bounded_or_why(f / "child", MiB, "run.json") == "cannot read: Not a directory"
    assert bounded_or_why(_fifo(tmp_path), MiB, "run.json") == "not a regular file (a FIFO)"
    f.write_bytes(b"x" * (MiB + 1))
    assert bounded_or_why(f, MiB, "run.json") == "over 1 MiB"
    f.write_bytes(b"x" * MiB)
    assert bounded_or_why(f, MiB, "run.json") == b"x" * MiB


def test_a_cap_that_is_no_whole_mib_is_said_in_bytes(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_bytes(b"x" * (3 * MiB + 2))
    assert _refusal(f, 3 * MiB + 1) == "matrices/m.yaml: file is larger than 3145729 bytes (is this the right file?)"
    assert _refusal(f, 3 * MiB).startswith("matrices/m.yaml: file is larger than 3 MiB ")


def test_a_socket_is_named_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:  # bound, never listening: no traffic
        sock.bind(str(path))
        assert bounded_or_why(path, MiB, "status.json") == "not a regular file (a socket)"
        with pytest.raises(ConfigError, match=r"not a regular file \(a socket\)"):
            check_regular(path)


def test_a_file_grown_past_its_cap_after_the_stat_is_said_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bounded_or_why stats first; a file written between its stat and its read is still capped
    by the read, and the view gets the reason, not an exception."""
    f = tmp_path / "status.json"
    f.write_bytes(b"{}")
    small = os.stat(f)
    f.write_bytes(b"x" * (MiB + 1))
    monkeypatch.setattr(bounded.os, "stat", lambda path: small)
    assert bounded_or_why(f, MiB, "status.json") == "status.json: file is larger than 1 MiB (is this the right file?)"
