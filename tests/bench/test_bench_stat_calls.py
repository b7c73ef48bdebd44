"""bench/bench_stat_calls.py: a tiny run checks orch's statistics calls equal scipy's on its inputs
and prints each timing beside scipy's with their ratio (no figure asserted: speed is the bench's)."""

from __future__ import annotations

import pytest
from helpers.benchrun import bench_in_process


@pytest.mark.process
def test_tiny_run_prints_every_row_beside_scipy(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # in-process: no second interpreter nor second import of scipy (the figures are not asserted)
    out = bench_in_process(
        "bench_stat_calls.py", "--calls", "40", "--repeat", "1", monkeypatch=monkeypatch, capsys=capsys
    )
    assert "load average" in out
    names = ("midranks vs rankdata:", "pearson_chi2 vs chi2_contingency:", "fisher_exact (", "number effect,")
    names += ("wilson vs", "newcombe vs", "fisher_exact, not remembered", "mann_whitney vs", "trend vs")
    for name in names:
        line = next(line for line in out.splitlines() if line.startswith(name))
        assert "orch" in line and "ratio" in line, line
    assert "report render: first" in out and "second" in out
