"""A report lists a matrix's cells in the design's order, baseline first: it listed them in plan
order, which is the randomized run order, so the same matrix's tables moved their rows and columns
from run to run (the baseline's anywhere), and a tie between cells (which one the power sentence
simulates as "the smallest") was broken by the draw. Two plans of the same design in different
orders now give the same page."""

from __future__ import annotations

import random

from helpers.page_text import text
from helpers.report_synth import synthetic_run

from orchestrator.core.records import RunManifest, TrialRecord
from orchestrator.report.build import build_report
from orchestrator.report.render import render_report


def _reordered(manifest: RunManifest, seed: int) -> RunManifest:
    plan = list(manifest.plan)
    random.Random(seed).shuffle(plan)
    return manifest.model_copy(update={"plan": plan})


def test_cells_are_listed_baseline_first_in_the_designs_order_whatever_the_run_order() -> None:
    manifest, records = synthetic_run(replicates=2)
    for seed in (1, 2, 3):
        cells = [c.cell for c in build_report(_reordered(manifest, seed), records).cells]
        assert cells[0] == "bf16_index_k=on,cuda_graph=on,overlap=on"  # the matrix's baseline
        assert cells == [
            "bf16_index_k=on,cuda_graph=on,overlap=on",
            "bf16_index_k=on,cuda_graph=on,overlap=off",
            "bf16_index_k=on,cuda_graph=off,overlap=on",
            "bf16_index_k=on,cuda_graph=off,overlap=off",
            "bf16_index_k=off,cuda_graph=on,overlap=on",
            "bf16_index_k=off,cuda_graph=on,overlap=off",
            "bf16_index_k=off,cuda_graph=off,overlap=on",
            "bf16_index_k=off,cuda_graph=off,overlap=off",
        ], seed


def test_the_same_trials_in_two_run_orders_give_the_same_page_but_its_plan_list() -> None:
    manifest, records = synthetic_run(replicates=2)

    def page(m: RunManifest, rs: list[TrialRecord]) -> str:
        whole = text(render_report(build_report(m, rs)))
        return whole.split("trial order (")[0]  # the run order itself is listed once, as it ran

    assert page(_reordered(manifest, 1), records) == page(_reordered(manifest, 2), records)


def test_a_baseline_declared_last_still_comes_first() -> None:
    manifest, records = synthetic_run(replicates=2)
    off = {"bf16_index_k": "off", "cuda_graph": "off", "overlap": "off"}
    plan = [p.model_copy(update={"is_baseline": p.levels == off}) for p in manifest.plan]
    moved = manifest.model_copy(update={"baseline": off, "plan": plan})
    cells = [c.cell for c in build_report(moved, records).cells]
    assert cells[0] == "bf16_index_k=off,cuda_graph=off,overlap=off"
    assert cells[1] == "bf16_index_k=on,cuda_graph=on,overlap=on"
