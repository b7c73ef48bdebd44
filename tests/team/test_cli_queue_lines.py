"""`orch queue list`'s note column, `orch queue remove`'s line and `orch serve --port`'s bound, where
the thirteenth mutation round found no test: an item whose stored options cannot be read is listed
as one that cannot run and why; a plain queued item says nothing there; a removed item is named
with its state; a port past 65535 is refused at the command line, before anything is served."""

from __future__ import annotations

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
        first = q.add_item(NewItem(tmp_path / "a.yaml", tmp_path / "i.yaml", None, matrix_text="a"))
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
        "a.yaml",
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
