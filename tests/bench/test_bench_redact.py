"""bench/bench_redact.py: a tiny run prints both inputs beside the linear scan (no figure asserted)."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_output


@pytest.mark.process
def test_tiny_run_prints_both_inputs_with_their_ratio() -> None:
    out = bench_output("bench_redact.py", "--mb", "0.05", "--repeat", "1", timeout=120)
    assert "load average" in out
    for name in ("log lines:", "one long name run:"):
        line = next(line for line in out.splitlines() if line.startswith(name))
        assert "ms/MB" in line and "ratio" in line and "x (0.05 MB)" in line
