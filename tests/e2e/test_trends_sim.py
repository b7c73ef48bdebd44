"""Nightly runs of one matrix on the bundled simulator: after the second run, reports/index.html
groups both under Trends with a trend per cell, and the newest run was checked against the first
(no change flagged: the same configuration twice). Real processes on loopback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.sim_sweep import make_inventory

from orchestrator.cli.main import main

pytestmark = pytest.mark.sim

MATRIX = """\
name: nightly
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
replicates: 2
order: sequential
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 8 --rounds 1 --seed {trial_seed}"
  timeout: 120
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""


def test_two_nights_of_one_matrix_show_a_trend_per_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv, _ = make_inventory(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    reports = tmp_path / "reports"
    for night in ("night-1", "night-2"):
        code = main(["run", str(tmp_path / "m.yaml"), "-i", str(inv), "--out", str(reports), "--run-id", night])
        assert code == 0, capsys.readouterr()
    page = (reports / "index.html").read_text()
    assert 'id="trends"' in page and "nightly" in page
    assert page.count('<svg class="trend"') == 2  # one per cell
    trend = re.findall(r'<svg class="trend".*?</svg>', page, re.S)[0]
    assert trend.count("<circle") == 2  # both nights on the line
    assert "no cell or metric differs significantly from the earlier runs" in page  # not "changed": not shown
    assert "changed vs earlier runs:" not in page
