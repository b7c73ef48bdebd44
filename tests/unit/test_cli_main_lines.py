"""cli.main's own answers where the thirteenth mutation round found none held: `orch` alone prints
its help and exits 2, an interrupted command exits 130 saying so, `orch validate` of a hunt lists
the testbed's hosts as it does for a sweep, and `orch plan` of a hunt exits 0."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from orchestrator.cli import main as cli_main
from orchestrator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
HUNT = str(REPO / "matrices/dsv4_hunt.yaml")
INVENTORY = str(REPO / "inventory/local.yaml")


def test_orch_alone_prints_its_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    said = capsys.readouterr()
    assert said.out.startswith("usage: orch") and "Start with: orch run" in said.out and said.err == ""


def test_an_interrupted_command_exits_130_saying_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "cmd_validate", interrupted)
    assert main(["validate", HUNT, "-i", INVENTORY]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_validate_of_a_hunt_lists_the_hosts_it_read(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", HUNT, "-i", INVENTORY]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "a hunt over 16 suspect flags on testbed 'local-sim'" in lines[0]
    assert lines[1].startswith("testbed 'local-sim' (") and lines[1].endswith("): 3 hosts")
    assert [line.split()[0] for line in lines[2:5]] == ["prefill", "decode", "router"]


def test_plan_of_a_hunt_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", HUNT, "-i", INVENTORY]) == 0
    assert "expected: ~" in capsys.readouterr().out


def _fleet_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

    install(monkeypatch, Fleet({"prefill": "P=0\n", "decode": "D=1\n"}))  # names resolve: the webhook's does
    return write_files(tmp_path, fake_matrix("hooked", 1), ["tb"])


def test_orch_run_posts_its_summary_to_the_webhook_and_says_it_was_delivered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the fakes (every edge faked, no process): the sweep runs, then its summary reaches the
    webhook (a receiver on loopback), and the terminal says it was delivered."""
    from team.helpers import webhook_receiver

    matrix, inventory = _fleet_run(tmp_path, monkeypatch)
    with webhook_receiver() as rx:
        args = ["run", str(matrix), "-i", str(inventory), "-t", "tb", "--out", str(tmp_path / "r"), "--run-id", "r1"]
        args.append("--skip-preflight")
        assert main([*args, "--webhook", rx.url]) == 0
    ((_, body),) = rx.received
    assert body["name"] == "hooked" and body["status"] == "completed"  # type: ignore[index]
    assert f"webhook {rx.url}" in capsys.readouterr().err


def test_orch_report_rewrites_the_index_and_names_the_page_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix, inventory = _fleet_run(tmp_path, monkeypatch)
    reports = tmp_path / "[b]reports"
    args = ["run", str(matrix), "-i", str(inventory), "-t", "tb", "--out", str(reports), "--run-id", "r1"]
    assert main([*args, "--skip-preflight"]) == 0
    (reports / "index.html").unlink()
    capsys.readouterr()
    assert main(["report", str(reports / "r1")]) == 0
    assert capsys.readouterr().out == f"report: {reports / 'r1' / 'index.html'}\n"
    assert "r1" in (reports / "index.html").read_text()  # the reports folder's index, written again
