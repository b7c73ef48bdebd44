"""What `orch resume --dry-run` exits with when a resume would run nothing (the seventh mutation
round's survivor of apitypes.named_no_culprit): 0 for a fixed sweep whose every trial finished,
1 for a hunt that ended without naming a culprit set, 0 for one that found it."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.sweep import api
from orchestrator.sweep.apitypes import ResumePreview, named_no_culprit

REPO = Path(__file__).resolve().parents[2]


def _preview(ended: tuple[str, str] | None, failed: int = 0) -> ResumePreview:
    plan = api.prepare(api.SweepRequest(REPO / "matrices/overlap_ablation.yaml", REPO / "inventory/local.yaml")).plan
    done = frozenset(range(len(plan.steps)))
    return ResumePreview("r", ("local-sim",), plan, done, (), False, ended=ended, failed=failed)


def test_a_finished_fixed_sweep_with_no_failed_trial_previews_exit_0() -> None:
    preview = _preview(None)
    assert preview.nothing_left and not preview.unanswered and preview.exit_code == 0
    assert _preview(None, failed=2).exit_code == 1


@pytest.mark.parametrize(
    ("ended", "code"), [(("found", "4 runs"), 0), (("budget", "spent"), 1), (("not_failing", "x"), 1)]
)
def test_an_ended_hunt_previews_the_exit_its_search_ended_with(ended: tuple[str, str], code: int) -> None:
    assert named_no_culprit(ended) is (code == 1)
    assert _preview(ended).exit_code == code


def test_no_ended_search_is_no_unanswered_hunt() -> None:
    assert named_no_culprit(None) is False
