"""LocalTransport (what the bundled simulated deployment's hosts go through), where the thirteenth
mutation round found its rules held only over SSH or not at all: the write that compares the file
just before its rename (`expect`: an env file someone edited mid-run is left as they made it), a
new file's mode, the size cap's words, sudo when not root, and, with processes, a timed-out
command's duration, a Ctrl-C that kills the command's whole group, and a repro that exited while
a child it left holds its pipes."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from orchestrator.edges.transport import local
from orchestrator.edges.transport.local import LocalTransport
from orchestrator.errors import CommandTimedOut, ConfigError, FileChanged, TransportError

from .helpers import pid_running, wait_until


@pytest.fixture
def t() -> LocalTransport:
    return LocalTransport("ctl")


def test_a_write_that_expects_what_the_file_holds_replaces_it(t: LocalTransport, tmp_path: Path) -> None:
    path = tmp_path / "decode.env"
    path.write_bytes(b"K=1\n")
    t.write_bytes_atomic(str(path), b"K=2\n", expect=b"K=1\n")
    assert path.read_bytes() == b"K=2\n"


@pytest.mark.parametrize("now", [b"K=1\nMINE=1\n", None, "fifo"])
def test_a_file_changed_since_it_was_read_is_left_as_it_is(t: LocalTransport, tmp_path: Path, now: object) -> None:
    """Edited by hand, removed, or replaced by something that is not a file: FileChanged, the file
    as the other hand left it, no temp file beside it."""
    path = tmp_path / "decode.env"
    if isinstance(now, bytes):
        path.write_bytes(now)
    elif now == "fifo":
        os.mkfifo(path)
    with pytest.raises(FileChanged):
        t.write_bytes_atomic(str(path), b"K=2\n", expect=b"K=1\n")
    if isinstance(now, bytes):
        assert path.read_bytes() == now
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if now is None else ["decode.env"])


def test_write_then_run_runs_nothing_once_the_file_changed(t: LocalTransport, tmp_path: Path) -> None:
    path = tmp_path / "decode.env"
    path.write_bytes(b"MINE=1\n")
    with pytest.raises(FileChanged):
        t.write_then_run(str(path), b"K=2\n", f"touch {tmp_path / 'ran'}", timeout=5, expect=b"K=1\n")
    assert not (tmp_path / "ran").exists() and path.read_bytes() == b"MINE=1\n"


def test_a_new_file_gets_the_mode_open_would_give_it(t: LocalTransport, tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        t.write_bytes_atomic(str(tmp_path / "new.env"), b"K=1\n")
        assert stat.S_IMODE((tmp_path / "new.env").stat().st_mode) == 0o644  # not mkstemp's 0600
        t.write_bytes_atomic(str(tmp_path / "copy.env"), b"K=1\n", like=str(tmp_path / "gone.env"))
        assert stat.S_IMODE((tmp_path / "copy.env").stat().st_mode) == 0o600  # like a file that is gone
    finally:
        os.umask(umask)


def test_a_file_over_the_cap_is_refused_in_mebibytes(t: LocalTransport, tmp_path: Path) -> None:
    path = tmp_path / "huge.env"
    with path.open("wb") as f:
        f.truncate(local.MAX_READ_BYTES + 1)  # sparse
    with pytest.raises(ConfigError, match="larger than 64 MiB"):
        t.read_bytes(str(path))


def test_sudo_when_not_root_goes_through_sudo_or_says_it_is_missing(
    t: LocalTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(local.shutil, "which", lambda name: "/usr/bin/sudo")
    assert t._sudo(["id", "-u"]) == ["sudo", "-n", "--", "id", "-u"]
    monkeypatch.setattr(local.shutil, "which", lambda name: None)
    with pytest.raises(TransportError, match="sudo not supported locally"):
        t._sudo(["id", "-u"])
    monkeypatch.setattr(local.os, "geteuid", lambda: 0)
    assert t._sudo(["id", "-u"]) == ["id", "-u"]


@pytest.mark.process
def test_a_timed_out_command_keeps_its_output_and_its_timeout(t: LocalTransport) -> None:
    with pytest.raises(CommandTimedOut) as caught:
        t.run("echo started; sleep 30", timeout=1.0)  # time enough for the echo under load
    assert caught.value.timeout == 1.0 and caught.value.result.duration_s == 1.0
    assert caught.value.result.stdout == "started\n" and caught.value.result.exit_code == -1


@pytest.mark.process
def test_a_ctrl_c_while_a_command_runs_kills_its_whole_group(
    t: LocalTransport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "child.pid"

    def interrupted(self: local._Pipes, deadline: float | None) -> bool:
        # the command has started its child (a fixed half second may not be, under load)
        wait_until(lambda: pidfile.is_file() and pidfile.read_text().endswith("\n"), timeout=10)
        raise KeyboardInterrupt

    monkeypatch.setattr(local._Pipes, "read_until", interrupted)
    with pytest.raises(KeyboardInterrupt):
        t.run(f"sleep 30 & echo $! > {pidfile}; wait", timeout=60)
    wait_until(lambda: not pid_running(int(pidfile.read_text())), timeout=5)


@pytest.mark.process
def test_a_repro_that_exited_is_not_waited_on_for_a_child_holding_its_pipes(t: LocalTransport, tmp_path: Path) -> None:
    """A repro run with a stop Event (as the runner runs it) ends EXITED_DRAIN_S after its exit,
    though `sleep 30 &` holds its stdout: not at its timeout (the leftover check finds the child)."""
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    result = t.run(f"sleep 30 & echo $! > {pidfile}; echo done", timeout=20, stop=threading.Event(), check=False)
    took = time.monotonic() - started
    try:
        assert result.exit_code == 0 and result.stdout == "done\n" and took < 10, took
    finally:
        os.kill(int(pidfile.read_text()), 15)
    wait_until(lambda: not pid_running(int(pidfile.read_text())), timeout=5)


@pytest.mark.process
def test_a_program_that_cannot_be_started_is_a_transport_error_saying_why(t: LocalTransport, tmp_path: Path) -> None:
    """Not a missing program (exit 127, as a shell says it) but one the kernel refuses to start."""
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(TransportError, match="cannot run .*not-executable: Permission denied"):
        t.run([str(script)])
