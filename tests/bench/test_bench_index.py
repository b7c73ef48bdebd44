"""bench/bench_index.py: a tiny run prints each step before and after with its ratio (no figure asserted)."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_output


@pytest.mark.process
def test_tiny_run_prints_before_after_and_ratio() -> None:
    out = bench_output("bench_index.py", "--runs", "5", "--rounds", "1", timeout=300)
    assert "load average" in out and "5 run folders" in out
    for step in ("first view", "second view", "one summary.json changed", "one run added", "one run removed"):
        line = next(line for line in out.splitlines() if line.startswith(step))
        assert line.split()[-1].endswith("x"), line
    assert "/api/runs again" in out
    assert "held after a view of 5 runs: all series" in out and "EntryCache" in out
