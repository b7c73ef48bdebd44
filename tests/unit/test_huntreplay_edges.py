"""core.huntreplay on a journal's odd trials: a completed trial without its hunt metric, or whose
metric has no session count, is no evidence but a trial that gave no data (said so in the stop
reason's words), and a trial of levels that are none of the hunt's configurations (a matrix
edited between runs) is neither; none of them crashes the replay that resume, the report and the
runs index make. (Mutation round six: each case failed on a mutant the hunt tests let through.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.hunt_runs import hunt_trial

from orchestrator.core.config import read_matrix
from orchestrator.core.huntreplay import counts_of, replay
from orchestrator.core.model import Matrix
from orchestrator.core.records import MetricValue, TrialRecord

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return read_matrix(REPO / "matrices" / "dsv4_hunt.yaml")


def _record(matrix: Matrix, metrics: dict[str, MetricValue], levels: dict[str, str] | None = None) -> TrialRecord:
    """Trial 7, completed, of the failing configuration (or `levels`), with exactly `metrics`."""
    assert matrix.hunt is not None
    levels = levels if levels is not None else dict(matrix.hunt.levels(0))
    return hunt_trial(levels, 7, 0).model_copy(update={"metrics": metrics})


@pytest.mark.parametrize(
    "metrics",
    [{}, {"corruption": MetricValue(kind="number", value=1.0)}, {"wall": MetricValue(kind="number", value=1.0)}],
    ids=["no metrics", "no count (a number under its name)", "another metric"],
)
def test_a_completed_trial_without_a_count_is_a_trial_of_no_data(
    matrix: Matrix, metrics: dict[str, MetricValue]
) -> None:
    assert matrix.hunt is not None
    record = _record(matrix, metrics)
    assert counts_of(matrix.hunt, record) is None
    hunt = replay(matrix, [record])
    assert (hunt.trials, hunt.sessions, hunt.empty) == (0, 0, 1)
    assert hunt.empty_note.startswith("trial 7 completed: no sessions of corruption counted (")


def test_a_trial_outside_the_hunts_configurations_is_neither_evidence_nor_no_data(matrix: Matrix) -> None:
    assert matrix.hunt is not None
    levels = {**dict(matrix.hunt.levels(0)), "cuda_graph": "maybe"}  # no level of the hunt's
    record = _record(matrix, {"corruption": MetricValue(kind="proportion", k=3, n=20)}, levels)
    assert matrix.hunt.config_of(levels) is None
    assert counts_of(matrix.hunt, record) is None
    hunt = replay(matrix, [record])
    assert (hunt.trials, hunt.sessions, hunt.empty) == (0, 0, 0)


def test_a_counted_trial_is_evidence(matrix: Matrix) -> None:
    assert matrix.hunt is not None
    record = _record(matrix, {"corruption": MetricValue(kind="proportion", k=2, n=20)})
    assert counts_of(matrix.hunt, record) == (0, 2, 20)
    hunt = replay(matrix, [record])
    assert (hunt.trials, hunt.sessions, hunt.empty) == (1, 20, 0)
