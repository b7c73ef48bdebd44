"""bench/bench_testbeds.py: a tiny run prints every row (no figure asserted: the A/A bound and the
power are pinned by tests/test_testbed_numbers.py)."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_in_process


def test_tiny_run_prints_every_row(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = bench_in_process("bench_testbeds.py", "--runs", "2", monkeypatch=monkeypatch, capsys=capsys)
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["normal"], ["lognormal"])]
    assert [row[:2] for row in rows] == [
        [s, cv] for s in ("normal", "lognormal") for cv in ("0.02", "0.05", "0.10", "0.20")
    ]
    assert all(len(row) == 5 and all(cell.endswith("%") for cell in row[2:]) for row in rows), out
    assert "load average" in out
