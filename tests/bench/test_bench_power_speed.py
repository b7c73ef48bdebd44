"""bench/bench_power_speed.py: a tiny run prints the solve's CPU old vs new, its ratio, and that they agree."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_in_process


@pytest.mark.process
def test_tiny_run_prints_old_new_ratio_and_equal_answers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # in-process: no second interpreter nor second import of scipy (the figures are not asserted)
    out = bench_in_process("bench_power_speed.py", "--tiny", "--repeat", "1", monkeypatch=monkeypatch, capsys=capsys)
    assert "load average" in out
    line = next(line for line in out.splitlines() if line.startswith("10x3 +1"))
    *_, ratio, same = line.split()
    assert ratio.endswith("x") and same == "True", line
