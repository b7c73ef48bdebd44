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


def _said(preview: ResumePreview) -> str:
    from rich.console import Console

    from orchestrator.cli.planview import print_resume_preview

    console = Console(width=400, record=True)
    print_resume_preview(preview, console)
    return console.export_text()


def test_the_preview_of_a_parallel_run_names_its_testbeds_as_plan_does() -> None:
    """A run across two testbeds read "resume r on testbed A, B" (one testbed named A, B?): the
    preview says where it runs in orch plan's words, one testbed as before."""
    plan = _preview(None).plan
    left = tuple(plan.steps[2:])
    two = ResumePreview("r", ("A", "B"), plan, frozenset({0, 1}), left, False)
    assert f"resume r across 2 testbeds (A, B): 2 of {len(plan.steps)} trials done" in _said(two)
    one = ResumePreview("r", ("A",), plan, frozenset({0, 1}), left, False)
    assert f"resume r on testbed A: 2 of {len(plan.steps)} trials done" in _said(one)


def test_the_preview_of_a_hunt_with_one_trial_done_counts_it_in_words() -> None:
    """The one line the preview of a hunt has read "a hunt with 1 trials done", as a typo would."""
    request = api.SweepRequest(REPO / "matrices/dsv4_hunt.yaml", REPO / "inventory/local.yaml")
    plan = api.prepare(request).plan
    for done, words in ((1, "a hunt with 1 trial done;"), (3, "a hunt with 3 trials done;")):
        preview = ResumePreview("h", ("local-sim",), plan, frozenset(range(done)), (), False)
        assert f"resume h on testbed local-sim: {words} the search picks up" in _said(preview)
