"""bench/bench_sparse_power.py: a tiny run prints every table (in-process: the interpreter and its
imports are the test run's). No figure asserted: the bench reports what the candidates achieve."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_tiny_run_prints_every_table(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench_sparse_power.py", "--sweeps", "20", "--common", "4", "--lp-rates", "3", "--lp-iccs", "2"]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(REPO / "bench" / "bench_sparse_power.py"), run_name="__main__")
    out = capsys.readouterr().out
    for title in ("(1A) simulated power", "(1B) simulated power", "(2) exact trial-level", "(3) shape B, T=2"):
        assert title in out, out
    assert out.count("quasi, phi pooled over cells (report)") == 2 and "total >= 5, trials 2-12" in out
