"""bench/bench_stats.py: a tiny run prints every table of the old-vs-new comparison. No figure asserted
(tests/test_clustered_stats.py pins the error rates and the power). Run in-process: a subprocess
paid the interpreter and scipy's import again (half the test's time)."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_in_process


def test_tiny_run_prints_every_table(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--sweeps", "20", "--adaptive-sweeps", "4"]
    out = bench_in_process("bench_stats.py", *args, monkeypatch=monkeypatch, capsys=capsys)
    for title in ("(1) A/A false-positive rate", "(2) A/A pair in a mixed sweep", "(3) power at ICC 0", "(4) adaptive"):
        assert title in out, out
    assert out.count("rate 15%, ICC 0.05") == 2 and "old   new" in out
