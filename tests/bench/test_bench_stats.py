"""bench/bench_stats.py: a tiny run prints every table of the old-vs-new comparison. No figure asserted
(tests/test_clustered_stats.py pins the error rates and the power)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_tiny_run_prints_every_table() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_stats.py"), "--sweeps", "20", "--adaptive-sweeps", "4"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    for title in ("(1) A/A false-positive rate", "(2) A/A pair in a mixed sweep", "(3) power at ICC 0", "(4) adaptive"):
        assert title in out, out
    assert out.count("rate 15%, ICC 0.05") == 2 and "old   new" in out
