"""`orch plan` and `orch run --dry-run` into a pipe or file: plain tab-separated rows, every env
assignment and cell name whole on one line (a table at 80 columns folded `..._OVERLA` / `P=0`
and cut every hunt cell to `bf16_index_k=on,c...`); on a terminal the tables stay."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli.main import main
from orchestrator.cli.planview import print_plan
from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.matrix import baseline_cell
from orchestrator.core.plan import make_plan
from orchestrator.core.steps import Plan

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "matrices/overlap_ablation.yaml")
INVENTORY = str(REPO / "inventory/local.yaml")


def demo_plan() -> Plan:
    matrix = read_matrix(Path(DEMO))
    return make_plan(matrix, read_inventory(Path(INVENTORY)).testbed(None), 1, None)


def test_a_piped_plan_has_every_env_assignment_whole_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", DEMO, "-i", INVENTORY, "--seed", "1"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "┃" not in out and "…" not in out
    plan = demo_plan()
    base = baseline_cell(plan.matrix).env
    for i, cell in enumerate(plan.cells):
        row = next(line for line in lines if line.startswith(f"{i}\t"))
        for role, env in cell.env.items():
            for var, value in env.items():
                if base.get(role, {}).get(var) != value:
                    assert f"{var}={value}" in row, (var, row)
    # what the reviewer's grep counted as 0: the four cells with overlap off
    assert sum("SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0" in line for line in lines) == 4


def test_a_piped_dry_run_names_every_cell_whole(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", DEMO, "-i", INVENTORY, "--seed", "1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    start = lines.index("trial\tround\tcell\trestarts\twaits on") + 1
    plan = demo_plan()
    rows = [line.split("\t") for line in lines[start : start + len(plan.steps)]]
    assert [row[2] for row in rows] == [step.trial.cell.id for step in plan.steps]  # every cell name whole
    assert "dry run: nothing was changed" in out


def test_on_a_terminal_the_plan_keeps_its_tables() -> None:
    console = Console(width=200, force_terminal=True, record=True)
    print_plan(demo_plan(), console, list_trials=True)
    text = console.export_text()
    assert "┃" in text and "env vs baseline" in text and "rows, one per line" not in text
