"""The README's demo, as a test: the shipped overlap ablation on the bundled simulator behind the
real sglang-router.

Runs matrices/overlap_ablation.yaml unchanged against a private copy of inventory/local.yaml
(free ports, so it can run beside anything), then reads the report the way a user would: the
all-on cell shows corruption >= 10% and every overlap-off cell <= 3%, with 95% intervals, and the
headline says that corruption needs all three flags.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.shipped import run_shipped

from orchestrator.core.records import TrialRecord
from orchestrator.core.stats import wilson_interval
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
    assert n == 80 and k / n >= 0.10, (k, n)
    low, high = wilson_interval(k, n)
    assert f"{100 * k / n:.1f}% [{100 * low:.1f}-{100 * high:.1f}]" in html.replace("–", "-")
    for cell, (k, n) in pooled.items():
        if "overlap=off" in cell:
            assert k / n <= 0.03, (cell, k, n)
            assert f"{k}/{n}" in html
    text = re.sub(r"<[^>]+>", " ", html)
    assert re.search(r"It needs [^.]*bf16_index_k=on[^.]*together", " ".join(text.split())), (
        "headline misses the interaction"
    )

    # the requests went through the real sglang-router: prefill got each one with the random
    # 63-bit bootstrap_room it adds (the simulator's stand-in router numbers them 1, 2, ...)
    state = tmp_path / ".orch" / "local-sim"
    assert "-- started sglang-router pid=" in (state / "sglang-router.log").read_text()
    rooms = [int(line.split(" room=")[1].split()[0]) for line in (state / "sim-prefill.log").read_text().splitlines()
             if " room=" in line]  # fmt: skip
    assert len(rooms) >= 16 * 40 * 3 and min(rooms) > 2**20, (len(rooms), min(rooms, default=None))

    assert_clean()  # env files byte-identical, nothing listening on the sim ports
