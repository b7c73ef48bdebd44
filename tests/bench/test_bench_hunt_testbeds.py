"""Smoke run of bench_hunt_testbeds.py in a tiny mode: it finishes and prints each scenario's
figures (the figures are the benchmark's to measure, not asserted here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.process
def test_bench_hunt_testbeds_prints_each_scenario() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH / "bench_hunt_testbeds.py"), "--hunts", "1", "--setting", "one-flag"]
        + ["--extra", "0.05"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "one-flag (truth ['flag13'])" in out.stdout, out.stdout
    assert re.search(r"tb1 background \+5\.0%: exact +\d+\.\d%, wrong set found [01]/1 ", out.stdout), out.stdout
