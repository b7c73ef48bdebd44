"""Which cells a report lists, and in what order (report.build._cells): every planned cell, even
one no trial reached; a cell only the journal names; a hunt's in the order it tried them, not the
design's. The eighth mutation round found none of these pinned. Pure: synthetic runs in memory."""

from __future__ import annotations

import random

from helpers.report_synth import synthetic_run

from orchestrator.core.records import RunManifest
from orchestrator.report.build import build_report

BASELINE = "bf16_index_k=on,cuda_graph=on,overlap=on"
LAST = "bf16_index_k=off,cuda_graph=off,overlap=off"


def _reordered(manifest: RunManifest, seed: int) -> RunManifest:
    plan = list(manifest.plan)
    random.Random(seed).shuffle(plan)
    return manifest.model_copy(update={"plan": plan})


def test_a_planned_cell_no_trial_reached_is_still_a_cell_of_the_report() -> None:
    """A run stopped before its last cell: that cell is listed (with no trial), not left out."""
    manifest, records = synthetic_run(replicates=2)
    cells = build_report(manifest, [r for r in records if r.cell != LAST]).cells
    assert [c.cell for c in cells][-1] == LAST and len(cells) == 8, [c.cell for c in cells]


def test_a_cell_only_the_journal_names_is_a_cell_of_the_report() -> None:
    """A journaled trial of a cell the plan in hand lacks is reported, not dropped."""
    manifest, records = synthetic_run(replicates=2)
    partial = manifest.model_copy(update={"plan": [p for p in manifest.plan if p.cell != LAST]})
    cells = [c.cell for c in build_report(partial, records).cells]
    assert LAST in cells and len(cells) == 8, cells


def test_a_hunts_cells_are_listed_as_it_tried_them() -> None:
    """A hunt has no design order to keep: its plan's wave, then the search's picks, as run."""
    manifest, records = synthetic_run(replicates=2)
    for seed in (1, 2):
        hunt = _reordered(manifest, seed).model_copy(update={"hunt": True})
        tried = list(dict.fromkeys(p.cell for p in hunt.plan))
        assert [c.cell for c in build_report(hunt, records).cells] == tried, seed
