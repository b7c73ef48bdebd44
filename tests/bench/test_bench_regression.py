"""bench/bench_regression.py: a tiny run prints every row of its table (no figure asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.process
def test_tiny_run_prints_the_table() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_regression.py"), "--nights", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    rows = [line for line in proc.stdout.splitlines() if line.strip() and line.strip()[0].isdigit() and "|" in line]
    assert len(rows) == 9, proc.stdout
    assert all(line.count("%") == 4 for line in rows)
    assert "method: quasi-binomial and beta-binomial" in proc.stdout
