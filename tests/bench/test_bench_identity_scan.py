"""bench/bench_identity_scan.py: a tiny run prints both ways for each setting and scan_here end to
end (no figure asserted: what the lookups find is pinned by tests/unit/test_sockdiag.py)."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import bench_in_process


def test_tiny_run_prints_both_ways_and_their_ratio(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = bench_in_process(
        "bench_identity_scan.py", "--scans", "6", "--connections", "0,20", monkeypatch=monkeypatch, capsys=capsys
    )
    rows = [line for line in out.splitlines() if re.search(r"\d+\.\dx$", line)]
    assert len(rows) == 3, out  # two settings, scan_here end to end in the first
    assert "(+0 held)" in rows[0] and "scan_here end to end" in rows[1] and "(+20 held)" in rows[2], out
    assert "load average" in out
