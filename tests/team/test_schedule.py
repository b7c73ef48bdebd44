"""Schedule unit files and install/remove against a fake systemctl (the real one runs on the
testbed: tests/team/test_schedule_testbed.py)."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import pytest

from orchestrator.cli.main import main
from orchestrator.edges.transport import Result
from orchestrator.errors import UsageError
from orchestrator.team.schedule import (
    Schedule,
    ScheduleError,
    check_calendar,
    check_name,
    describe,
    install,
    installed,
    path_value,
    quote_word,
    remove,
    service_text,
    timer_text,
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


def test_calendar_specs_are_checked_by_systemd_analyze() -> None:
    assert check_calendar("*-*-* 01:00") == "*-*-* 01:00"
    with pytest.raises(UsageError, match="--on-calendar 'at one'"):
        check_calendar("at one")


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


def test_cli_bad_calendar_exits_2_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["schedule", "install", "nightly", "--on-calendar", "whenever", "--user", "--unit-dir", str(tmp_path / "units")]
    )
    assert code == 2 and "whenever" in capsys.readouterr().err
    assert not (tmp_path / "units").exists()


def test_cli_list_without_schedules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schedule", "list", "--user", "--unit-dir", str(tmp_path)]) == 0
    assert "no orch schedules" in capsys.readouterr().out
