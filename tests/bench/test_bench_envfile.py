"""bench/bench_envfile.py: a tiny run prints every dialect, line ending and operation with its
2N/N ratio (no figure asserted)."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_output


@pytest.mark.process
def test_tiny_run_prints_each_case_with_its_scaling_ratio() -> None:
    out = bench_output("bench_envfile.py", "--entries", "200", "--repeat", "1", timeout=120)
    assert "load average" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("systemd ", "shell "))]
    assert len(rows) == 8  # 2 dialects x 2 line endings x 2 operations
    assert {(r[0], r[-4]) for r in rows} == {(d, e) for d in ("systemd", "shell") for e in ("LF", "CRLF")}
    assert all(float(r[-1]) > 0 for r in rows)  # the ratio column is a number
