"""bench/bench_memory.py: a tiny run prints each command's peak RSS before and after, with the
ratio and whether both legs wrote the same output (no figure asserted)."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import bench_output


@pytest.mark.process
def test_tiny_run_prints_before_after_and_the_same_output() -> None:
    # 24 trials: 3 replicates a cell. With 2, compare's page now says (on purpose, since the baseline
    # revision) that no number comparison can reach significance, so the pages would differ in that
    # sentence; with 3 the two legs' pages must be the same but for the stylesheet
    out = bench_output("bench_memory.py", "--trials", "24", "--commands", "parquet,compare", timeout=300)
    assert "load average" in out
    assert "2 runs x 24 trials" in out
    for label in ("orch export A --format parquet", "orch compare A B"):
        line = next(line for line in out.splitlines() if line.startswith(label))
        assert re.search(r" \d+ +\d+ +\d+\.\dx ", line), line  # before MB, after MB, before/after
        assert line.endswith(("same data", "same bytes")), line
