"""A resume's first lines: a run with every trial done says so once, where it also said
"resuming r1: 0 of 4 trials left" on stderr beside "all 4 trials are already done" on stdout (the
fifth new-user walk: `orch resume` of a finished run with failed trials printed both)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.output import announce
from orchestrator.sweep.apitypes import Started


def test_a_finished_run_is_said_done_once(capsys: pytest.CaptureFixture[str]) -> None:
    announce(Started("r1", Path("reports/r1"), ("local-sim",), trials=4, left=0, resumed=True))
    got = capsys.readouterr()
    assert got.out == "reports/r1: all 4 trials are already done\n"
    assert got.err == ""


def test_a_resume_with_trials_left_says_how_many(capsys: pytest.CaptureFixture[str]) -> None:
    announce(Started("r1", Path("reports/r1"), ("local-sim",), trials=4, left=2, resumed=True))
    got = capsys.readouterr()
    assert (got.out, got.err) == ("", "resuming r1: 2 of 4 trials left\n")


def test_a_resumed_hunt_with_one_trial_done_says_one_trial(capsys: pytest.CaptureFixture[str]) -> None:
    """A hunt resumed after its first trial read "resuming h1: 1 trials done"."""
    from orchestrator.core.config import read_matrix

    hunt = read_matrix(Path(__file__).resolve().parents[2] / "matrices/dsv4_hunt.yaml").hunt
    for trials, words in ((1, "1 trial done"), (5, "5 trials done")):
        announce(Started("h1", Path("reports/h1"), ("local-sim",), trials=trials, left=0, resumed=True, hunt=hunt))
        got = capsys.readouterr()
        assert got.err == f"resuming h1: {words}; hunt on local-sim -> reports/h1 (its total is decided as it goes)\n"


def test_a_folder_with_brackets_is_printed_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """Run folders and resume counts are printed as plain text: `[bold]` in a reports folder's name
    (a path may hold brackets) was read as rich markup and dropped from the line."""
    folder = Path("reports/[bold]x/r1")
    announce(Started("r1", folder, ("local-sim",), trials=4, left=4))
    assert capsys.readouterr().err == "run r1: 4 trials on local-sim -> reports/[bold]x/r1\n"
    announce(Started("r[b]1", folder, ("local-sim",), trials=4, left=2, resumed=True))
    assert capsys.readouterr().err == "resuming r[b]1: 2 of 4 trials left\n"
