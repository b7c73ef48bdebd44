"""`orch compare` reads one run at a time: what it keeps of run A while it reads run B is a few
numbers a trial (its cells' counts and values), never A's rows or planned trials. Two
100,000-trial runs needed 2.1 GB this way before (bench/bench_memory.py); the page it writes is
the page the old comparison wrote (kept in helpers/reference_compare.py), byte for byte.
"""

from __future__ import annotations

import gc
import re
import weakref
from pathlib import Path

import pytest
from helpers import reference_compare as ref
from helpers.report_synth import ALL_OFF, cell_id, corruption_rate, synthetic_run, write_run

from orchestrator.report import compare
from orchestrator.store.journal import TrialRows

A_ID, B_ID = "20260509-070000-overlap_ablation", "20260510-070000-overlap_ablation"
MOVED = "bf16_index_k=off,cuda_graph=off,overlap=off"  # B's change: 30% corruption here


def _b_rate(levels: dict[str, str]) -> float:
    return 0.3 if cell_id(levels) == MOVED else corruption_rate(levels)


def _pair(reports: Path, replicates: int, *, drop_cell: bool, b_metrics: dict[str, str] | None) -> tuple[Path, Path]:
    """Two runs of one matrix side by side in a reports folder (so B's nightly check reads A)."""
    a, ta = synthetic_run(replicates=replicates, seed=1, run_id=A_ID)
    b, tb = synthetic_run(replicates=replicates, seed=2, run_id=B_ID, rate=_b_rate, baseline=ALL_OFF)
    if drop_cell:  # a cell only A ran
        tb = [t for t in tb if t.cell != "bf16_index_k=on,cuda_graph=on,overlap=on"]
    if b_metrics is not None:  # a metric only A measures
        b = b.model_copy(update={"metrics": b_metrics, "started": "2026-05-10T07:00:00Z"})
    else:
        b = b.model_copy(update={"started": "2026-05-10T07:00:00Z"})
    return write_run(reports / A_ID, a, ta), write_run(reports / B_ID, b, tb)


@pytest.mark.parametrize(
    ("replicates", "drop_cell", "b_metrics"),
    [
        (6, False, None),
        (5, True, {"corruption": "proportion", "wall": "number"}),
        (1, False, None),  # one trial a cell: nothing can be tested, the differences are shown
    ],
)
def test_the_page_is_the_one_the_comparison_holding_both_runs_wrote(
    tmp_path: Path, replicates: int, drop_cell: bool, b_metrics: dict[str, str] | None
) -> None:
    run_a, run_b = _pair(tmp_path / "reports", replicates, drop_cell=drop_cell, b_metrics=b_metrics)
    before = ref.write_comparison_page(run_a, run_b, tmp_path / "before.html")
    after = compare.write_comparison_page(run_a, run_b, tmp_path / "after.html")
    assert after.path.read_bytes() == before.path.read_bytes()
    assert (after.warnings, after.changes) == (before.warnings, before.changes)
    assert before.warnings, "the pair's failed trials make both runs suspect: the warnings are compared"
    # the summary's line of a significant change (k/n in A vs k/n in B; the nightly check words it otherwise)
    moved = re.search(rf"corruption in {MOVED}: \d+/\d+ = [\d.]+% in {A_ID} vs", before.path.read_text())
    assert (moved is not None) == (replicates > 1)


def test_the_model_of_records_in_memory_is_the_old_one_duplicates_and_all() -> None:
    a, ta = synthetic_run(replicates=6, seed=1, run_id=A_ID)
    b, tb = synthetic_run(replicates=6, seed=2, run_id=B_ID, rate=_b_rate)
    tb = tb + tb[5:9]  # records in memory: a duplicate counts once (the highest attempt, then the later)
    new = compare.compare(a, ta, b, tb, suspect_a=["drift"])
    old = ref.compare(a, ta, b, tb, suspect_a=["drift"])
    assert repr(new) == repr(old)
    assert any(row.significant for row in new.rows)


def test_run_a_is_let_go_before_run_b_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Held at once, both runs' rows and planned trials made `orch compare` of two big runs need
    the memory of two reports; read one after the other, the peak is about one run's."""
    run_a, run_b = _pair(tmp_path / "reports", 2, drop_cell=False, b_metrics=None)
    read = compare.read_run_rows
    held: list[weakref.ref[object]] = []
    alive_at_b: list[str] = []

    def watched(run_dir: Path, manifest: compare.RunManifest) -> TrialRows:
        if run_dir == run_b:
            gc.collect()
            alive_at_b.extend(str(r())[:60] for r in held if r() is not None)
        rows = read(run_dir, manifest)
        if run_dir == run_a:
            held.append(weakref.ref(rows))
            held.extend(weakref.ref(p) for p in manifest.plan)
        return rows

    monkeypatch.setattr(compare, "read_run_rows", watched)
    compare.write_comparison_page(run_a, run_b, tmp_path / "page.html")
    assert len(held) == 1 + 16, "A's rows and its 16 planned trials were watched"
    assert alive_at_b == [], f"{len(alive_at_b)} of A's objects still held while B was read"
