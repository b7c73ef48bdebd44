"""Smoke run of bench_hunt.py in a tiny mode: it finishes and prints each figure beside the two
baselines (the figures themselves are the benchmark's to measure, not asserted here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.process
def test_bench_hunt_prints_figures_beside_the_baselines() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH / "bench_hunt.py"), "--hunts", "1", "--testbeds", "2", "--jobs", "1"]
        + ["--settings", "one-flag", "--parallel", "one-flag"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "one-flag-at-a-time 1,360 sessions" in out.stdout and "full factorial 65,536 configs" in out.stdout
    row = re.search(
        r"^one-flag\s+(\d+\.\d)%\s+(\d+\.\d)%\s+(\d+)\s+(\d+)\s+(\d+)\s+\d+\.\d%\s+\d+\.\d\d%\s+\|", out.stdout, re.M
    )
    assert row, out.stdout
    assert float(row[1]) + float(row[2]) <= 100.0 and int(row[3]) > 0
