"""`--until 07:00` means 07:00 on the clock on the nights the clocks change too.

`datetime.now().astimezone()` (what the CLI passes) carries the UTC offset in force now; a
deadline computed by keeping it landed at 08:00 on the spring-forward night and at 06:00 on the
autumn one. The zone is set per test (TZ + time.tzset) and restored after, so the tests mean the
same on any machine."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from orchestrator.team.queue import parse_until, scheduled_window
from orchestrator.team.schedule import until_args


@pytest.fixture
def berlin() -> Iterator[None]:
    """The system zone is Europe/Berlin for one test (CET/CEST; clocks change 30 March and 26
    October 2025)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TZ", "Europe/Berlin")
        time.tzset()
        try:
            if time.tzname != ("CET", "CEST"):
                pytest.skip("no Europe/Berlin zone data on this machine")
            yield
        finally:
            mp.undo()
            time.tzset()


def local(y: int, mo: int, d: int, h: int, mi: int = 0) -> float:
    """Epoch seconds of a local wall-clock time (the system's rules)."""
    return time.mktime((y, mo, d, h, mi, 0, 0, 0, -1))


def shown(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(epoch))


def as_the_cli_has_it(y: int, mo: int, d: int, h: int, mi: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi).astimezone()  # a fixed offset, named CET or CEST


def test_until_on_the_spring_forward_night(berlin: None) -> None:
    deadline = parse_until("07:00", as_the_cli_has_it(2025, 3, 30, 0, 30)).timestamp()
    assert deadline == local(2025, 3, 30, 7), shown(deadline)
    assert shown(deadline) == "2025-03-30 07:00 CEST"


def test_until_on_the_autumn_night(berlin: None) -> None:
    deadline = parse_until("07:00", as_the_cli_has_it(2025, 10, 25, 22, 0)).timestamp()
    assert shown(deadline) == "2025-10-26 07:00 CET"


def test_a_local_iso_until_past_the_change(berlin: None) -> None:
    deadline = parse_until("2025-03-30T07:00", as_the_cli_has_it(2025, 3, 29, 20)).timestamp()
    assert shown(deadline) == "2025-03-30 07:00 CEST"


def test_scheduled_window_on_the_autumn_night(berlin: None) -> None:
    window = scheduled_window("07:00", "01:00", as_the_cli_has_it(2025, 10, 26, 1, 5))
    assert window.start.timestamp() == local(2025, 10, 26, 1)
    assert window.deadline.timestamp() == local(2025, 10, 26, 7), shown(window.deadline.timestamp())


def test_a_whole_day_window_is_the_days_length(berlin: None) -> None:
    """--scheduled 07:00 --until 07:00 is a whole day: 25 hours on the autumn day, 23 in spring,
    never refused as "more than a day"."""
    autumn = scheduled_window("07:00", "07:00", as_the_cli_has_it(2025, 10, 25, 8))
    spring = scheduled_window("07:00", "07:00", as_the_cli_has_it(2025, 3, 29, 8))
    assert autumn.deadline - autumn.start == timedelta(hours=25)
    assert spring.deadline - spring.start == timedelta(hours=23)
    assert shown(autumn.deadline.timestamp()) == "2025-10-26 07:00 CET"


def test_a_one_shot_schedule_past_the_change(berlin: None) -> None:
    """`schedule install --on-active 3600 --until 07:00` at 23:30 CET: the run starts after
    midnight, the deadline is 07:00 CEST."""
    assert until_args("07:00", None, 3600.0, as_the_cli_has_it(2025, 3, 29, 23, 30)) == [
        "--until",
        "2025-03-30T07:00:00+02:00",
    ]


def test_an_offset_of_its_own_stays_fixed(berlin: None) -> None:
    """A caller's own fixed offset (not the system's zone) is a zone without changes."""
    plus_one = timezone(timedelta(hours=1))
    assert parse_until("07:00", datetime(2025, 3, 30, 0, 30, tzinfo=plus_one)) == datetime(
        2025, 3, 30, 7, tzinfo=plus_one
    )


@pytest.fixture
def havana() -> Iterator[None]:
    """America/Havana: the clocks go from 00:00 to 01:00 on 8 March 2026 (a gap at midnight)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TZ", "America/Havana")
        time.tzset()
        try:
            if time.tzname != ("CST", "CDT"):
                pytest.skip("no America/Havana zone data on this machine")
            yield
        finally:
            mp.undo()
            time.tzset()


@pytest.mark.parametrize("hour, minute", [(1, 30), (1, 45)])
def test_until_inside_the_spring_forward_gap_is_the_end_of_the_gap(berlin: None, hour: int, minute: int) -> None:
    """02:30 does not exist in Berlin on 30 March 2025: the deadline is 03:00 CEST that night, not
    a day later (an hour back landed before now) nor now."""
    deadline = parse_until("02:30", as_the_cli_has_it(2025, 3, 30, hour, minute)).timestamp()
    assert shown(deadline) == "2025-03-30 03:00 CEST"


def test_until_inside_a_gap_at_midnight(havana: None) -> None:
    now = datetime.fromisoformat("2026-03-08T04:30:00+00:00").astimezone()  # 23:30 CST on the 7th
    deadline = parse_until("00:30", now)
    assert shown(deadline.timestamp()) == "2026-03-08 01:00 CDT"
    assert deadline - now == timedelta(minutes=30)


def test_a_schedule_whose_until_falls_in_the_gap_runs_that_night(berlin: None) -> None:
    """`--on-calendar '*-*-* 01:30' --until 02:30` on the spring-forward night: a half-hour window."""
    window = scheduled_window("02:30", "01:30", as_the_cli_has_it(2025, 3, 30, 1, 30))
    assert shown(window.deadline.timestamp()) == "2025-03-30 03:00 CEST"
    assert window.deadline - window.start == timedelta(minutes=30)


def test_until_at_a_time_shown_twice_is_its_first_occurrence(berlin: None) -> None:
    """02:30 happens twice on 26 October 2025 (CEST, then CET): the first, as --help says."""
    deadline = parse_until("02:30", as_the_cli_has_it(2025, 10, 26, 1)).timestamp()
    assert shown(deadline) == "2025-10-26 02:30 CEST"
