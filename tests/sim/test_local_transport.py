"""LocalTransport: commands without a shell unless asked, timeouts that kill the whole process
group, typed failures, atomic writes that keep the file's mode."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from orchestrator.core.inventory import Host
from orchestrator.edges.deployment import HostHandle
from orchestrator.edges.transport import Transport
from orchestrator.edges.transport.local import LocalTransport
from orchestrator.errors import CommandFailed, CommandInterrupted, TransportError
from orchestrator.sweep.hosts import remove_run_files

from .helpers import pid_running, wait_until


@pytest.fixture
def t() -> LocalTransport:
    return LocalTransport("ctl")


def test_implements_the_protocol(t: LocalTransport) -> None:
    transport: Transport = t  # type-checks against the protocol; and at run time:
    assert transport.host == "ctl" and LocalTransport().host == "local"


@pytest.mark.process
def test_a_sequence_is_not_parsed_by_a_shell(t: LocalTransport) -> None:
    r = t.run(["printf", "%s|", "a b", "$HOME", ";", "*"])
    assert r.ok and r.stdout == "a b|$HOME|;|*|" and r.exit_code == 0
    assert r.command == "printf '%s|' 'a b' '$HOME' ';' '*'" and r.host == "ctl" and r.duration_s >= 0


@pytest.mark.process
def test_a_string_runs_in_the_shell(t: LocalTransport) -> None:
    r = t.run("echo out; echo err >&2; exit 3", check=False)
    assert (r.exit_code, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)


@pytest.mark.process
def test_check_raises_command_failed_with_the_output(t: LocalTransport) -> None:
    with pytest.raises(CommandFailed) as info:
        t.run(["sh", "-c", "echo boom >&2; exit 4"])
    err = info.value
    assert (err.host, err.result_code, err.stderr) == ("ctl", 4, "boom\n")
    assert str(err).startswith("ctl: command failed with exit code 4") and "boom" in err.detail


@pytest.mark.process
def test_a_missing_program_is_exit_127(t: LocalTransport) -> None:
    r = t.run(["/nonexistent/prog"], check=False)
    assert r.exit_code == 127 and "not found" in r.stderr


@pytest.mark.process
def test_timeout_kills_the_whole_process_group(t: LocalTransport, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(TransportError, match="timed out after 0.5 s"):
        t.run(f"sleep 30 & echo $! > {pidfile}; wait", timeout=0.5)
    assert time.monotonic() - started < 5
    child = int(pidfile.read_text())
    wait_until(lambda: not pid_running(child), timeout=3)


@pytest.mark.process
def test_a_set_stop_event_kills_the_whole_process_group_and_keeps_the_output(t: LocalTransport, tmp_path: Path) -> None:
    pidfile, stop = tmp_path / "child.pid", threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    with pytest.raises(CommandInterrupted) as exc:
        t.run(f"echo partial; echo oops >&2; sleep 30 & echo $! > {pidfile}; wait", timeout=60, stop=stop)
    assert time.monotonic() - started < 5
    assert (exc.value.result.stdout, exc.value.result.stderr) == ("partial\n", "oops\n")
    wait_until(lambda: not pid_running(int(pidfile.read_text())), timeout=3)
    with pytest.raises(CommandInterrupted):  # set before the call: nothing runs
        t.run(f"touch {tmp_path / 'ran'}", stop=stop)
    assert not (tmp_path / "ran").exists()


@pytest.mark.process
def test_sudo_as_root_runs_directly_else_needs_sudo(t: LocalTransport) -> None:
    if os.geteuid() == 0:
        assert t.run(["id", "-u"], sudo=True).stdout.strip() == "0"
    else:  # pragma: no cover - the CI runs as root
        try:
            t.run(["true"], sudo=True, check=False)
        except TransportError as exc:
            assert "sudo not supported locally" in str(exc)


def test_read_write_exists(t: LocalTransport, tmp_path: Path) -> None:
    path = tmp_path / "a.env"
    assert not t.exists(str(path))
    t.write_bytes_atomic(str(path), b"K=1\n")
    assert t.exists(str(path)) and t.read_bytes(str(path)) == b"K=1\n"
    with pytest.raises(TransportError, match="ctl: cannot read .*missing"):
        t.read_bytes(str(tmp_path / "missing"))


def test_atomic_write_keeps_mode_and_leaves_no_temp_files(t: LocalTransport, tmp_path: Path) -> None:
    path = tmp_path / "decode.env"
    path.write_bytes(b"old\r\n")
    path.chmod(0o640)
    inode = path.stat().st_ino
    t.write_bytes_atomic(str(path), b"new\xff\r\n")
    assert path.read_bytes() == b"new\xff\r\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert [p.name for p in tmp_path.iterdir()] == ["decode.env"]


def test_atomic_write_goes_through_a_symlink_as_over_ssh(t: LocalTransport, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "decode.env"
    target.write_bytes(b"old\n")
    link = tmp_path / "decode.env"
    link.symlink_to(target)
    t.write_bytes_atomic(str(link), b"new\n")
    assert link.is_symlink() and target.read_bytes() == b"new\n"  # the link survives
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["decode.env"]


@pytest.mark.process
def test_a_killed_writes_temp_file_is_removed_beside_the_resolved_file(t: LocalTransport, tmp_path: Path) -> None:
    """What a controller killed between the temp file and the rename leaves, and the run's own
    host-side backup, are removed, and only those (the restore runs this on every host)."""
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "decode.env"
    target.write_bytes(b"K=1\n")
    (tmp_path / "decode.env").symlink_to(target)
    leftover = tmp_path / "real" / ".decode.env.orch-k1ll3d"  # the temp name both transports use
    leftover.write_bytes(b"K=")
    kept = [tmp_path / "real" / n for n in ("decode.env.orch-lock", ".prefill.env.orch-x1", "decode.env.orch-backup-r")]
    kept.append(tmp_path / "decode.env.orch-backup-r0")  # another run's backup
    backup = tmp_path / "decode.env.orch-backup-r1"  # this run's, beside the path the inventory names
    units = tmp_path / "decode.env.orch-units-r1"  # its record of the units' states (sweep.hostunits)
    kept.append(tmp_path / "decode.env.orch-units-r0")  # another run's
    for path in [*kept, backup, units]:
        path.write_bytes(b"x")
    handle = HostHandle(
        Host("decode", "local", None, str(tmp_path / "decode.env"), "systemd", (), "", "", 1.0, 1.0, False, ()),
        t,
        None,  # type: ignore[arg-type]
    )
    remove_run_files(handle, "r1")
    assert not leftover.exists() and all(path.exists() for path in kept) and target.read_bytes() == b"K=1\n"
    assert not backup.exists() and not units.exists()


def test_atomic_write_into_a_missing_directory_is_a_transport_error(t: LocalTransport, tmp_path: Path) -> None:
    with pytest.raises(TransportError, match="cannot write"):
        t.write_bytes_atomic(str(tmp_path / "no" / "such.env"), b"x")
