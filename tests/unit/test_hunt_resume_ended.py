"""The dry run of a resume of a hunt that has ended (found, budget, not failing: its journal says
so once replayed) says that nothing is left and why the hunt ended, as its report says it, and
exits as the resume does. Why: it said "the search picks up from its journal and decides the next
trials as it goes", exit 0, and the resume then ran no trial (the third new-user walk)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.hunt_runs import hunt_run, small_hunt, truth_answer
from helpers.inproc import orch_in

from orchestrator.core.huntreplay import replay
from orchestrator.core.steps import Step
from orchestrator.report.hunt import hunt_report, verdict
from orchestrator.sweep import api

REPO = Path(__file__).resolve().parents[2]


def _commands(matrix: Path, run: Path) -> list[list[str]]:
    return [["resume", str(run), "--dry-run"], ["hunt", str(matrix), "--resume", str(run), "--dry-run"]]


def _no_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    def resumed(*args: object, **kwargs: object) -> object:
        raise AssertionError("a dry run resumed the hunt")

    monkeypatch.setattr(api, "resume", resumed)


def _ended_run(tmp_path: Path, fail_first: bool) -> tuple[Path, Path]:
    """A hunt run to its end (found); `fail_first`: its first trial's repro crashed (asked again)."""
    m = small_hunt(tmp_path)
    run = tmp_path / "reports" / "h1"

    def fail(step: Step, handed: int) -> bool:
        return fail_first and step.trial.index == 0 and handed == 0

    records = hunt_run(run, m, truth_answer(m, fail=fail))
    assert replay(m, records).propose() is None  # the search hands out no further trial
    return m.path, run


@pytest.mark.parametrize("fail_first", [False, True], ids=["all-completed", "a-trial-failed"])
def test_the_dry_run_of_an_ended_hunt_says_it_ended_and_exits_as_the_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_first: bool
) -> None:
    matrix, run = _ended_run(tmp_path, fail_first)
    report = hunt_report(run)
    assert report is not None
    state, reason = verdict(report)
    assert state == "found"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    _no_resume(monkeypatch)
    for args in _commands(matrix, run):
        done = orch_in(args, REPO)
        out = " ".join(done.stdout.split())
        # the resume's exit code: 1 once a trial of the run failed (SweepOutcome.exit_code), else 0
        assert done.returncode == (1 if fail_first else 0), (args, out, done.stderr)
        assert "nothing left to run: the hunt has ended after" in out, out
        assert f"(found: {' '.join(reason.split())}); a resume runs no trial" in out, out
        assert "picks up" not in out and "decides the next trials" not in out, out
        assert ("1 trial of the run failed: the resume exits 1" in out) == fail_first, out
        assert "dry run: nothing was changed" in out, out
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_the_dry_run_of_a_hunt_still_searching_says_the_search_picks_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = small_hunt(tmp_path)
    run = tmp_path / "reports" / "h1"
    hunt_run(run, m, truth_answer(m), limit=6, status="interrupted")
    _no_resume(monkeypatch)
    for args in _commands(m.path, run):
        done = orch_in(args, REPO)
        out = " ".join(done.stdout.split())
        assert done.returncode == 0, (args, out, done.stderr)
        assert "a hunt with 6 trials done; the search picks up from its journal" in out, out
        assert "has ended" not in out, out
