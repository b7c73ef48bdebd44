"""make_plan's inputs (core.plan): a matrix that names a role the testbed does not have is refused
at its line before any trial is planned, and the seed that orders the trials is the command line's,
else the matrix's, else a fresh one, and the plan records which (and the replicates it ran).

Found by mutation testing (bench/mutants.py): deleting either line of make_plan left every test of
the plan green.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.core import inventory
from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.plan import make_plan
from orchestrator.core.steps import Plan
from orchestrator.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "matrices/overlap_ablation.yaml"


def order(plan: Plan) -> list[tuple[int, str]]:
    return [(s.trial.round, s.trial.cell.id) for s in plan.steps]


def local_testbed() -> inventory.Testbed:
    return read_inventory(REPO / "inventory/local.yaml").testbed(None)


def test_a_factor_on_a_role_the_testbed_lacks_is_refused_at_its_line(tmp_path: Path) -> None:
    text = MATRIX.read_text().replace(
        "      decode: SGLANG_DSV4_BF16_INDEX_K", "      decoder: SGLANG_DSV4_BF16_INDEX_K"
    )
    path = tmp_path / "typo.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        make_plan(read_matrix(path), local_testbed())
    said = str(caught.value)
    assert "role 'decoder' is not in the inventory" in said
    assert "did you mean 'decode'?" in said
    assert f"{path}:" in said


def test_the_seed_is_the_command_lines_else_the_matrixs_else_a_fresh_one(tmp_path: Path) -> None:
    tb = local_testbed()
    path = tmp_path / "seeded.yaml"
    path.write_text(MATRIX.read_text() + "seed: 1234\n")
    seeded = read_matrix(path)
    from_matrix = make_plan(seeded, tb)
    assert from_matrix.seed == 1234
    assert order(from_matrix) == order(make_plan(seeded, tb, seed=1234))
    from_command_line = make_plan(seeded, tb, seed=99)
    assert from_command_line.seed == 99
    assert order(from_command_line) == order(make_plan(read_matrix(MATRIX), tb, seed=99))
    fresh = make_plan(read_matrix(MATRIX), tb)
    assert fresh.replicates == 12  # the matrix's, unless the command line says
    assert make_plan(read_matrix(MATRIX), tb, replicates=2).replicates == 2
    assert isinstance(fresh.seed, int)  # recorded in run.json, so a resume rebuilds the same order
    assert order(fresh) == order(make_plan(read_matrix(MATRIX), tb, seed=fresh.seed))
