"""A new user's walk through README's "Faster sweeps" (adaptive:) and "Gates for CI" (gates:),
writing the matrix the way a first try does (the sixth new-user walk): what orch plan says of an
adaptive matrix, gates a proportion cannot meet as written, and the export of a run with no gates."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventory/local.yaml")


def test_plan_of_an_adaptive_matrix_says_its_trials_are_a_most_and_what_stops_a_cell(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`orch plan` said "8 cells x 8 replicates = 64 trials" and the fixed duration for
    matrices/overlap_hunt.yaml, and not one word of its adaptive: section."""
    assert main(["plan", str(REPO / "matrices/overlap_hunt.yaml"), "-i", INVENTORY, "--seed", "1"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "= 64 trials at most" in first
    line = next(x for x in out.splitlines() if x.startswith("adaptive stopping"))
    assert "corruption" in line and "lower" in line and "0.1" in line and "alpha 0.05" in line
    assert "estimated duration: at most" in out


def test_plan_of_a_fixed_matrix_says_nothing_of_adaptive_stopping(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(REPO / "matrices/overlap_ablation.yaml"), "-i", INVENTORY, "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "at most" not in out.splitlines()[0] and "adaptive" not in out
