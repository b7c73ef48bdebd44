"""bench/bench_sparse_power.py: a tiny run prints every table (in-process: the interpreter and its
imports are the test run's). No figure asserted: the bench reports what the candidates achieve."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_in_process


def test_tiny_run_prints_every_table(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--sweeps", "20", "--common", "4", "--lp-rates", "3", "--lp-iccs", "2"]
    out = bench_in_process("bench_sparse_power.py", *args, monkeypatch=monkeypatch, capsys=capsys)
    for title in ("(1A) simulated power", "(1B) simulated power", "(2) exact trial-level", "(3) shape B, T=2"):
        assert title in out, out
    assert out.count("quasi, phi pooled over cells (report)") == 2 and "total >= 5, trials 2-12" in out
