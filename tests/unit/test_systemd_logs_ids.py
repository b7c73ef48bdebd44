"""SystemdManager.logs_and_ids on a scripted transport: the post-repro identity read rides on the log
collection's one command, and its output splits back into the same logs and ids the separate calls
give, whatever the log lines contain (the real command is exercised in tests/remote/test_systemd.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from fakes import FakeTransport, Reply

from orchestrator.edges.identity import UNIT_PROPS, UnitId
from orchestrator.edges.services.systemd import SystemdManager
from orchestrator.errors import CommandFailed, ServiceError

SHOW = "MainPID=101\nInvocationID=aaa\nActiveState=active\n\nMainPID=0\nInvocationID=bbb\nActiveState=inactive\n"
# log lines that look like the command's own structure must stay log lines
LOG_A = "2026-12-01T01:00:00+00:00 h a[1]: --orch-0123456789abcdef0123456789abcdef--\n2026-12-01T01:00:01 h a[1]: ok\n"
LOG_B = "2026-12-01T01:00:02+00:00 h b[2]: MainPID=999\n\n"
MARKER = re.compile(r"echo (--orch-[0-9a-f]{32}--)")


def scripted(show: str, logs: Sequence[str], exit_code: int = 0) -> tuple[FakeTransport, SystemdManager]:
    t = FakeTransport("decode")

    def answer(text: str, argv: Sequence[str] | None) -> Reply:
        markers = MARKER.findall(text)  # one `echo MARKER` after each unit's journal; the ids come last
        assert len(set(markers)) == 1 and len(markers) <= len(logs), text
        return Reply(exit_code, "".join(f"{log}{markers[0]}\n" for log in logs[: len(markers)]) + show)

    t.script(re.compile(rf"systemctl show -p {re.escape(UNIT_PROPS)} -- "), answer)
    return t, SystemdManager(t, "decode")


def test_one_command_gives_each_units_log_and_every_units_id() -> None:
    t, m = scripted(SHOW, [LOG_A, LOG_B])
    logs, ids = m.logs_and_ids(["a.service", "b.service"], 1764550800.25)
    assert logs == {"a.service": LOG_A, "b.service": LOG_B}
    assert ids == {"a.service": UnitId("a.service", 101, "aaa"), "b.service": UnitId("b.service", None, "bbb")}
    (command,) = t.commands()  # one round trip
    assert command.count("journalctl -q --unit=") == 2 and "--since @1764550800.250000" in command
    assert command.index(") & s=$(systemctl show") > command.rindex("journalctl")  # read meanwhile
    first, second = m.logs_and_ids(["a.service"], 0.0), m.logs_and_ids(["a.service"], 0.0)
    assert MARKER.findall(t.commands()[1]) != MARKER.findall(t.commands()[2])  # a fresh marker each time
    assert first == second


def test_a_log_cut_by_its_byte_limit_loses_its_first_partial_line_as_logs_since_does() -> None:
    cut = "rtial line\n" + "x" * 20 + "\n"
    _, m = scripted(SHOW.split("\n\n")[0] + "\n", [cut])
    logs, ids = m.logs_and_ids(["a.service"], 0.0, max_bytes=len(cut))
    # the partial line dropped, and a first line saying the log was cut (edges.services.LOG_CUT):
    # a collector must not count its lines as all the unit wrote
    assert logs == {"a.service": "-- (log truncated: earlier lines omitted)\n" + "x" * 20 + "\n"}
    assert ids["a.service"].main_pid == 101


def test_a_failed_systemctl_show_fails_the_call() -> None:
    _, m = scripted("", [""], exit_code=3)
    with pytest.raises(CommandFailed):
        m.logs_and_ids(["a.service"], 0.0)


def test_output_without_every_units_part_is_an_error_naming_the_host() -> None:
    t = FakeTransport("decode")
    t.script(re.compile(r"systemctl show "), Reply(0, SHOW))
    m = SystemdManager(t, "decode")
    with pytest.raises(ServiceError) as info:
        m.logs_and_ids(["a.service", "b.service"], 0.0)
    assert str(info.value).startswith("decode: unit a.service, b.service: unexpected output of the journal command")
