"""bench/bench_truth.py: a tiny run prints every leg's figures, and leaves the report's power sentence
as it found it (the bench stubs it while it runs, in this process). No figure asserted: the tests of
each fix pin them (tests/test_report_missing.py, tests/test_power.py). Run in-process, as
test_bench_stats.py runs its bench."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_in_process

from orchestrator.report import build


def test_tiny_run_prints_every_leg(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    kept = build._power_text
    args = ["--runs", "2", "--power-runs", "1", "--adaptive-sweeps", "4", "--power-designs", "8:0"]
    out = bench_in_process("bench_truth.py", *args, monkeypatch=monkeypatch, capsys=capsys)
    for title in ("(1) A/A", "(2) Missing outcomes", "(3) Adaptive stopping", "(3b) Adaptive A/A", "(4) Power"):
        assert title in out, out
    assert "all designs:" in out and "orch plan: Fisher+Holm(29)" in out and "quasi+Holm, no events elsewhere" in out
    assert build._power_text is kept
