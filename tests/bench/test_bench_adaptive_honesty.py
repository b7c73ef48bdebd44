"""bench/bench_adaptive_honesty.py: a tiny run prints every figure for both designs, and leaves the
report's power sentence as it found it (the bench stubs it while it runs, in this process). No figure
asserted: the unit tests of the report's adaptive intervals pin them. Run in-process, as
test_bench_truth.py runs its bench."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import bench_in_process

from orchestrator.report import build


def test_tiny_run_prints_both_designs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    kept = build._power_text
    args = ["--runs", "3", "--rates", "0.15", "--iccs", "0.1", "--directions", "lower"]
    out = bench_in_process("bench_adaptive_honesty.py", *args, monkeypatch=monkeypatch, capsys=capsys)
    for name in ("A/A 15%", "mix"):
        for design in ("adaptive", "fixed"):
            line = rf"^  {re.escape(name)}\s+ICC 0.10 lower {design}\s*: any finding\s+\d/3 .*coverage all cells"
            assert re.search(line, out, re.M), out
    assert build._power_text is kept
