"""bench/bench_controller.py: its synthetic inputs are valid orch inputs of the announced size,
and a small run prints every figure. No speed asserted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.benchrun import bench_module, bench_output

bc = bench_module("bench_controller.py")


def test_synthetic_matrix_and_inventory_plan_to_the_announced_size(tmp_path: Path) -> None:
    from orchestrator.core.config import read_inventory, read_matrix
    from orchestrator.core.plan import make_plan

    (tmp_path / "inventory.yaml").write_text(bc.inventory_yaml())
    (tmp_path / "m.yaml").write_text(bc.plan_matrix_yaml(3, 4, "sequential"))
    plan = make_plan(read_matrix(tmp_path / "m.yaml"), read_inventory(tmp_path / "inventory.yaml").testbed("bench"))
    assert len(plan.cells) == 4**3 == len(plan.steps)
    assert {r for s in plan.steps for r in s.env} == {"decode", "prefill"}


def test_default_plan_size_is_one_orch_accepts(tmp_path: Path) -> None:
    """The defaults once asked for 4 x 10 levels (10,000 cells), past core.model.MAX_CELLS: the bench
    died with read_matrix's traceback before printing a figure."""
    from orchestrator.core.config import read_inventory, read_matrix
    from orchestrator.core.model import MAX_CELLS
    from orchestrator.core.plan import make_plan

    args = bc.parse_args([])
    assert args.levels**args.factors == MAX_CELLS
    (tmp_path / "inventory.yaml").write_text(bc.inventory_yaml())
    (tmp_path / "m.yaml").write_text(bc.plan_matrix_yaml(args.factors, args.levels, "sequential"))
    plan = make_plan(read_matrix(tmp_path / "m.yaml"), read_inventory(tmp_path / "inventory.yaml").testbed("bench"))
    assert len(plan.cells) == MAX_CELLS


def test_a_size_over_the_cell_limit_is_refused_before_any_work() -> None:
    with pytest.raises(SystemExit, match="over orch's limit of 4,096"):
        bc.parse_args(["--factors", "4", "--levels", "10"])


def test_synthetic_run_resumes_to_every_trial_done(tmp_path: Path) -> None:
    (tmp_path / "inventory.yaml").write_text(bc.inventory_yaml())
    made = bc.phase_make_run(tmp_path, 20)
    assert made["trials"] == 20
    assert bc.phase_read_journal(tmp_path)["trials"] == 20
    result = bc.phase_resume(tmp_path, "read_journal")
    assert result["done"] == 20
    assert set(result["steps"]) >= {
        "load run.json",
        "rebuild the plan (make_plan)",
        "compare its digest with run.json's",
        "done set (read_journal)",
    }


@pytest.mark.process
def test_controller_bench_prints_every_figure() -> None:
    out = bench_output("bench_controller.py", "--factors", "2", "--levels", "5", "--trials", "300", timeout=300)
    for order in ("randomized", "sequential", "min-restarts"):
        assert re.search(rf"^plan 25 cells, order {order}: make_plan [0-9.]+ s .* peak RSS \d+ MB", out, re.M), out
    assert re.search(r"^plan 5 cells, order min-restarts: make_plan", out, re.M), out
    assert re.search(
        r"^run start: make_manifest \+ save_manifest \(run.json \+ plan.json\) of 304 planned "
        r"trials in [0-9.]+ s",
        out,
        re.M,
    ), out
    assert re.search(r"^load_manifest with the plan \(304 PlannedTrial models, .*\): [0-9.]+ s", out, re.M), out
    assert re.search(r"^read_journal: 300 trials in [0-9.]+ s; peak RSS \d+ MB", out, re.M), out
    assert re.search(r"^resume preparation, done set by read_journal: 300 done trials found in [0-9.]+ s", out, re.M), (
        out
    )
