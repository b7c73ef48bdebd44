"""bench/bench_regression.py: a tiny run prints every row of its table (no figure asserted)."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_output


@pytest.mark.process
def test_tiny_run_prints_the_table() -> None:
    out = bench_output("bench_regression.py", "--nights", "2", timeout=300)
    rows = [line for line in out.splitlines() if line.strip() and line.strip()[0].isdigit() and "|" in line]
    assert len(rows) == 9, out
    assert all(line.count("%") == 4 for line in rows)
    assert "method: quasi-binomial and beta-binomial" in out
