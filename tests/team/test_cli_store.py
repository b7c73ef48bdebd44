"""The store a team command is given (--store / $ORCH_QUEUE_STORE) and its --until, as the
command line sees them: `orch status` shows the queue the other commands use, and a mistyped
store URL or an empty --until is a usage error (exit 2) - never a traceback, never a password
on the terminal, never a night without a deadline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.team.queue import NewItem, Queue


def queue_at(path: Path, *names: str) -> None:
    with Queue(path) as q:
        for name in names:
            q.add_item(NewItem(path.parent / f"{name}.yaml", path.parent / "inv.yaml", None, 0, (), "x", "y"))


def status_json(reports: Path, capsys: pytest.CaptureFixture[str], *store: str) -> dict[str, object]:
    assert main(["status", "--json", "--reports", str(reports), *store]) == 0
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------------------- status --store FILE
def test_status_reads_the_sqlite_store_it_is_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shared, reports = tmp_path / "shared" / "q.db", tmp_path / "reports"
    queue_at(shared, "shared-sweep")
    queue_at(reports / "queue.db", "local-a", "local-b")
    assert main(["queue", "list", "--reports", str(reports), "--store", str(shared)]) == 0
    assert "shared-sweep.yaml" in capsys.readouterr().out  # queue list honours --store
    status = status_json(reports, capsys, "--store", str(shared))
    assert [(i["id"], i["matrix"]) for i in status["queue"]] == [(1, "shared-sweep.yaml")], status  # type: ignore[union-attr, index]
    assert main(["status", "--reports", str(reports), "--store", str(shared)]) == 0
    table = capsys.readouterr().out
    assert "shared-sweep.yaml" in table and "local-a" not in table


def test_status_reads_the_store_the_environment_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shared, reports = tmp_path / "shared.db", tmp_path / "reports"
    queue_at(shared, "one", "two")
    reports.mkdir()
    monkeypatch.setenv("ORCH_QUEUE_STORE", str(shared))
    assert [i["matrix"] for i in status_json(reports, capsys)["queue"]] == ["one.yaml", "two.yaml"]  # type: ignore[union-attr, index]


def test_status_with_the_reports_own_queue_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = tmp_path / "reports"
    queue_at(reports / "queue.db", "local")
    status = status_json(reports, capsys, "--store", str(reports / "queue.db"))
    assert [i["matrix"] for i in status["queue"]] == ["local.yaml"]  # type: ignore[union-attr, index]


def test_status_of_a_store_that_is_not_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing queued there yet, or a typo: no queue shown, said on stderr, no file made."""
    reports, missing = tmp_path / "reports", tmp_path / "typo.db"
    queue_at(reports / "queue.db", "local")
    assert main(["status", "--json", "--reports", str(reports), "--store", str(missing)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["queue"] == []
    assert f"no queue in {missing}" in captured.err.replace("\n", "")
    assert not missing.exists()


# ---------------------------------------------------------------------------- a mistyped store URL
BAD_URLS = [
    "postgresql://orch:secret@db.lab:54320x/orch",  # not a number
    "postgresql://orch:secret@db.lab:99999/orch",  # out of range
    "postgresql://orch:secret@[::1/orch",  # an unclosed IPv6 bracket
]


@pytest.mark.parametrize("url", BAD_URLS)
@pytest.mark.parametrize("command", [["queue", "list"], ["queue", "remove", "1"], ["status"]])
def test_a_bad_store_url_is_a_usage_error(
    url: str, command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--reports", str(tmp_path), "--store", url]) == 2
    said = capsys.readouterr().err.replace("\n", "")
    assert "not a PostgreSQL URL" in said and "secret" not in said, said


def test_a_bad_store_url_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_QUEUE_STORE", "postgresql://orch:secret@db.lab:5432x/orch?password=secret")
    assert main(["queue", "run", "--reports", str(tmp_path)]) == 2
    said = capsys.readouterr().err.replace("\n", "")
    assert "postgresql://***@db.lab:5432x/orch?***" in said and "secret" not in said, said


# ---------------------------------------------------------------------------- --until ""
@pytest.mark.parametrize("until", ["", "  "])
def test_an_empty_until_is_a_usage_error(until: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--until "$UNTIL"` with the variable unset: refused, not a night without a deadline."""
    reports = tmp_path / "reports"
    queue_at(reports / "queue.db", "waiting")
    assert main(["queue", "run", "--until", until, "--reports", str(reports)]) == 2
    said = capsys.readouterr().err.replace("\n", "")
    assert "--until is empty" in said and "unset" in said, said
    with Queue(reports / "queue.db") as q:
        assert [i.state for i in q.items()] == ["queued"]  # nothing claimed, nothing run


def test_an_empty_until_with_scheduled_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queue", "run", "--until", "", "--scheduled", "01:00", "--reports", str(tmp_path)]) == 2
    assert "--until is empty" in capsys.readouterr().err.replace("\n", "")


def test_an_empty_until_is_refused_by_schedule_install(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["schedule", "install", "nightly", "--on-active", "60", "--until", "", "--dry-run"]
    assert main([*argv, "--user", "--unit-dir", str(tmp_path / "units"), "--reports", str(tmp_path)]) == 2
    assert "--until is empty" in capsys.readouterr().err.replace("\n", "")
    assert not (tmp_path / "units").exists()
