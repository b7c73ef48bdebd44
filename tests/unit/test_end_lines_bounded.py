"""`orch run`'s end lines are bounded: one gate over 4,096 cells (a matrix's largest) printed a
`gate failed` line per cell, 4,096 lines of up to a cell label each; the first GATES_SHOWN are
named and the rest counted (the report's Gates section lists every check)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import output
from orchestrator.cli.output import GATE_LINE_CHARS, GATES_SHOWN
from orchestrator.sweep.apitypes import SweepOutcome


def test_thousands_of_failed_gate_checks_end_in_a_few_lines(capsys: pytest.CaptureFixture[str]) -> None:
    cell = ",".join(f"f{i}={'L' * 120}" for i in range(40))  # 40 factors, 128-character levels: ~5 KB
    failed = tuple(f"no-corruption @ {cell},n={k}: upper bound 0.2 > 0.01" for k in range(4096))
    outcome = SweepOutcome(Path("reports/r1"), "r1", "completed", 4096, 0, 4096, gates_failed=failed)
    output.show_outcome(outcome)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("gate failed:")]
    assert len(lines) == GATES_SHOWN + 1, len(lines)
    assert all(len(line) <= GATE_LINE_CHARS + len("gate failed: ") for line in lines)
    assert (
        lines[-1]
        == f"gate failed: … and {4096 - GATES_SHOWN:,} more checks (the report's Gates section lists them all)"
    )
    assert len(err.encode()) < 30_000, len(err.encode())
    assert outcome.exit_code == 3  # the exit code still says a gate failed


def test_a_few_failed_checks_are_each_named_whole(capsys: pytest.CaptureFixture[str]) -> None:
    failed = ("g @ overlap=off: upper bound 0.2 > 0.01", "g @ overlap=on: no 95% interval")
    output.show_outcome(SweepOutcome(Path("reports/r1"), "r1", "completed", 8, 0, 8, gates_failed=failed))
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("gate failed:")] == [
        f"gate failed: {g}" for g in failed
    ]


def test_a_gate_line_is_cut_at_its_stated_length_not_a_character_later(capsys: pytest.CaptureFixture[str]) -> None:
    whole, longer = "g" * 1000, "g" * 1001
    output.show_outcome(SweepOutcome(Path("reports/r1"), "r1", "completed", 2, 0, 2, gates_failed=(whole, longer)))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gate failed:")]
    assert lines == [f"gate failed: {whole}", f"gate failed: {'g' * 999}…"]
