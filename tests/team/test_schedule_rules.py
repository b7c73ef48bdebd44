"""`orch schedule`'s rules the fifteenth mutation round found without a test (no process: a fake
systemctl, systemd-analyze's answer faked where it is asked): a calendar spec where
systemd-analyze is missing or refuses it, who runs a system unit a non-root user installs, the
deadline of a one-shot counted from when it fires, the account name, a timer systemd no longer
knows, a unit folder that is not there, and a service that never ran."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import pytest

from orchestrator.edges.transport import Result
from orchestrator.errors import UsageError
from orchestrator.team import schedule
from orchestrator.team.schedule import (
    Schedule,
    ScheduleError,
    check_calendar,
    current_user,
    decide_run_as,
    describe,
    install,
    installed,
    remove,
    until_args,
)

SCHED = Schedule("nightly", "/opt/venv/bin/python", "/srv/orch", ("--until", "07:00"), on_calendar="*-*-* 01:00")
UTC = timezone.utc


def _answers(codes: dict[str, int]) -> tuple[list[tuple[str, ...]], schedule.Systemctl]:
    calls: list[tuple[str, ...]] = []

    def systemctl(scope: str, args: Sequence[str]) -> Result:
        calls.append(tuple(args))
        return Result("localhost", " ".join(args), codes.get(args[0], 0), "", "Unit not loaded.", 0.0)

    return calls, systemctl


def _analyze(monkeypatch: pytest.MonkeyPatch, code: int, stderr: str) -> list[list[str]]:
    asked: list[list[str]] = []

    def run(argv: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        asked.append(argv)
        return subprocess.CompletedProcess(argv, code, "", stderr)

    monkeypatch.setattr(schedule.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(schedule.subprocess, "run", run)
    return asked


def test_without_systemd_analyze_a_calendar_spec_is_taken_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule.shutil, "which", lambda name: None)
    assert check_calendar("Mon..Fri 22:30") == "Mon..Fri 22:30"


def test_a_spec_systemd_analyze_refuses_is_refused_in_its_last_words(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _analyze(monkeypatch, 1, "noise\nFailed to parse calendar specification 'x': Invalid argument\n")
    with pytest.raises(UsageError, match=r"^--on-calendar 'x': Failed to parse calendar specification") as refused:
        check_calendar("x")
    assert asked == [["/usr/bin/systemd-analyze", "calendar", "x"]] and refused.value.hint is not None
    _analyze(monkeypatch, 1, "")
    with pytest.raises(UsageError, match=r"^--on-calendar 'y': not a calendar spec \(e.g."):
        check_calendar("y")
    _analyze(monkeypatch, 0, "")
    assert check_calendar("daily") == "daily"


def test_a_non_root_user_asking_for_a_system_unit_gets_one_with_no_user_line() -> None:
    """Only root installing a system unit must name the account (sweeps would run as root);
    anyone else's system unit is refused by systemd's own permissions, not here."""
    assert decide_run_as("system", None, 1000, "ana") == ("system", None)
    assert decide_run_as(None, None, 1000, "ana") == ("user", None)
    with pytest.raises(UsageError, match="as root"):
        decide_run_as(None, None, 0, "root")


def test_a_one_shots_deadline_counts_from_when_it_fires() -> None:
    """--on-active 2h at 06:00 fires at 08:00: its --until 07:00 is the next morning's, not this
    morning's (which would end the window an hour before it began)."""
    now = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)
    args = until_args("07:00", None, 7200, now)
    assert args[0] == "--until" and datetime.fromisoformat(args[1]) == datetime(2026, 12, 8, 7, 0, tzinfo=UTC)
    assert until_args("07:00", None, None, now)[1] == datetime(2026, 12, 7, 7, 0, tzinfo=UTC).isoformat()
    assert until_args(None, None, 60, now) == [] and until_args("", "*-*-* 01:00", None, now) == []


def test_the_current_user_is_the_effective_ones_name_or_its_number(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import pwd

    assert current_user() == pwd.getpwuid(os.geteuid()).pw_name

    def unknown(uid: int) -> pwd.struct_passwd:
        raise KeyError(uid)

    monkeypatch.setattr(schedule.pwd, "getpwuid", unknown)
    assert current_user() == str(os.geteuid())  # an account with no passwd entry (a container's uid)


def test_a_timer_systemd_no_longer_knows_is_still_removed(tmp_path: Path) -> None:
    """`systemctl disable --now` answers 5 (not loaded) or 1 for a unit already gone from systemd:
    the files are still ours to delete. Any other answer is a failure, and nothing is deleted."""
    install(SCHED, "user", tmp_path, _answers({})[1])
    calls, systemctl = _answers({"disable": 5})
    removed = remove("nightly", "user", tmp_path, systemctl)
    assert sorted(p.name for p in removed) == ["orch-nightly.service", "orch-nightly.timer"]
    assert calls[-1] == ("daemon-reload",) and installed(tmp_path) == []
    install(SCHED, "user", tmp_path, _answers({})[1])
    with pytest.raises(ScheduleError, match=r"systemctl disable --now orch-nightly.timer: exit code 6"):
        remove("nightly", "user", tmp_path, _answers({"disable": 6})[1])
    assert installed(tmp_path) == ["nightly"]


def test_a_unit_folder_that_is_not_there_holds_no_schedules(tmp_path: Path) -> None:
    assert installed(tmp_path / "missing") == []


def test_a_service_that_never_ran_shows_no_result(tmp_path: Path) -> None:
    install(SCHED, "user", tmp_path, _answers({})[1])

    def show(scope: str, args: Sequence[str]) -> Result:
        text = "Result=\nExecMainStatus=1\n" if args[1].endswith(".service") else "ActiveState=active\n"
        return Result("localhost", "show", 0, text, "", 0.0)

    info = describe("nightly", "user", tmp_path, show)
    assert (info.last_result, info.next_run, info.last_run) == ("-", "-", "-")
