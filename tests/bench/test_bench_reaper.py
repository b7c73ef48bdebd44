"""bench/bench_reaper.py: a tiny run prints both trees' wall and recorded duration per trial and the
cost added per trial (no figure asserted)."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import bench_output


@pytest.mark.process
def test_tiny_run_prints_before_after_and_the_added_cost() -> None:
    out = bench_output("bench_reaper.py", "--trials", "4", "--rounds", "2", timeout=300)
    assert "load average" in out
    assert "4 trials per tree" in out
    for tree in ("before", "after"):
        line = next(line for line in out.splitlines() if line.startswith(tree))
        assert re.fullmatch(rf"{tree} +\d+\.\d +\d+\.\d +\d+\.\d", line), line
    assert re.search(r"^added per trial \(median after - median before\): -?\d+\.\d ms$", out, re.MULTILINE)
    assert re.search(r"^python -I -S -c pass, spawn to exit: median \d+\.\d ms, p90 \d+\.\d ms$", out, re.MULTILINE)
