"""The README's demo, as a test: the shipped overlap ablation on the bundled simulator behind the
real sglang-router.

Runs matrices/overlap_ablation.yaml unchanged against a private copy of inventory/local.yaml
(free ports, so it can run beside anything), then reads the report the way a user would: the
all-on cell shows corruption >= 10% and every overlap-off cell <= 3%, with the 95% intervals the
report computed (the trial as the unit of replication, method named), the headline says that
corruption needs all three flags, and the three-way interaction and the anomaly canary are findings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.shipped import run_shipped

from orchestrator.core.records import TrialRecord
from orchestrator.report.render import load_report
from orchestrator.store.journal import read_journal

pytestmark = pytest.mark.sim
REPO = Path(__file__).resolve().parents[2]


def test_shipped_ablation_finds_the_three_way_interaction(tmp_path, capsys):
    run_dir, out, assert_clean = run_shipped(tmp_path, capsys, "overlap_ablation.yaml", "demo", 2026)

    trials = [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]
    pooled: dict[str, list[int]] = {}
    for t in trials:
        assert t.status == "completed"
        pooled.setdefault(t.cell, [0, 0])
        pooled[t.cell][0] += t.metrics["corruption"].k
        pooled[t.cell][1] += t.metrics["corruption"].n
    html = (run_dir / "index.html").read_text()
    all_on = "bf16_index_k=on,cuda_graph=on,overlap=on"
    k, n = pooled[all_on]
    assert n == 480 and k / n >= 0.10, (k, n)  # 12 trials of 40 sessions
    # the interval the report computed (trial = unit of replication) is the one the page shows
    report = load_report(run_dir)
    rate = next(c for c in report.cells if c.cell == all_on).proportions["corruption"].rate
    assert (rate.k, rate.n) == (k, n) and rate.low < k / n < rate.high
    assert f"{100 * k / n:.1f}% [{100 * rate.low:.1f}-{100 * rate.high:.1f}]" in html.replace("–", "-")
    assert "quasi-binomial" in report.comparison.get("corruption", "")  # the method is named
    for cell, (k, n) in pooled.items():
        if "overlap=off" in cell:
            assert k / n <= 0.03, (cell, k, n)
            assert f"{k}/{n}" in html
    text = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    assert re.search(r"It needs [^.]*bf16_index_k=on[^.]*together", text), "headline misses the interaction"
    # the three-way interaction is shown with its raw and Holm p (a finding or not, as the data say)
    assert re.search(r"× cuda_graph \(on → off\) × overlap \(on → off\) 3-way [+-][0-9.]+ pts", text), "no 3-way row"
    assert re.search(r"Median anomalies is [0-9.]+x higher with bf16_index_k=off", text), "no anomaly canary"

    # the requests went through the real sglang-router: prefill got each one with the random
    # 63-bit bootstrap_room it adds (the simulator's stand-in router numbers them 1, 2, ...)
    state = tmp_path / ".orch" / "local-sim"
    assert "-- started sglang-router pid=" in (state / "sglang-router.log").read_text()
    rooms = [int(line.split(" room=")[1].split()[0]) for line in (state / "sim-prefill.log").read_text().splitlines()
             if " room=" in line]  # fmt: skip
    assert len(rooms) >= 96 * 40 * 3 and min(rooms) > 2**20, (len(rooms), min(rooms, default=None))

    assert_clean()  # env files byte-identical, nothing listening on the sim ports
