"""Smoke runs of bench_parallel.py and bench_adaptive.py in tiny modes: they finish and print
their figures (speed is never asserted; the benchmarks exist to measure it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.sim
def test_bench_parallel_prints_the_speed_up():
    # 1 repro session a trial (was 4): the figures are printed whatever the repro's size, and the
    # sweep is the same (4 trials, each a restart of decode and a repro) on 1 testbed and on 2
    out = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_parallel.py"),
            "--testbeds",
            "2",
            "--trials",
            "4",
            "--warmup",
            "0.2",
            "--sessions",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"speed-up: \d+\.\d\dx with 2 testbeds", out.stdout), out.stdout
    assert re.search(r"^\s+2\s+\d+\.\d\s+\d+$", out.stdout, re.M), out.stdout


@pytest.mark.process
def test_bench_adaptive_prints_decisions_sessions_and_error():
    out = subprocess.run(
        [sys.executable, str(BENCH / "bench_adaptive.py"), "--sweeps", "5"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for label in ("(a) same decisions as fixed", "(b) sessions used vs fixed", "(c) A/A at 15%"):
        assert label in out.stdout, out.stdout
