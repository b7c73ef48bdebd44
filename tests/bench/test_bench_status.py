"""bench/bench_status.py: a tiny run serves /status and /api/status from two trees (HEAD as
before) over loopback and prints both views of each side by side (no figure asserted)."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_output


@pytest.mark.process
def test_tiny_run_prints_both_views_before_and_after() -> None:
    out = bench_output("bench_status.py", "--runs", "3", "--before", "HEAD", timeout=300)
    assert "load average" in out and "before: HEAD, after: this checkout" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["3"]]
    assert [r[1] for r in rows] == ["/status", "/api/status"]
    for r in rows:
        assert all(float(x) > 0 for x in r[2:6]) and r[6].endswith("x"), r
