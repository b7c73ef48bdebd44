"""`orch plan`'s and `orch resume --dry-run`'s lines where the thirteenth mutation round found no
test: the trials table only when asked, an ended hunt's preview with how it ended, no empty
trials-left table, a removed variable shown as `<unset>`, and a factor's floor read against its
reference level's trials alone (not every other level's)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from orchestrator.cli.planview import _cells_table, _factor_floor, print_plan, print_resume_preview
from orchestrator.core import ranks
from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.plan import make_plan
from orchestrator.core.steps import Plan
from orchestrator.sweep import api
from orchestrator.sweep.apitypes import ResumePreview

REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "inventory/local.yaml"


def _said(show: Callable[..., None], *args: object, **kwargs: object) -> str:
    console = Console(width=400, record=True)
    show(*args, console, **kwargs)
    return console.export_text()


def _plan(matrix: str = "matrices/overlap_ablation.yaml") -> Plan:
    return api.prepare(api.SweepRequest(REPO / matrix, INVENTORY)).plan


def test_the_plan_lists_trials_only_when_asked() -> None:
    plan = _plan()
    assert "trials in run order" not in _said(print_plan, plan)
    assert "trials in run order" in _said(print_plan, plan, list_trials=True)


def test_an_ended_hunts_preview_says_how_it_ended_and_that_nothing_runs() -> None:
    plan = _plan("matrices/dsv4_hunt.yaml")
    ended = ("found", "posterior 0.97")
    preview = ResumePreview("h", ("local-sim",), plan, frozenset(range(9)), (), False, ended=ended)
    text = " ".join(_said(print_resume_preview, preview).split())
    assert (
        "resume h on testbed local-sim: nothing left to run: the hunt has ended after 9 trials "
        "(found: posterior 0.97); a resume runs no trial"
    ) in text


def test_a_preview_with_no_trial_left_shows_no_trials_left_table() -> None:
    plan = _plan()
    done = frozenset(s.trial.index for s in plan.steps)
    text = _said(print_resume_preview, ResumePreview("r", ("local-sim",), plan, done, (), False))
    assert f"{len(plan.steps)} of {len(plan.steps)} trials done, 0 left" in text
    assert "trials left" not in text.replace("0 left", "")
    left = ResumePreview("r", ("local-sim",), plan, frozenset(), tuple(plan.steps), False)
    assert "trials left, in run order" in _said(print_resume_preview, left)


MATRIX = """
name: unset
factors:
  extra:
    levels:
      kept: {decode: {EXTRA: "1"}}
      removed: {decode: {EXTRA: null}}
baseline: {extra: kept}
repro: {command: "{python} -c 'print(1)'", metrics: {x: {regex: 'x=(?P<value>\\\\d+)'}}}
"""


def test_a_cell_that_removes_a_variable_shows_it_unset(tmp_path: Path) -> None:
    (tmp_path / "unset.yaml").write_text(MATRIX)
    matrix = read_matrix(tmp_path / "unset.yaml")
    plan = make_plan(matrix, next(iter(read_inventory(INVENTORY).testbeds.values())), 1, 2)
    _, _, rows = _cells_table(plan)
    assert [row[-1] for row in rows] == ["(baseline)", "decode: EXTRA=<unset>"]


def test_a_factors_floor_compares_each_level_with_the_reference_levels_trials() -> None:
    """Three levels, one cell each, 4 trials a cell: each other level's 4 trials against the
    reference's 4 (counting every cell not at the reference, 8, promised a smaller p)."""
    cells = [{"f": "a"}, {"f": "b"}, {"f": "c"}]
    got = _factor_floor("f", ["a", "b", "c"], {"f": "a"}, cells, 4)
    assert got == ranks.mann_whitney_floor(4, 4) and got > ranks.mann_whitney_floor(4, 8)
    lopsided = [{"f": "a"}, {"f": "a"}, {"f": "b"}]  # the reference in two cells: 8 trials against 4
    assert _factor_floor("f", ["a", "b"], {"f": "a"}, lopsided, 4) == ranks.mann_whitney_floor(4, 8)
