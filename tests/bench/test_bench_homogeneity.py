"""bench/bench_homogeneity.py: a tiny run prints each leg's table (no figure asserted: the A/A bound,
the power kept and the tables drawn are pinned by tests/test_trial_homogeneity.py). In-process, as
test_bench_stats, and only up to 40 trials: the old test takes seconds a call beyond."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_in_process


def test_tiny_run_prints_every_leg(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "--cells",
        "3",
        "--cpu-cells",
        "1",
        "--normal-tables",
        "200",
        "--trials",
        "3,8,40",
        "--sweeps",
        "2",
    ]
    out = bench_in_process("bench_homogeneity.py", *args, monkeypatch=monkeypatch, capsys=capsys)
    for title in ("(1) share rejected", "(2) CPU per call", "(3) the normal law", "(4) the report's caution"):
        assert title in out, out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["3"], ["8"], ["40"])]
    assert len(rows) == 3 * 4 * 4 + 3 * 4 * 2 + 3, out  # (1) T x design x ICC, (2) T x design x 2 ICCs, (3) 40 x 3
    caution = [line.split() for line in out.split("(4) the report's caution")[1].splitlines()[3:]]
    assert [row[0] for row in caution if row] == ["0.0", "0.02", "0.1", "0.3"], out  # (4): one row per ICC
    assert "load average" in out
