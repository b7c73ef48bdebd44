"""bench/bench_model_sweep.py: a tiny run prints its figures (seeds run, how many broke a promise,
workloads checked, faults fired). Run in-process: the fakes start no process."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import bench_in_process


def test_tiny_run_prints_its_figures(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = bench_in_process(
        "bench_model_sweep.py", "--first", "9", "--count", "2", monkeypatch=monkeypatch, capsys=capsys
    )
    assert "seeds 9..10: 2 run, 0 broke a promise" in out, out
    assert re.search(r"^workloads checked: \d+; wall [0-9.]+ s", out, re.M), out
    assert re.search(r"^faults fired: .*interrupt", out, re.M), out
