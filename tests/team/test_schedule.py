"""Schedule unit files and install/remove against a fake systemctl (the real one runs on the
testbed: tests/team/test_schedule_testbed.py)."""

from __future__ import annotations

import shlex
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Sequence

import pytest

from orchestrator.cli.main import main
from orchestrator.edges.transport import Result
from orchestrator.errors import UsageError
from orchestrator.team.queue import scheduled_window
from orchestrator.team.schedule import (
    Schedule,
    ScheduleError,
    check_calendar,
    check_name,
    decide_run_as,
    describe,
    install,
    installed,
    path_value,
    quote_word,
    remove,
    service_text,
    timer_text,
    until_args,
)

SCHED = Schedule(
    "nightly",
    "/opt/venv/bin/python",
    "/srv/orch lab",
    ("--reports", "/srv/orch lab/reports$HOME", "--until", "07:00", "--label", "100%20"),
    on_calendar="*-*-* 01:00",
    pythonpath="/srv/orch lab",
    webhooks=("https://hooks.example/T/B/secret", "slack+https://h/x?a=%20"),
)


class FakeSystemctl:
    def __init__(self, answers: dict[str, Result] | None = None) -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.answers = answers or {}

    def __call__(self, scope: str, args: Sequence[str]) -> Result:
        self.calls.append((scope, tuple(args)))
        return self.answers.get(args[0], Result("localhost", " ".join(args), 0, "", "", 0.0))


def systemd_words(line: str) -> list[str]:
    """Split an ExecStart= value the way systemd does for our quoting (double quotes, \\ escapes),
    then undo the $$ and %% escapes."""
    return [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(line.split("=", 1)[1])]


def test_service_runs_the_queue_with_this_python_in_the_workdir() -> None:
    text = service_text(SCHED, Path("/etc/systemd/system"))
    lines = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln and not ln.startswith("#"))
    assert lines["Type"] == "oneshot" and lines["TimeoutStartSec"] == "infinity" and lines["KillMode"] == "mixed"
    assert lines["WorkingDirectory"] == "/srv/orch lab"  # literal to the line's end: no quotes
    exec_line = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
    assert systemd_words(exec_line) == [
        "/opt/venv/bin/python",
        "-m",
        "orchestrator.cli.main",
        "queue",
        "run",
        "--reports",
        "/srv/orch lab/reports$HOME",
        "--until",
        "07:00",
        "--label",
        "100%20",
    ]
    assert "$$HOME" in exec_line and "%%20" in exec_line  # systemd expands neither
    assert 'Environment="PYTHONPATH=/srv/orch lab"' in text
    assert "EnvironmentFile=/etc/systemd/system/orch-nightly.env\n" in text
    assert "secret" not in text and "hooks.example" not in text  # the unit file is world-readable


def test_timer_fires_the_service_and_catches_up_missed_runs() -> None:
    text = timer_text(SCHED)
    assert "OnCalendar=*-*-* 01:00\n" in text and "Persistent=true" in text and "AccuracySec=1s" in text
    assert "Unit=orch-nightly.service" in text and "WantedBy=timers.target" in text
    once = timer_text(Schedule("t", "/p", "/w", (), on_active_s=2.5))
    assert "OnActiveSec=2.5s" in once and "Persistent" not in once


def test_install_writes_both_units_then_reloads_and_enables(tmp_path: Path) -> None:
    fake = FakeSystemctl()
    paths = install(SCHED, "user", tmp_path / "units", fake)
    assert [p.name for p in paths] == ["orch-nightly.env", "orch-nightly.service", "orch-nightly.timer"]
    assert (tmp_path / "units" / "orch-nightly.timer").read_text() == timer_text(SCHED)
    env = tmp_path / "units" / "orch-nightly.env"
    assert env.stat().st_mode & 0o777 == 0o600
    assert env.read_text().splitlines()[1] == 'ORCH_WEBHOOKS="https://hooks.example/T/B/secret slack+https://h/x?a=%20"'
    again = install(replace(SCHED, webhooks=()), "user", tmp_path / "units", fake)  # reinstalled without
    assert [p.name for p in again] == ["orch-nightly.service", "orch-nightly.timer"] and not env.exists()
    assert fake.calls[:2] == [("user", ("daemon-reload",)), ("user", ("enable", "--now", "orch-nightly.timer"))]
    assert installed(tmp_path / "units") == ["nightly"]
    assert not list((tmp_path / "units").glob(".*")), "temp files left behind"


def test_remove_disables_and_deletes_only_our_files(tmp_path: Path) -> None:
    units = tmp_path / "units"
    install(SCHED, "system", units, FakeSystemctl())
    (units / "orch-manual.timer").write_text("[Timer]\nOnCalendar=daily\n")  # not written by orch
    fake = FakeSystemctl()
    removed = remove("nightly", "system", units, fake)
    assert sorted(p.name for p in removed) == ["orch-nightly.env", "orch-nightly.service", "orch-nightly.timer"]
    assert fake.calls == [("system", ("disable", "--now", "orch-nightly.timer")), ("system", ("daemon-reload",))]
    assert sorted(p.name for p in units.iterdir()) == ["orch-manual.timer"]
    assert installed(units) == []
    with pytest.raises(UsageError, match="no schedule 'manual'"):
        remove("manual", "system", units, fake)


def test_systemctl_failure_is_a_typed_error(tmp_path: Path) -> None:
    denied = Result("localhost", "enable", 1, "", "Failed to enable unit: Access denied", 0.0)
    with pytest.raises(
        ScheduleError, match=r"systemctl enable --now orch-nightly.timer: exit code 1 \(for --system"
    ) as exc:
        install(SCHED, "system", tmp_path, FakeSystemctl({"enable": denied}))
    assert "Access denied" in exc.value.detail


def test_describe_reads_what_systemd_says(tmp_path: Path) -> None:
    install(SCHED, "user", tmp_path, FakeSystemctl())
    show = {
        "orch-nightly.timer": (
            "ActiveState=active\nNextElapseUSecRealtime=Tue 2026-12-01 01:00:00 UTC\nLastTriggerUSec=\n"
        ),
        "orch-nightly.service": "Result=exit-code\nExecMainStatus=1\n",
    }

    def fake(scope: str, args: Sequence[str]) -> Result:
        return Result("localhost", "show", 0, show[args[1]], "", 0.0)

    info = describe("nightly", "user", tmp_path, fake)
    assert info.trigger == "OnCalendar=*-*-* 01:00" and info.active == "active"
    assert info.next_run.startswith("Tue 2026-12-01") and info.last_run == "-"
    assert info.last_result == "exit-code (exit 1)"


@pytest.mark.parametrize("name", ["", "../x", "a b", "-x", "x/y", "a" * 65])
def test_bad_names(name: str) -> None:
    with pytest.raises(UsageError):
        check_name(name)


@pytest.mark.process
def test_calendar_specs_are_checked_by_systemd_analyze() -> None:
    assert check_calendar("*-*-* 01:00") == "*-*-* 01:00"
    with pytest.raises(UsageError, match="--on-calendar 'at one'"):
        check_calendar("at one")


@pytest.mark.parametrize("spec", ["", "  ", "*-*-* 01:00\n*-*-* 02:00"])
def test_an_empty_calendar_spec_is_shown_one_that_works(spec: str) -> None:
    with pytest.raises(UsageError, match="is empty or spans lines") as refused:
        check_calendar(spec)
    assert refused.value.hint == "e.g. '*-*-* 01:00' or 'Mon..Fri 22:30'"


def test_webhooks_that_cannot_be_written_safely_are_refused(tmp_path: Path) -> None:
    for bad in ('https://h/a"b', "https://h/a b", "https://h/$x", "https://h/a,b"):
        with pytest.raises(UsageError, match="percent-encode"):
            install(replace(SCHED, webhooks=(bad,)), "user", tmp_path, FakeSystemctl())
    assert not list(tmp_path.iterdir())


def test_unit_file_words_refuse_newlines() -> None:
    with pytest.raises(UsageError):
        quote_word("a\nExecStartPre=/bin/evil")
    with pytest.raises(UsageError):
        path_value("/srv\rExecStartPre=/bin/evil")
    assert quote_word('a"b\\c$%', dollars=False) == '"a\\"b\\\\c$%%"'
    assert path_value("/srv/100%") == "/srv/100%%"


@pytest.mark.process
def test_cli_bad_calendar_exits_2_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["schedule", "install", "nightly", "--on-calendar", "whenever", "--user", "--unit-dir", str(tmp_path / "units")]
    )
    assert code == 2 and "whenever" in capsys.readouterr().err
    assert not (tmp_path / "units").exists()


def test_cli_list_without_schedules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schedule", "list", "--user", "--unit-dir", str(tmp_path)]) == 0
    assert "no orch schedules" in capsys.readouterr().out


# ---------------------------------------------------------------------------- issue 16: dry run, User=, windows
def test_service_names_its_user_only_when_given() -> None:
    assert "\nUser=alice\n" in service_text(replace(SCHED, run_as="alice"), Path("/etc/systemd/system"))
    assert "User=" not in service_text(SCHED, Path("/etc/systemd/system"))


@pytest.mark.parametrize(
    ("scope", "user", "euid", "expected"),
    [
        (None, None, 1000, ("user", None)),  # not root: the user manager, as before
        (None, "", 1000, ("user", None)),  # `--user` alone
        (None, "alice", 1000, ("user", None)),  # `--user ME`
        (None, "root", 0, ("system", "root")),  # root, explicitly
        (None, "bob", 0, ("system", "bob")),
        ("system", "bob", 0, ("system", "bob")),
        (None, "", 0, ("user", None)),  # root's own user manager: its choice, said with --user
    ],
)
def test_who_runs_the_sweeps(scope: str | None, user: str | None, euid: int, expected: tuple[str, str | None]) -> None:
    assert decide_run_as(scope, user, euid, "alice") == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("scope", "user", "euid", "message"),
    [
        (None, None, 0, "would run every queued sweep as root"),  # the accident the issue found
        ("system", None, 0, "would run every queued sweep as root"),
        (None, "bob", 1000, "only root"),
        ("system", "", 0, "conflict"),
        (None, "bad name", 0, "not a user name"),
        (None, "-x", 0, "not a user name"),
    ],
)
def test_who_runs_the_sweeps_refusals(scope: str | None, user: str | None, euid: int, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        decide_run_as(scope, user, euid, "alice")  # type: ignore[arg-type]


def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 0)


@pytest.mark.process
def test_cli_dry_run_prints_the_units_and_installs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    as_root(monkeypatch)
    units = tmp_path / "units"
    args = ["schedule", "install", "nightly", "--on-calendar", "*-*-* 01:00", "--until", "07:00"]
    args += ["--webhook", "https://hooks.example/T/B/secret", "--user", "nobody", "--unit-dir", str(units)]
    assert main([*args, "--store", "postgresql://orch:pw@db/q", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert f"# ---- {units / 'orch-nightly.service'}" in printed and "\nUser=nobody\n" in printed
    assert "OnCalendar=*-*-* 01:00\nPersistent=true" in printed
    exec_line = next(ln for ln in printed.splitlines() if ln.startswith("ExecStart="))
    assert systemd_words(exec_line)[-4:] == ["--until", "07:00", "--scheduled", "01:00:00"]
    assert "ORCH_QUEUE_STORE=" in printed and ":pw@" not in printed and "/B/secret" not in printed
    assert "systemctl daemon-reload && systemctl enable --now orch-nightly.timer" in printed
    assert "nothing was written" in printed and not units.exists()


@pytest.mark.process
def test_cli_root_without_a_user_is_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    as_root(monkeypatch)
    units = tmp_path / "units"
    code = main(
        ["schedule", "install", "nightly", "--on-calendar", "*-*-* 01:00", "--system", "--unit-dir", str(units)]
    )
    assert code == 2 and "--user root" in capsys.readouterr().err and not units.exists()


@pytest.mark.process
def test_cli_unknown_account_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    as_root(monkeypatch)
    args = ["schedule", "install", "n", "--on-calendar", "*-*-* 01:00", "--user", "no-such-user-x"]
    assert main([*args, "--unit-dir", str(tmp_path / "u")]) == 2
    assert "no such user" in capsys.readouterr().err and not (tmp_path / "u").exists()


@pytest.mark.process
def test_cli_until_needs_one_time_of_day(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["schedule", "install", "n", "--on-calendar", "*-*-* 01,13:00", "--until", "07:00", "--user"]
    assert main([*args, "--unit-dir", str(tmp_path / "u"), "--dry-run"]) == 2
    assert "several times of day" in capsys.readouterr().err


def test_cli_one_shot_gets_an_absolute_deadline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["schedule", "install", "n", "--on-active", "60", "--until", "07:00", "--user", "--dry-run"]
    assert main([*args, "--unit-dir", str(tmp_path / "u")]) == 0
    exec_line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("ExecStart="))
    until = systemd_words(exec_line)[-1]
    deadline = datetime.fromisoformat(until)
    start = datetime.now().astimezone() + timedelta(seconds=60)
    assert deadline.strftime("%H:%M") == "07:00" and timedelta(0) < deadline - start <= timedelta(days=1)


def test_a_calendar_schedule_refuses_a_date_time_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A date-time fits one night only: installed at 02:00 with tonight's 07:00 as a date, every
    later night's window (from 01:00) would end before it began and the queue never ran."""
    monkeypatch.setattr("orchestrator.team.schedule.shutil.which", lambda _: None)  # no systemd-analyze
    now = at(2, 2)
    with pytest.raises(UsageError, match="not a time of day"):
        until_args("2026-12-02T07:00", "*-*-* 01:00", None, now)
    with pytest.raises(UsageError, match="not a time of day"):
        until_args("7", "*-*-* 01:00", None, now)
    assert until_args("07:00", "*-*-* 01:00", None, now) == ["--until", "07:00", "--scheduled", "01:00:00"]


LOCAL = timezone(timedelta(hours=1))


def at(day: int, hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, 12, day, hour, minute, second, tzinfo=LOCAL)


@pytest.mark.parametrize(
    ("scheduled", "now", "start", "deadline", "missed"),
    [
        ("01:00", at(2, 1, 0, 5), at(2, 1), at(2, 7), False),  # on time
        ("01:00", at(2, 6, 59), at(2, 1), at(2, 7), False),  # a late catch-up still inside its window
        ("01:00", at(2, 9), at(2, 1), at(2, 7), True),  # Persistent=true at 09:00 after a night off: nothing
        ("01:00", at(2, 0, 30), at(1, 1), at(1, 7), True),  # before tonight's start: yesterday's window, over
        ("22:30", at(1, 22, 30, 1), at(1, 22, 30), at(2, 7), False),  # the window spans midnight
        ("22:30", at(2, 8), at(1, 22, 30), at(2, 7), True),  # booted the next morning
        ("07:00", at(2, 7), at(2, 7), at(3, 7), False),  # --until equal to the start: a whole day, no more
    ],
)
def test_the_window_counts_from_the_scheduled_start(
    scheduled: str, now: datetime, start: datetime, deadline: datetime, missed: bool
) -> None:
    window = scheduled_window("07:00", scheduled, now)
    assert (window.start, window.deadline, window.missed(now)) == (start, deadline, missed)


def test_a_deadline_is_never_more_than_a_day_from_the_scheduled_start() -> None:
    for hour in range(24):
        for minute in (0, 17, 59):
            now = at(2, hour, minute)
            for scheduled, until in (("01:00", "07:00"), ("22:30", "06:00"), ("07:00", "07:00"), ("23:59", "00:00")):
                w = scheduled_window(until, scheduled, now)
                assert w.start <= now and timedelta(0) < w.deadline - w.start <= timedelta(days=1)
    with pytest.raises(UsageError, match="more than a day"):
        scheduled_window("2026-12-09T07:00", "01:00", at(2, 1))
    with pytest.raises(UsageError, match="--scheduled"):
        scheduled_window("07:00", "1am", at(2, 1))


def test_cli_a_run_started_after_its_window_starts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the timer runs after a missed night: the queue is left as it is for the next window."""
    from orchestrator.team.queue import Queue

    reports = tmp_path / "reports"
    with Queue.in_reports(reports) as q:
        item = q.add(Path("/m/x.yaml"), Path("/i/y.yaml"), None)
    now = datetime.now().astimezone()
    scheduled, until = (now - timedelta(hours=3)).strftime("%H:%M"), (now - timedelta(hours=1)).strftime("%H:%M")
    assert main(["queue", "run", "--reports", str(reports), "--until", until, "--scheduled", scheduled]) == 0
    assert "nothing starts" in capsys.readouterr().err
    with Queue.in_reports(reports) as q:
        assert q.get(item.id).state == "queued" and q.get(item.id).message == ""
    assert main(["queue", "run", "--reports", str(reports), "--scheduled", scheduled]) == 2  # needs --until
