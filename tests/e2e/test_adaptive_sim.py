"""The shipped adaptive hunt on the bundled simulator: cells stop once decided, the report says so.

Runs matrices/overlap_hunt.yaml unchanged (rounds of 10 sessions, at most 8, `direction: lower`)
against a private copy of inventory/local.yaml. The simulator's all-on baseline corrupts ~15% of
sessions and the cells with overlap or CUDA graph off ~0%, so most cells must be decided lower
within a few rounds, run no trial after their decision, and the report's first finding must
state the sequential decisions next to the fixed analysis.
"""

from __future__ import annotations

import html as htmllib
import re
from pathlib import Path

import pytest
from helpers.shipped import run_shipped

from orchestrator.core.records import EventRecord, TrialRecord
from orchestrator.store.journal import read_journal

pytestmark = pytest.mark.sim


def test_shipped_hunt_stops_decided_cells_and_reports_it(tmp_path: Path, capsys) -> None:
    run_dir, out, assert_clean = run_shipped(tmp_path, capsys, "overlap_hunt.yaml", "hunt", 5)
    records = read_journal(run_dir / "journal.jsonl").records
    trials = [r for r in records if isinstance(r, TrialRecord)]
    decided = {r.cell: r for r in records if isinstance(r, EventRecord) and r.event == "cell_decided"}

    lower = [c for c, e in decided.items() if e.state == "different" and "(cell lower;" in e.message]
    assert len(lower) >= 4, out  # 6 of 7 at this seed
    assert all("overlap=off" in c or "cuda_graph=off" in c or "bf16_index_k=off" in c for c in lower)
    assert len(trials) < 64  # the fixed design would have run all 64
    for cell, event in decided.items():  # nothing ran for a cell after its decision
        rounds = int(re.search(r"after (\d+) rounds?", event.message)[1])
        assert max(t.round for t in trials if t.cell == cell) == rounds - 1, cell

    page = htmllib.unescape(re.sub(r"<[^>]+>", " ", (run_dir / "index.html").read_text()))
    first = re.search(r"What we found\s+info\s+(Adaptive stopping in corruption: [^.]+)\.", page)
    assert first, page[:3000]
    assert f"{len(lower)} of 7 cells decided lower than the baseline" in first[1]
    assert_clean()
