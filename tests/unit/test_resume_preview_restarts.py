"""`orch resume --dry-run` shows the restarts the resume makes (found by the new-user walk: its table
showed `-` for the first trial left, and each later trial's restarts against the trial before it in
the plan, though those between are done; the resume restarts against the trial it ran before).

Checked against the resume itself on the fakes: each trial's journaled `restarted` units equal the
preview's row for it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import Reply
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files
from rich.console import Console

from orchestrator.cli.planview import print_resume_preview
from orchestrator.core.records import TrialRecord
from orchestrator.store.journal import read_journal
from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress


def _trials(run_dir: Path) -> list[TrialRecord]:
    return [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]


def _quiet(started: api.Started) -> QuietProgress:
    return QuietProgress()


def _stopped_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_at: int) -> tuple[Fleet, Path]:
    """A randomized 2x3 sweep (factor d on decode; prefill never edited) Ctrl-C'd in trial `stop_at`'s workload."""
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("preview", 3, extra="seed: 7\n"), ["A"])
    calls = []

    def repro(testbed: str, command: str) -> Reply | None:
        calls.append(command)
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        return None

    fleet.repro_hook = repro
    req = api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True)
    outcome = api.run(req, _quiet, warn=lambda message: None)
    assert outcome.interrupted
    fleet.repro_hook = None
    return fleet, outcome.run_dir


@pytest.mark.parametrize("stop_at", [2, 5])  # 5: the first trial left is the same cell as the one before it
def test_the_preview_shows_the_restarts_the_resume_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_at: int
) -> None:
    fleet, run_dir = _stopped_run(tmp_path, monkeypatch, stop_at)
    preview = api.preview_resume(run_dir)
    before = {r.trial for r in _trials(run_dir) if r.status == "completed"}
    resumed = api.resume(api.ResumeRequest(run_dir), _quiet, warn=lambda message: None)
    assert resumed.status == "completed"
    ran = [r for r in _trials(run_dir) if r.trial not in before and r.status == "completed"]
    assert [r.trial for r in ran] == [s.trial.index for s in preview.left]
    shown = [[f"{key}:{unit}" for key, unit in s.restart_units] for s in preview.left]
    assert shown == [r.restarted for r in ran]
    assert shown[0] == ["decode:A-decode"] and fleet.managers[("A", "prefill")].restarts() == []


def test_the_preview_says_why_the_first_trial_restarts_every_edited_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, run_dir = _stopped_run(tmp_path, monkeypatch, 3)
    preview = api.preview_resume(run_dir)
    console = Console(width=200, record=True)
    print_resume_preview(preview, console)
    text = console.export_text()
    assert preview.restarts_unknown == ("the first trial restarts every unit of the hosts the matrix edits" in text)


def test_a_trial_left_restarts_against_the_trial_left_before_it_not_the_plans() -> None:
    """Pure: with every other trial done, each trial left restarts exactly when its cell's env differs
    from the trial left before it (the plan's own column compares with the done trial between them)."""
    from orchestrator.core.config import read_inventory, read_matrix
    from orchestrator.core.plan import make_plan, resumed_steps

    repo = Path(__file__).resolve().parents[2]
    matrix = read_matrix(repo / "matrices" / "overlap_ablation.yaml")
    testbed = next(iter(read_inventory(repo / "inventory" / "local.yaml").testbeds.values()))
    plan = make_plan(matrix, testbed, 3, 3)
    left = plan.steps[1::2]
    steps = resumed_steps(matrix, testbed, left, unknown=False)
    assert [s.trial for s in steps] == [s.trial for s in left]
    for before, step in zip(steps, steps[1:], strict=False):
        assert bool(step.restart_units) == (step.env != before.env), step.trial
    assert any(
        a.restart_units != b.restart_units for a, b in zip(steps, left, strict=True)
    )  # the plan's column differs
    unknown = resumed_steps(matrix, testbed, left, unknown=True)[0]
    every = {(key, u.name) for role in matrix.roles for key in testbed.roles[role] for u in testbed.hosts[key].units}
    assert set(unknown.restart_units) == every and unknown.restart_units != ()
