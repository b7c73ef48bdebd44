"""bench/bench_handout.py: a tiny run prints every scenario's figures (no figure asserted: the
balance itself is pinned by tests/test_step_source.py). Run in-process, as test_bench_truth.py runs its bench."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import bench_in_process

from orchestrator.report import build


def test_tiny_run_prints_every_scenario(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    kept = build._power_text
    out = bench_in_process("bench_handout.py", "--reports", "1", monkeypatch=monkeypatch, capsys=capsys)
    for source in ("adaptive", "fixed"):
        for order in ("sequential", "randomized"):
            for difference in ("fail", "slow"):
                assert re.search(rf"^  {source}\s+{order}\s+{difference}: any finding\s+\d/1 ", out, re.M), out
    assert out.count("rule decided a cell 'different'") == 4
    assert build._power_text is kept
