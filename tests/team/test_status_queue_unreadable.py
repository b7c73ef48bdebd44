"""A damaged queue.db is said on every status view, not shown as an empty queue.

`orch queue list` refuses a queue.db that is no orch queue (exit 2, team.queuestore.NotAQueue),
and so would tonight's `queue run`; but `orch status`, its JSON and serve's status page listed it
as no queue at all ("Nothing queued."), exit 0, no word: a team reading the page in the morning saw
an empty queue, not a broken one. Unit tier: the views in-process, no socket."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.team.livestatus import snapshot
from orchestrator.team.serve import render_status, status_json


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "queue.db").write_bytes(b"this is no SQLite file\n" * 10)
    return folder


def test_orch_status_says_the_queue_cannot_be_read(reports: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--reports", str(reports)]) == 0  # a view: it shows what it can
    err = " ".join(capsys.readouterr().err.split())
    assert "queue unreadable: queue.db: cannot" in err, err
    assert str(reports) not in err.split("queue unreadable:")[1]  # the file's name, not the server's path


def test_the_json_and_the_page_say_it_too(reports: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--json", "--reports", str(reports)]) == 0
    said = json.loads(capsys.readouterr().out)["queue_unreadable"]
    assert said.startswith("queue.db: cannot"), said
    snap = snapshot(reports)
    assert status_json(snap)["queue_unreadable"] == said
    page = render_status(snap)
    assert 'id="queue-unreadable"' in page and "Nothing queued." not in page


def test_a_readable_queue_or_none_says_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "reports"
    empty.mkdir()
    assert main(["status", "--json", "--reports", str(empty)]) == 0
    assert json.loads(capsys.readouterr().out)["queue_unreadable"] == ""
    assert "Nothing queued." in render_status(snapshot(empty))
