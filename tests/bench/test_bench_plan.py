"""bench/bench_plan.py: a tiny run prints each figure old vs new with its ratio (no figure asserted)."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_in_process


@pytest.mark.process
def test_tiny_run_prints_old_new_and_ratio(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # in-process: the script's own import of scipy and of the reference is the test run's; the
    # import row and `orch plan` still run in fresh processes, as they measure them
    out = bench_in_process("bench_plan.py", "--factors", "1", "--repeat", "1", monkeypatch=monkeypatch, capsys=capsys)
    assert "load average" in out
    assert "8 cells x 4 trials" in out
    for name in ("contrast_count", "quasi_detectable", "import, fresh interpreter"):
        line = next(line for line in out.splitlines() if line.startswith(name))
        assert line.split()[-1].endswith("x"), line
    assert "orch plan, end to end" in out
