"""Gates no data could pass under the plan, said by `orch plan` before the sweep (else `orch run`
exits 3 after hours, whatever the data): the best case in the interval code the gate reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.cli.planview import REPORT_INTERVALS
from orchestrator.core import clustered, gates, ranks
from orchestrator.core.clustered import widened_rate
from orchestrator.core.gates import Gate, PlannedCell, best_bound, default_name

REPO = Path(__file__).resolve().parents[1]
CLEAN = Gate(name="clean", metric="corruption", upper=0.01)


def unreachable(
    gates_: list[Gate], planned: list[PlannedCell], proportions: set[str], sessions: int | None
) -> list[str]:
    """core.gates.unreachable with the report's own interval code, as `orch plan` calls it."""
    return gates.unreachable(gates_, planned, proportions, sessions, REPORT_INTERVALS)


def cells(trials: int, n: int = 4) -> list[PlannedCell]:
    return [PlannedCell({"overlap": "on" if i % 2 else "off"}, trials) for i in range(n)]


def test_the_best_case_is_the_reports_own_interval_with_no_event() -> None:
    # one trial per cell: the report cannot estimate a dispersion and widens by the assumed one
    unestimable = clustered.Dispersion(phi=1.0, df=0.0, trials=0, cells=0, most_trials=1, sessions_per_trial=40)
    assert best_bound("upper", 40, 1, 1, REPORT_INTERVALS) == pytest.approx(widened_rate(0, 40, unestimable, 1).high)
    assert best_bound("lower", 40, 1, 1, REPORT_INTERVALS) == pytest.approx(widened_rate(40, 40, unestimable, 1).low)
    # replicates: an estimated dispersion widens by at least 1, so Wilson's own bound is the best case
    assert best_bound("upper", 10, 2, 2, REPORT_INTERVALS) == pytest.approx(widened_rate(0, 20, None).high)


def test_a_proportion_gate_too_tight_for_the_sessions_is_named_with_what_it_needs() -> None:
    (warning,) = unreachable([CLEAN], cells(2), {"corruption"}, 10)
    assert warning == (
        "gate 'clean' (corruption <= 0.01) cannot pass: with 20 sessions per cell (10 x 2 trials) even 0 events "
        "give an upper 95% bound of 0.16; needs about 382 sessions per cell (191 per trial at 2 trials)"
    )
    assert (
        best_bound("upper", 191, 2, 2, REPORT_INTERVALS) <= 0.01 < best_bound("upper", 190, 2, 2, REPORT_INTERVALS)
    )  # "about 382" is the edge
    assert unreachable([CLEAN], cells(2), {"corruption"}, 191) == []


def test_one_trial_per_cell_cannot_certify_a_tight_gate_at_any_number_of_sessions() -> None:
    (warning,) = unreachable([CLEAN], cells(1), {"corruption"}, 10_000)
    assert "one trial cannot show it at any number of sessions" in warning
    assert "needs 2 or more trials per cell, about 382 sessions per cell" in warning
    loose = Gate(name=default_name("corruption", 0.05, None, {}), metric="corruption", upper=0.05)
    (warning,) = unreachable([loose], cells(1), {"corruption"}, 40)
    assert warning.startswith("gate 'corruption <= 0.05 (every cell)' cannot pass: with 40 sessions per cell")
    assert "(40 x 1 trial)" in warning and "per trial at 1 trial)" in warning


def test_a_lower_gate_on_a_proportion_is_judged_with_every_session_an_event() -> None:
    gate = Gate(name="ok", metric="success", lower=0.99)
    (warning,) = unreachable([gate], cells(2), {"success"}, 10)
    assert "even 20 events give a lower 95% bound of 0.84" in warning
    assert unreachable([Gate(name="z", metric="success", upper=0.0)], cells(2), {"success"}, 10)[0].endswith(
        "no number of sessions gets there"
    )


def test_a_numeric_gate_needs_trials_enough_for_an_interval_of_the_median() -> None:
    gate = Gate(name="p99", metric="p99_ms", upper=2500)
    (warning,) = unreachable([gate], cells(5), set(), None)
    assert "with 5 trials per cell the median has no 95% interval" in warning
    assert warning.endswith("needs 6 or more trials per cell (--replicates 6)")
    assert unreachable([gate], cells(6), set(), None) == []
    # the report's own interval agrees: none of 5 values, one of 6
    assert ranks.median_interval([1, 2, 3, 4, 5]).low is None
    assert ranks.median_interval([1, 2, 3, 4, 5, 6]).low is not None


def test_the_cell_with_fewest_trials_decides_and_a_selector_must_match_a_planned_cell() -> None:
    planned = [PlannedCell({"overlap": "on"}, 8), PlannedCell({"overlap": "off"}, 2)]
    only_on = Gate(name="on", metric="wall", upper=60, cells={"overlap": "on"})
    every = Gate(name="every", metric="wall", upper=60)
    nowhere = Gate(name="gone", metric="wall", upper=60, cells={"overlap": "maybe"})
    warnings = unreachable([only_on, every, nowhere], planned, set(), None)
    assert [w.split(" cannot pass")[0] for w in warnings] == ["gate 'every' (wall <= 60)", "gate 'gone' (wall <= 60)"]
    assert warnings[1].endswith("it selects no cell of this plan")


def test_unknown_sessions_per_trial_leave_proportions_unjudged() -> None:
    assert unreachable([CLEAN], cells(2), {"corruption"}, None) == []


def _matrix(tmp_path: Path, gates: str) -> str:
    path = tmp_path / "m.yaml"
    path.write_text((REPO / "matrices/overlap_ablation.yaml").read_text() + gates)
    return str(path)


def test_orch_plan_warns_of_each_gate_that_cannot_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = _matrix(
        tmp_path, "gates:\n  - {name: clean, metric: corruption, upper: 0.01}\n  - {metric: wall, upper: 60}\n"
    )
    assert main(["plan", matrix, "-i", str(REPO / "inventory/local.yaml"), "--replicates", "2"]) == 0
    out = capsys.readouterr().out
    line = Path(matrix).read_text().splitlines().index("gates:") + 2  # the gate's own line
    assert (
        f"warning: {matrix}:{line}: gate 'clean' (corruption <= 0.01) cannot pass: "
        "with 80 sessions per cell (40 x 2 trials) even 0 events give an upper 95% bound of 0.046; "
        "needs about 382 sessions per cell (191 per trial at 2 trials)"
    ) in out
    assert f"warning: {matrix}:{line + 1}: gate 'wall <= 60 (every cell)' cannot pass: with 2 trials per cell" in out


def test_orch_plan_is_quiet_about_gates_the_design_can_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = _matrix(tmp_path, "gates:\n  - {metric: corruption, upper: 0.05}\n  - {metric: wall, upper: 60}\n")
    assert main(["plan", matrix, "-i", str(REPO / "inventory/local.yaml")]) == 0  # 8 x 40 sessions
    assert "cannot pass" not in capsys.readouterr().out


def test_orch_validate_warns_of_a_gate_that_cannot_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """validate is what a CI step runs before a sweep: valid (exit 0), but the gate said now."""
    matrix = _matrix(tmp_path, "gates:\n  - {name: clean, metric: corruption, upper: 0.001}\n")
    assert main(["validate", matrix, "-i", str(REPO / "inventory/local.yaml")]) == 0
    captured = capsys.readouterr()
    assert "gate 'clean' (corruption <= 0.001) cannot pass" in " ".join(captured.err.split())
    assert ": ok —" in captured.out
