"""The team commands' lines where the thirteenth mutation round found no test: `orch queue list`
says which item cannot run and why (a plain queued item says nothing there); `orch queue remove`
names the item and its state; `orch queue run` ends with a row per item; `orch serve --port` past
65535 is refused before anything is served; `orch schedule` takes a one-second `--on-active` and
prints folder names as written; `orch status` reads another store without changing it."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.team.queue import NewItem, Queue


def _row(listed: str, item_id: int) -> str:
    """The table's row of the item (its first line: `│ 2 │ queued │ ...`)."""
    return next(line for line in listed.splitlines() if [c.strip() for c in line.split("│")[1:2]] == [str(item_id)])


def test_the_list_says_which_item_cannot_run_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = tmp_path / "reports"
    with Queue.in_reports(reports) as q:
        plain = q.add_item(NewItem(tmp_path / "plain.yaml", tmp_path / "i.yaml", None, matrix_text="p"))
        bad = q.add_item(NewItem(tmp_path / "bad.yaml", tmp_path / "i.yaml", None, matrix_text="m"))
        q._db.execute("UPDATE items SET options = ? WHERE id = ?", ("{not json", bad.id))
    assert main(["queue", "list", "--reports", str(reports)]) == 0
    listed = capsys.readouterr().out
    assert "cannot run: " in _row(listed, bad.id) and "its stored options" in listed
    assert listed.count("cannot run") == 1 and "cannot run" not in _row(listed, plain.id)


def test_a_removed_item_is_named_with_its_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = tmp_path / "reports"
    with Queue.in_reports(reports) as q:
        item = q.add_item(NewItem(tmp_path / "m.yaml", tmp_path / "i.yaml", None, matrix_text="m"))
    assert main(["queue", "remove", str(item.id), "--reports", str(reports)]) == 0
    assert capsys.readouterr().out == f"removed {item.label} (queued)\n"


@pytest.mark.parametrize(("port", "code"), [("65536", 2), ("-1", 2)])
def test_a_port_out_of_range_is_refused_before_anything_is_served(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], port: str, code: int
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--reports", str(tmp_path), "--port", port])
    assert exited.value.code == code
    assert "--port" in capsys.readouterr().err


def test_queue_run_ends_with_a_row_per_item_it_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The table `orch queue run` ends with (a timer's journal keeps it): each item, its matrix,
    result, run folder and note."""
    from orchestrator.cli.team import _print_outcomes
    from orchestrator.team.queue import SweepOutcome

    with Queue.in_reports(tmp_path / "reports") as q:
        first = q.add_item(NewItem(tmp_path / "a[b].yaml", tmp_path / "i.yaml", None, matrix_text="a"))
        second = q.add_item(NewItem(tmp_path / "b.yaml", tmp_path / "i.yaml", None, matrix_text="b"))
    ran = [
        (first, SweepOutcome("completed", 0, tmp_path / "reports/r1", "4/4 trials, 0 failed")),
        (second, SweepOutcome("error", 2, None, "decode.env not found")),
    ]
    _print_outcomes(ran)
    out = capsys.readouterr().out
    assert out.lstrip().startswith("queue run")
    assert [c.strip() for c in _row(out, first.id).split("│")[1:-1]] == [
        "1",
        "a[b].yaml",  # as named: the table's text is printed plain, never read as markup
        "completed",
        str(tmp_path / "reports/r1"),
        "4/4 trials, 0 failed",
    ]
    assert [c.strip() for c in _row(out, second.id).split("│")[1:-1]] == [
        "2",
        "b.yaml",
        "error",
        "",
        "decode.env not found",
    ]
    _print_outcomes([])
    assert capsys.readouterr().out == ""  # nothing ran: no empty table


def test_a_schedule_every_second_is_a_schedule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unit_dir = tmp_path / "units"
    args = ["schedule", "install", "tick", "--on-active", "1", "--dry-run", "--user", "root"]
    assert main([*args, "--reports", str(tmp_path / "reports"), "--unit-dir", str(unit_dir)]) == 0
    out = capsys.readouterr().out
    assert "OnActiveSec=1" in out and out.endswith("dry run: nothing was written or enabled\n")
    assert not unit_dir.exists()


def test_no_schedule_names_its_folder_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unit_dir = tmp_path / "[b]units"
    assert main(["schedule", "list", "--user", "--unit-dir", str(unit_dir)]) == 0
    assert capsys.readouterr().out == f"no orch schedules in {unit_dir}\n"


def test_status_reads_another_store_without_changing_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`orch status --store FILE` opens it read-only: a SQLite file that is not a queue is said to
    be one and left byte for byte (opened for writing, the queue's tables were made in it)."""
    import sqlite3

    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE notes (a)")
        db.commit()
    before = other.read_bytes()
    (tmp_path / "reports").mkdir()
    assert main(["status", "--reports", str(tmp_path / "reports"), "--store", str(other)]) == 2
    assert "is it an orch queue?" in capsys.readouterr().err
    assert other.read_bytes() == before


def test_status_says_a_run_left_changed_on_one_line_a_log_greps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first line `orch status` prints for a run whose restore left a host changed is one line
    however long (a timer's log or a pipe is 80 columns: wrapped, `orch restore PATH` was cut in two)."""
    from .helpers import unrestored_run

    reports = tmp_path / ("reports-" + "x" * 60)
    run_dir = unrestored_run(reports)
    assert main(["status", "--reports", str(reports)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{run_dir.name}: NOT restored: decode; finish with: orch restore "), first
    assert first.endswith(str(run_dir.absolute())) and len(first) > 80


def test_an_installed_schedule_names_what_it_runs_and_where_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`orch schedule install`'s last line names the command and the folder it runs in (a checkout
    under a folder named with brackets printed as written); systemctl is scripted here (a real one
    runs in the testbed's systemd tests)."""
    from orchestrator.edges.transport import Result
    from orchestrator.team import schedule

    calls: list[tuple[str, tuple[str, ...]]] = []

    def systemctl(scope: str, args: Sequence[str]) -> Result:
        calls.append((scope, tuple(args)))
        return Result("localhost", "systemctl", 0, "", "", 0.0)

    real_install = schedule.install
    monkeypatch.setattr(schedule, "install", lambda s, scope, unit_dir: real_install(s, scope, unit_dir, systemctl))
    checkout = tmp_path / "[b]checkout"
    checkout.mkdir()
    monkeypatch.chdir(checkout)
    reports, units = checkout / "reports", tmp_path / "units"
    args = ["schedule", "install", "nightly", "--on-active", "60", "--user", "root", "--unit-dir", str(units)]
    assert main([*args, "--reports", str(reports)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == f"it runs `orch queue run --reports {reports.resolve()}` in {checkout} as root", last
    assert [c[1] for c in calls] == [("daemon-reload",), ("enable", "--now", "orch-nightly.timer")]
