"""`orch report` of a journal whose last line is torn (the controller stopped mid-write): the page
noted it, the terminal said only 'report: ...' (a new user's walk of README's "### Reports")."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli.main import main
from orchestrator.store.journal import torn_line


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    manifest, records = synthetic_run()
    return write_run(tmp_path / "reports" / manifest.run_id, manifest, records)


def test_report_of_a_torn_journal_warns_on_the_terminal_naming_the_line(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = run_dir / "journal.jsonl"
    whole = journal.read_text().count("\n")
    with journal.open("a") as handle:
        handle.write('{"type": "trial", "run_id": ')  # the controller stopped mid-write
    assert main(["report", str(run_dir)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"warning: {journal}:{whole + 1}: the journal's last line is torn" in err, err


def test_report_of_a_whole_journal_says_nothing_torn(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(run_dir)]) == 0
    assert "torn" not in capsys.readouterr().err
    assert torn_line(run_dir / "journal.jsonl") is None


def test_the_torn_line_is_counted_past_a_block(tmp_path: Path) -> None:
    """Its number is counted a block (1 MiB) at a time: the same past the first block."""
    journal = tmp_path / "journal.jsonl"
    line = '{"type": "event", "run_id": "r", "event": "run_started", "at": "' + "x" * 100 + '"}\n'
    lines = (3 << 20) // len(line)
    journal.write_text(line * lines + line[:-10])
    assert torn_line(journal) == lines + 1


def test_report_of_a_run_without_a_journal_warns_of_no_torn_line(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run stopped before its first trial has no journal: its report is written, and nothing
    is said of a torn line (there is no line)."""
    (run_dir / "journal.jsonl").unlink()
    assert main(["report", str(run_dir)]) == 0
    said = capsys.readouterr()
    assert "torn" not in said.err and said.out == f"report: {run_dir / 'index.html'}\n"
