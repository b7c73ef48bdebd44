"""bench/bench_adaptive_numbers.py: a tiny run prints the wall's figures for both designs, and leaves
the report's power sentence as it found it. No figure asserted here: test_adaptive's
test_a_wall_driven_by_the_failures_of_cells_stopped_high_is_no_finding_after_the_stop pins the case."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import bench_in_process

from orchestrator.report import build


def test_tiny_run_prints_both_designs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    kept = build._power_text
    args = ["--runs", "2", "--iccs", "0.1", "--rhos", "0.9"]
    out = bench_in_process("bench_adaptive_numbers.py", *args, monkeypatch=monkeypatch, capsys=capsys)
    for design in ("adaptive", "fixed"):
        line = rf"^  A/A 15%\s+ICC 0.10 rho 0.9 lower {design}\s*: wall finding\s+\d/2 .*shifts hold 0"
        assert re.search(line, out, re.M), out
    assert build._power_text is kept
