"""The team commands' command-line behaviour that needs no sweep: bad input exits 2 and changes
nothing, items are listed and removed, an item that cannot start fails alone and is reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.team.queue import Queue

from .helpers import make_site, matrix_text, webhook_receiver


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    site = make_site(tmp_path / "site")
    matrix = tmp_path / "m.yaml"
    matrix.write_text(matrix_text("clitest"))
    return tmp_path / "reports", matrix, site.inventory


def items(reports: Path) -> list[tuple[int, str]]:
    if not (reports / "queue.db").exists():
        return []
    with Queue.in_reports(reports) as q:
        return [(i.id, i.state) for i in q.items()]


def test_add_list_remove(setup: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    reports, matrix, inventory = setup
    assert (
        main(
            [
                "queue",
                "add",
                str(matrix),
                "-i",
                str(inventory),
                "--reports",
                str(reports),
                "--priority",
                "3",
                "--webhook",
                "https://hooks.example/T/B/secret",
            ]
        )
        == 0
    )
    assert "queued item 1: clitest (2 trials on testbed 'sim', priority 3)" in capsys.readouterr().out
    with Queue.in_reports(reports) as q:
        item = q.get(1)
    assert item.matrix == str(matrix.resolve()) and item.inventory == str(inventory.resolve())
    assert item.webhooks == ("https://hooks.example/T/B/secret",)
    assert main(["queue", "list", "--reports", str(reports)]) == 0
    listed = capsys.readouterr().out
    assert "clitest" not in listed and "m.yaml" in listed and "queued" in listed
    assert "https://hooks.example/…" in listed and "secret" not in listed
    assert main(["queue", "remove", "1", "--reports", str(reports)]) == 0
    assert items(reports) == []
    assert main(["queue", "remove", "1", "--reports", str(reports)]) == 2


def test_the_first_add_says_it_made_a_new_queue(
    setup: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`queue add --reports typo` made a queue no `queue run` of the usual folder sees, without a word."""
    reports, matrix, inventory = setup
    args = ["queue", "add", str(matrix), "-i", str(inventory), "--reports", str(reports)]
    assert main(args) == 0
    assert f"a new queue: {reports / 'queue.db'} (queue run, list and status see it" in capsys.readouterr().out
    assert main(args) == 0
    assert "new queue" not in capsys.readouterr().out


def test_queueing_the_same_sweep_twice_is_said(
    setup: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Both are kept (a second night's run of one sweep), but the add says so: a command run twice
    queued it twice without a word (found by the new-user walk). Another testbed, another sweep."""
    reports, matrix, inventory = setup
    args = ["queue", "add", str(matrix), "-i", str(inventory), "--reports", str(reports)]
    assert main(args) == 0 and "same sweep" not in capsys.readouterr().out
    assert main(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "note: item 1 not yet finished queues the same sweep" in said and "queue remove 2" in said
    assert items(reports) == [(1, "queued"), (2, "queued")]
    matrix.write_text(matrix.read_text() + "# edited\n")  # another matrix text: another sweep
    assert main(args) == 0 and "same sweep" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("url", "warned"),
    [
        ("http://hooks.example/T/B/secret", True),
        ("slack+http://10.0.0.5:8080/T/secret", True),
        ("http://127.0.0.1:9/secret", False),
        ("http://localhost:9/secret", False),
        ("http://[::1]:9/secret", False),
        ("http://127.example.com/secret", True),  # a name, not an address: core.endpoints' one rule
        ("https://hooks.example/T/B/secret", False),
    ],
)
def test_a_plain_http_webhook_to_another_machine_is_said(
    setup: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], url: str, warned: bool
) -> None:
    """Allowed (a lab receiver without TLS), but its summary and token cross the network in clear:
    said when given, to queue add and to orch run alike, never with the token (the new-user walk)."""
    reports, matrix, inventory = setup
    for argv in (
        ["queue", "add", str(matrix), "-i", str(inventory), "--reports", str(reports), "--webhook", url],
        ["run", str(matrix), "-i", str(inventory), "--out", str(reports), "--dry-run", "--webhook", url],
    ):
        assert main(argv) == 0
        err = " ".join(capsys.readouterr().err.split())
        assert ("plain http to another machine" in err) == warned, (argv[0], err)
        assert "secret" not in err


def test_a_plain_http_webhook_from_orch_webhooks_is_said_where_it_is_sent(
    setup: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ORCH_WEBHOOKS is read by `queue run` (each item's end) and `orch notify`: a plain-http one to
    another machine is said there too, once, without its token (only --webhook ones were)."""
    from helpers.report_synth import synthetic_run, write_run

    from orchestrator.team import notify

    reports, _, _ = setup
    reports.mkdir()
    monkeypatch.setenv("ORCH_WEBHOOKS", "http://hooks.example/T/B/secret, https://hooks.example/T/ok")
    assert main(["queue", "run", "--reports", str(reports), "--dry-run"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("plain http to another machine") == 1 and "secret" not in err, err

    manifest, records = synthetic_run(replicates=1)
    run_dir = write_run(reports / manifest.run_id, manifest, records)
    monkeypatch.setattr(notify, "send", lambda summary, hooks, warn: [])  # tests send only to loopback
    assert main(["notify", str(run_dir)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("plain http to another machine") == 1 and "secret" not in err, err


def test_the_views_name_the_testbed_queue_add_named(
    setup: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without -t, `queue add` says "on testbed 'sim'" and `queue list` and `orch status` said
    "(first)" (found by the new-user walk); an item an older orch queued (no names kept) still does."""
    from dataclasses import replace

    from orchestrator.cli.team import _list_row
    from orchestrator.team.livestatus import item_view

    reports, matrix, inventory = setup
    assert main(["queue", "add", str(matrix), "-i", str(inventory), "--reports", str(reports)]) == 0
    assert "on testbed 'sim'" in capsys.readouterr().out
    with Queue.in_reports(reports) as q:
        item = q.get(1)
    assert item.testbed is None and _list_row(item)[4] == "sim" and item_view(item).testbed == "sim"
    assert main(["queue", "list", "--reports", str(reports)]) == 0 and "(first)" not in capsys.readouterr().out
    older = replace(item, testbeds=())
    assert _list_row(older)[4] == "(first)" and item_view(older).testbed == "(first)"


@pytest.mark.parametrize("bad", ["matrix", "inventory", "testbed", "webhook"])
def test_bad_input_is_not_queued(setup: tuple[Path, Path, Path], bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    reports, matrix, inventory = setup
    args = ["queue", "add", str(matrix), "-i", str(inventory), "--reports", str(reports)]
    if bad == "matrix":
        matrix.write_text(matrix_text("x").replace("levels: [on, off]", "levels: on"))
    elif bad == "inventory":
        args[4] = str(inventory.with_name("missing.yaml"))
    elif bad == "testbed":
        args += ["-t", "nope"]
    else:
        args += ["--webhook", "ftp://x"]
    assert main(args) == 2
    assert "error:" in capsys.readouterr().err
    assert items(reports) == []


@pytest.mark.process
def test_an_item_that_cannot_start_fails_alone_and_is_reported(
    setup: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    reports, matrix, inventory = setup
    gone = matrix.with_name("gone.yaml")
    gone.write_text(matrix.read_text())
    assert main(["queue", "add", str(gone), "-i", str(inventory), "--reports", str(reports)]) == 0
    gone.unlink()  # deleted after it was queued: the queue's copy of it runs (issue 16) ...
    env_file = inventory.with_name("decode.env")
    env_file.unlink()  # ... but a testbed's env file gone since is a sweep that cannot start
    with webhook_receiver() as rx:
        code = main(["queue", "run", "--reports", str(reports), "--webhook", rx.url])
    assert code == 1
    assert items(reports) == [(1, "failed")]
    with Queue.in_reports(reports) as q:
        assert "decode.env" in q.get(1).message
    ((_, body),) = rx.received
    assert body["status"] == "error" and body["name"] == "gone" and "decode.env" in body["headline"]  # type: ignore[index]
    assert not [p for p in reports.iterdir() if p.is_dir()]  # no run directory was made


def test_queue_list_and_remove_never_create_a_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`queue list --reports TYPO` made TYPO/queue.db and called it empty, where `orch status`
    said the folder does not exist: a command that only reads (or removes) creates nothing."""
    monkeypatch.delenv("ORCH_QUEUE_STORE", raising=False)
    typo = tmp_path / "TYPO"
    assert main(["queue", "list", "--reports", str(typo)]) == 2
    assert "TYPO: no such folder" in capsys.readouterr().err
    assert main(["queue", "remove", "1", "--reports", str(typo)]) == 2
    assert main(["queue", "list", "--store", str(typo / "q.db")]) == 2
    assert not typo.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["queue", "list", "--reports", str(empty)]) == 0
    assert "nothing was ever queued there" in capsys.readouterr().out
    assert main(["queue", "remove", "1", "--reports", str(empty)]) == 2
    assert "no queue item 1: there is no queue in" in " ".join(capsys.readouterr().err.split())
    assert list(empty.iterdir()) == []


def test_queue_run_with_nothing_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queue", "run", "--reports", str(tmp_path / "r")]) == 0
    assert "nothing to run" in capsys.readouterr().out


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_an_until_already_past_is_a_usage_error(
    setup: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], dry_run: list[str]
) -> None:
    """A past date-time (a typo for tomorrow's) ran nothing with exit 0, its dry run a list of items."""
    reports, matrix, inventory = setup
    assert main(["queue", "add", str(matrix), "-i", str(inventory), "--reports", str(reports)]) == 0
    capsys.readouterr()
    assert main(["queue", "run", "--reports", str(reports), "--until", "2020-01-01T07:00", *dry_run]) == 2
    err = capsys.readouterr().err
    assert "--until '2020-01-01T07:00' is past" in err and "HH:MM" in err


def test_bad_until_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queue", "run", "--reports", str(tmp_path / "r"), "--until", "7am"]) == 2
    assert "--until '7am'" in capsys.readouterr().err


def test_notify_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from helpers.report_synth import synthetic_run, write_run

    manifest, records = synthetic_run(replicates=1)
    run_dir = write_run(tmp_path / manifest.run_id, manifest, records)
    assert main(["notify", str(run_dir)]) == 2  # no webhook anywhere
    with webhook_receiver() as rx:
        assert main(["notify", str(run_dir), "--webhook", "slack+" + rx.url + "/s"]) == 0
    ((path, body),) = rx.received
    assert path == "/s" and manifest.run_id in body["text"]  # type: ignore[index]
    assert "delivered (1 attempt)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [["status"], ["queue", "list"], ["queue", "run", "--dry-run"], ["queue", "add", "m.yaml"]],
)
def test_a_runs_folder_given_as_reports_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    """--reports reports/<run-id> (the folder `orch run` printed): status said no sweep runs there and
    queue list that nothing was ever queued, exit 0; queue add made a queue.db inside the run."""
    run = tmp_path / "reports" / "20261206-035603-walk2"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--reports", "reports/20261206-035603-walk2"])
    err = " ".join(capsys.readouterr().err.split())
    assert refused.value.code == 2 and "is a run's folder (it holds run.json)" in err and "--reports reports" in err
    assert sorted(p.name for p in run.iterdir()) == ["run.json"]


@pytest.mark.parametrize("argv", [["status"], ["queue", "list"], ["queue", "run", "--dry-run"]])
def test_a_file_given_as_reports_is_called_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """`--reports README.md` was told "no such folder" of a file that is there."""
    (tmp_path / "README.md").write_text("x")
    assert main([*argv, "--reports", str(tmp_path / "README.md")]) == 2
    assert f"{tmp_path / 'README.md'}: a file, not a folder (check --reports" in capsys.readouterr().err


def test_notify_that_fails_names_no_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`orch notify` of a finished run runs no sweep: its failed delivery said "(the sweep itself is
    unaffected)", which only a sweep's own webhook (orch run, queue run) has to say."""
    from helpers.report_synth import synthetic_run, write_run

    manifest, records = synthetic_run(replicates=1)
    run_dir = write_run(tmp_path / manifest.run_id, manifest, records)
    with webhook_receiver() as rx:
        rx.answers = [500, 500, 500]  # every attempt fails
        assert main(["notify", str(run_dir), "--webhook", rx.url + "/h"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "not delivered after 3 attempts" in err and "sweep" not in err


def test_queue_run_dry_run_lists_what_would_run_in_order_and_claims_nothing(
    setup: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`orch queue run --dry-run`: the items a run would take, in the order it takes them
    (priority, then age), before a night starts them; the queue stays as it was."""
    reports, matrix, inventory = setup
    for priority in ("0", "5", "0"):
        argv = ["queue", "add", str(matrix), "-i", str(inventory), "--reports", str(reports), "--priority", priority]
        assert main(argv) == 0
    assert main(["queue", "remove", "3", "--reports", str(reports)]) == 0
    before = (reports / "queue.db").read_bytes()
    capsys.readouterr()
    assert main(["queue", "run", "--reports", str(reports), "--until", "23:59", "--dry-run"]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines() if line.lstrip()[:1].isdigit()]
    assert [line[:2] for line in lines] == [["2", "queued"], ["1", "queued"]], out
    assert "m.yaml" in out and "dry run: nothing was claimed or run" in out
    assert (reports / "queue.db").read_bytes() == before and items(reports) == [(2, "queued"), (1, "queued")]
