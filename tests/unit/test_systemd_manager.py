"""SystemdManager's commands on a scripted transport: what each answer of systemctl (and of the
live-environment script) turns into. The parsers are pure and tested on their own; the commands
run on real systemd in tests/remote/test_systemd.py. These pin what lies between: which answer
falls back, which one fails the call, which one is a problem, without a host."""

from __future__ import annotations

import base64
import re

import pytest
from fakes import FakeTransport, Reply

from orchestrator.edges.services.systemd import ProcInfo, SystemdManager
from orchestrator.errors import CommandFailed, ServiceError

RUNNING = (
    "Id=d.service\nLoadState=loaded\nActiveState=active\nSubState=running\nMainPID=101\nNRestarts=0\n"
    "ExecMainStartTimestamp=Mon 2026-12-07 01:00:00.250000 UTC\nExecMainStatus=0\nResult=success\n"
)
FAILED = RUNNING.replace("ActiveState=active", "ActiveState=failed").replace("SubState=running", "SubState=failed")
FAILED = FAILED.replace("ExecMainStatus=0", "ExecMainStatus=3").replace("Result=success", "Result=exit-code")
SHOW_TIMESTAMP = re.compile(r"^systemctl show --timestamp=us\+utc -p ")
SHOW_PLAIN = re.compile(r"^systemctl show -p Id,")


def manager(*, timestamps: Reply, plain: Reply | None = None) -> tuple[FakeTransport, SystemdManager]:
    t = FakeTransport("decode")
    t.script(SHOW_TIMESTAMP, timestamps)
    if plain is not None:
        t.script(SHOW_PLAIN, plain)
    t.script(re.compile(r"^journalctl "), Reply(0, "2026-12-07T01:00:01 h d[101]: boom\n"))
    return t, SystemdManager(t, "decode")


def test_show_reads_utc_timestamps_in_one_call() -> None:
    t, m = manager(timestamps=Reply(0, RUNNING))
    (info,) = m.show(["d.service"])
    assert (info.state.active_state, info.state.main_pid, info.load_state) == ("active", 101, "loaded")
    assert info.state.started_at is not None
    assert len(t.commands()) == 1


def test_a_systemctl_without_timestamp_falls_back_once_and_remembers() -> None:
    refused = Reply(1, "", "systemctl: unrecognized option '--timestamp=us+utc'\n")
    t, m = manager(timestamps=refused, plain=Reply(0, RUNNING.replace(" UTC", "")))
    assert m.state("d.service").started_at is None  # local time: not guessed at
    assert m.state("d.service").active_state == "active"
    assert [SHOW_TIMESTAMP.match(c) is not None for c in t.commands()] == [True, False, False]


def test_any_other_failure_of_systemctl_show_fails_the_call() -> None:
    t, m = manager(timestamps=Reply(1, "", "Failed to connect to bus: No such file or directory\n"))
    with pytest.raises(CommandFailed) as failed:
        m.show(["d.service"])
    assert failed.value.reason == "Failed to connect to bus: No such file or directory"
    assert len(t.commands()) == 1  # not retried without the flag: that is not what failed


def test_check_alive_passes_a_running_unit_and_says_why_a_failed_one_is_not() -> None:
    _, m = manager(timestamps=Reply(0, RUNNING))
    assert m.check_alive("d.service", 0.0) is None
    _, m = manager(timestamps=Reply(0, FAILED))
    with pytest.raises(ServiceError, match=r"failed: exit-code \(exit status 3\)") as failed:
        m.check_alive("d.service", 0.0)
    assert "boom" in (failed.value.detail or "")  # the journal's tail under it


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def proc(pid: int, comm: str, environ: bytes, children: str, exe: str) -> str:
    """One process as the live-environment script prints it."""
    return f"proc|{pid}|{b64(comm)}|{b64(environ)}|{children}|{b64(exe)}"


def tree(*lines: str) -> FakeTransport:
    t = FakeTransport("decode")
    t.script(("sh", "-c"), Reply(0, "".join(line + "\n" for line in lines)))
    return t


def test_environ_follows_a_wrapper_shell_down_to_the_server() -> None:
    t = tree(
        "main|100",
        proc(100, "start-decode", b"W=1\0", "101 ", "/usr/bin/bash"),
        proc(101, "python3", b"A=1\0B=two words\0", "", "/usr/bin/python3.11"),
    )
    assert SystemdManager(t, "decode").environ("d.service") == {"A": "1", "B": "two words"}
    (command,) = t.commands()
    assert "orch-environ d.service 64" in command  # the unit and how many processes, as arguments


def test_environ_of_a_unit_without_a_process_is_none() -> None:
    assert SystemdManager(tree("main|0"), "decode").environ("d.service") is None


def test_environ_it_may_not_read_says_how_to_get_it() -> None:
    with pytest.raises(ServiceError, match=r"cannot read /proc/100/environ: permission denied"):
        SystemdManager(tree("main|100", "noaccess|100"), "decode").environ("d.service")


@pytest.mark.parametrize(
    ("comm", "exe", "wrapper"),
    [
        ("sh", "", True),
        ("start-decode", "/usr/bin/bash", True),  # a script run through its shebang
        ("python3", "/usr/bin/python3.11", False),
        ("sglang", "/opt/sh", True),  # the executable's own name is what counts, not its folder
    ],
)
def test_a_wrapper_is_known_by_its_name_or_by_its_executable(comm: str, exe: str, wrapper: bool) -> None:
    assert ProcInfo(1, comm, b"", (), exe).is_wrapper is wrapper


def test_env_files_says_whether_the_unit_reads_orchs_file_and_every_file_it_names() -> None:
    t = FakeTransport("decode")
    t.script(("sh", "-c"), Reply(0, "othr /etc/default/sglang\nsame /srv/link-to-decode.env\n"))
    got = SystemdManager(t, "decode").env_files("d.service", "/etc/orch/decode.env")
    assert got == (True, ["/etc/default/sglang", "/srv/link-to-decode.env"])
    (command,) = t.commands()
    assert command.endswith("orch-env-files d.service /etc/orch/decode.env")
    t.script(("sh", "-c"), Reply(0, "othr /etc/default/sglang\n"))
    assert SystemdManager(t, "decode").env_files("d.service", "/etc/orch/decode.env") == (
        False,
        ["/etc/default/sglang"],
    )


def restarting(restart: Reply, show: str, units: str = "d.service") -> SystemdManager:
    """manager() whose restart of `units` answers `restart` (the host's time first, as the command prints it)."""
    t, m = manager(timestamps=Reply(0, show))
    q = re.escape(units)
    t.script(
        re.compile(
            rf"^systemctl reset-failed -- {q} 2>/dev/null; date \+%s\.%N && timeout 90 systemctl restart -- {q} "
        ),
        restart,
    )
    return m


def test_a_restart_returns_the_hosts_time_just_before_it() -> None:
    assert restarting(Reply(0, "1796600000.5\n"), RUNNING).restart("d.service") == 1796600000.5


@pytest.mark.parametrize(
    ("load_state", "said"),
    [
        ("not-found", "not found on the host (check `units:`; `systemctl list-unit-files` there)"),
        ("masked", "is masked (systemctl unmask it first)"),
        ("bad-setting", "cannot be loaded (LoadState=bad-setting; see systemctl status)"),
    ],
)
def test_a_unit_systemd_cannot_start_is_named_by_why(load_state: str, said: str) -> None:
    show = RUNNING.replace("LoadState=loaded", f"LoadState={load_state}")
    m = restarting(Reply(5, "1796600000.5\nFailed to restart d.service: Unit d.service not found.\n"), show)
    with pytest.raises(ServiceError) as failed:
        m.restart("d.service")
    assert failed.value.unit == "d.service" and said in str(failed.value)
    if load_state != "not-found":
        assert m.unusable("d.service") == said


def test_a_failed_restart_says_the_units_state_or_else_systemctls_last_line() -> None:
    m = restarting(Reply(1, "1796600000.5\nJob for d.service failed.\n"), FAILED)
    with pytest.raises(ServiceError, match=r"failed: exit-code \(exit status 3\)") as failed:
        m.restart("d.service")
    assert "boom" in (failed.value.detail or "")
    m = restarting(Reply(1, "1796600000.5\nsomething odd\nJob for d.service canceled.\n"), RUNNING)
    with pytest.raises(ServiceError, match=r"restart failed: Job for d.service canceled\.$"):
        m.restart("d.service")


def test_a_host_that_cannot_tell_its_time_cannot_restart() -> None:
    m = restarting(Reply(127, "", "sh: 1: date: not found\n"), RUNNING)
    with pytest.raises(ServiceError, match="cannot restart: sh: 1: date: not found"):
        m.restart("d.service")


def test_a_show_field_systemd_leaves_unset_reads_as_none() -> None:
    _, m = manager(timestamps=Reply(0, RUNNING.replace("ExecMainStatus=0", "ExecMainStatus=[not set]")))
    assert m.show(["d.service"])[0].exec_main_status is None
    _, m = manager(timestamps=Reply(0, RUNNING.replace("NRestarts=0", "NRestarts=")))
    assert m.state("d.service").n_restarts == 0


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            {"ActiveState=active": "ActiveState=inactive", "SubState=running": "SubState=dead"},
            "not running (inactive/dead",
        ),
        (
            {"SubState=running": "SubState=auto-restart", "NRestarts=0": "NRestarts=2"},
            "crash-looping: its process exited",
        ),
        ({"Result=success": "Result=start-limit-hit"}, "stopped by systemd's start limit"),
    ],
)
def test_check_alive_names_a_unit_not_on_its_way_up(edit: dict[str, str], said: str) -> None:
    show = RUNNING
    for old, new in edit.items():
        show = show.replace(old, new)
    _, m = manager(timestamps=Reply(0, show))
    with pytest.raises(ServiceError, match=re.escape(said)) as failed:
        m.check_alive("d.service", 0.0)
    if "auto-restart" in show:  # two restarts done and the third under way
        assert "(restart #3 since orch started it)" in str(failed.value)


def test_a_wrapper_known_by_its_name_alone_is_followed_and_one_without_a_child_stands() -> None:
    t = tree(
        "main|200",
        proc(200, "tini", b"T=1\0", "201", "/usr/local/bin/tini-static"),
        proc(201, "sglang", b"A=1\0", "", "/usr/bin/python3.11"),
    )
    assert SystemdManager(t, "decode").environ("d.service") == {"A": "1"}
    alone = tree("main|300", proc(300, "sh", b"S=1\0", "301", "/bin/sh"))  # 301 gone meanwhile
    assert SystemdManager(alone, "decode").environ("d.service") == {"S": "1"}


def test_a_failed_restart_of_several_units_names_the_one_that_failed() -> None:
    shows = RUNNING.replace("d.service", "a.service") + "\n" + FAILED.replace("d.service", "b.service")
    m = restarting(Reply(1, "1796600000.5\nJob failed.\n"), shows, units="a.service b.service")
    with pytest.raises(ServiceError, match=r"failed: exit-code") as failed:
        m.restart_many(["a.service", "b.service"])
    assert failed.value.unit == "b.service"
