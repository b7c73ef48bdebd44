"""bench/bench_power_speed.py: a tiny run prints the solve's CPU old vs new, its ratio, and that they agree."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_output


@pytest.mark.process
def test_tiny_run_prints_old_new_ratio_and_equal_answers() -> None:
    out = bench_output("bench_power_speed.py", "--tiny", "--repeat", "1", timeout=120)
    assert "load average" in out
    line = next(line for line in out.splitlines() if line.startswith("10x3 +1"))
    *_, ratio, same = line.split()
    assert ratio.endswith("x") and same == "True", line
