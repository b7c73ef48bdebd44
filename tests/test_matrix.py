"""Matrix expansion: product, zips, exclude, include, baseline, replicates and seeded order."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.core.config import read_matrix
from orchestrator.core.matrix import baseline_cell, expand, factors_cost, order_trials
from orchestrator.errors import ConfigError

HEAD = """
name: t
repro:
  command: "true"
  metrics: {x: {regex: 'x=(?P<value>\\d+)'}}
"""


def matrix(tmp_path: Path, body: str):
    path = tmp_path / "m.yaml"
    path.write_text(textwrap.dedent(HEAD) + textwrap.dedent(body))
    return read_matrix(path, "m.yaml")


THREE = """
factors:
  a: {env: {decode: A}, levels: [on, off]}
  b: {env: {decode: B}, levels: [x, y, z]}
  c: {env: {prefill: C}, levels: [1, 0]}
"""


def ids(cells):
    return [c.id for c in cells]


def test_product_in_declared_order(tmp_path):
    cells = expand(matrix(tmp_path, THREE))
    assert len(cells) == 12
    assert ids(cells)[:3] == ["a=on,b=x,c=1", "a=on,b=x,c=0", "a=on,b=y,c=1"]
    assert ids(cells)[-1] == "a=off,b=z,c=0"


def test_boolean_levels_keep_their_names_and_write_1_0(tmp_path):
    m = matrix(tmp_path, THREE)
    a = m.factor("a")
    assert a.level_names == ("on", "off")
    assert a.level("on").env == {"decode": {"A": "1"}}
    assert a.level("off").env == {"decode": {"A": "0"}}


def test_booleans_setting_changes_the_written_form(tmp_path):
    m = matrix(tmp_path, "booleans: [true, false]\n".replace("[true, false]", '["true", "false"]') + THREE)
    assert m.factor("a").level("on").env == {"decode": {"A": "true"}}


def test_zip_moves_factors_together(tmp_path):
    m = matrix(tmp_path, THREE.replace("levels: [1, 0]", "levels: [1, 0, 2]") + "zips: [[b, c]]\n")
    cells = expand(m)
    assert len(cells) == 6
    assert {(c.as_dict()["b"], c.as_dict()["c"]) for c in cells} == {("x", "1"), ("y", "0"), ("z", "2")}


def test_exclude_is_a_partial_match(tmp_path):
    m = matrix(tmp_path, THREE + "exclude: [{a: off, b: z}]\nbaseline: {a: on}\n")
    cells = expand(m)
    assert len(cells) == 10
    assert not [c for c in cells if c.as_dict()["a"] == "off" and c.as_dict()["b"] == "z"]


def test_include_appends_whole_cells_without_merging(tmp_path):
    m = matrix(tmp_path, THREE + "exclude: [{a: off}]\ninclude: [{a: off, b: y, c: 0}]\n")
    cells = expand(m)
    assert len(cells) == 7
    assert cells[-1].id == "a=off,b=y,c=0"


def test_include_must_name_every_factor(tmp_path):
    with pytest.raises(ConfigError) as e:
        matrix(tmp_path, THREE + "include: [{a: off, b: y}]\n")
    assert "missing: c" in str(e.value) and "include[0]" in str(e.value)


def test_include_of_an_existing_cell_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="already in the matrix"):
        expand(matrix(tmp_path, THREE + "include: [{a: on, b: y, c: 0}]\n"))


def test_baseline_defaults_to_first_levels_and_can_be_set(tmp_path):
    assert baseline_cell(matrix(tmp_path, THREE)).id == "a=on,b=x,c=1"
    assert baseline_cell(matrix(tmp_path, THREE + "baseline: {b: z}\n")).id == "a=on,b=z,c=1"


def test_excluded_baseline_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="baseline cell a=on,b=x,c=1 is not in the matrix"):
        expand(matrix(tmp_path, THREE + "exclude: [{b: x}]\n"))


def test_randomized_rounds_are_seeded_permutations(tmp_path):
    m = matrix(tmp_path, THREE + "replicates: 3\n")
    cells = expand(m)
    t1, t2 = order_trials(m, cells, seed=5), order_trials(m, cells, seed=5)
    assert [t.cell for t in t1] == [t.cell for t in t2]
    assert len(t1) == 36 and [t.index for t in t1] == list(range(36))
    for r in range(3):  # every round holds every cell exactly once
        assert sorted(t.cell for t in t1 if t.round == r) == sorted(cells)
    assert [t.cell for t in t1[:12]] != cells  # shuffled
    assert [t.cell for t in order_trials(m, cells, seed=6)] != [t.cell for t in t1]
    assert sum(t.is_baseline for t in t1) == 3


def test_sequential_order_repeats_cells_in_declared_order(tmp_path):
    m = matrix(tmp_path, THREE + "replicates: 2\norder: sequential\n")
    cells = expand(m)
    assert [t.cell for t in order_trials(m, cells, seed=1)] == cells + cells


def test_replicates_override(tmp_path):
    m = matrix(tmp_path, THREE)
    assert len(order_trials(m, expand(m), seed=1, replicates=4)) == 48


def test_absurdly_large_matrix_is_refused(tmp_path):
    factors = "\n".join(f"  f{i}: {{env: {{decode: V{i}}}, levels: [a, b, c, d]}}" for i in range(12))
    with pytest.raises(ConfigError, match="16,777,216 trials"):
        expand(matrix(tmp_path, "factors:\n" + factors + "\n"))


def test_min_restarts_without_an_inventory_walks_by_factors_changed(tmp_path):
    """Pinned (taken before the greedy path moved to arrays): each step changes as few factors
    as it can, ties in declared order; round 2 starts where round 1 ended."""
    m = matrix(tmp_path, THREE + "replicates: 2\norder: min-restarts\n")
    walk = [t.cell.id for t in order_trials(m, expand(m), seed=1)]
    assert walk == [
        "a=on,b=x,c=1",
        "a=on,b=x,c=0",
        "a=on,b=y,c=0",
        "a=on,b=y,c=1",
        "a=on,b=z,c=1",
        "a=on,b=z,c=0",
        "a=off,b=z,c=0",
        "a=off,b=x,c=0",
        "a=off,b=x,c=1",
        "a=off,b=y,c=1",
        "a=off,b=y,c=0",
        "a=off,b=z,c=1",
        "a=off,b=z,c=1",
        "a=on,b=z,c=1",
        "a=on,b=x,c=1",
        "a=on,b=x,c=0",
        "a=on,b=y,c=0",
        "a=on,b=y,c=1",
        "a=off,b=y,c=1",
        "a=off,b=x,c=1",
        "a=off,b=x,c=0",
        "a=off,b=y,c=0",
        "a=off,b=z,c=0",
        "a=on,b=z,c=0",
    ]


def test_factors_cost_counts_the_factors_that_differ(tmp_path):
    m = matrix(tmp_path, THREE)
    cells = expand(m)
    cost = factors_cost(m)
    for a in cells:
        for b in cells:
            assert cost(a, b) == sum(x != y for x, y in zip(a.levels, b.levels, strict=True))


def test_cell_id_and_hash_survive_a_copy(tmp_path):
    import copy
    import pickle

    cell = expand(matrix(tmp_path, THREE))[3]
    for twin in (pickle.loads(pickle.dumps(cell)), copy.deepcopy(cell)):
        assert twin == cell and twin.id == cell.id == "a=on,b=y,c=0" and {twin: 1}[cell] == 1


def test_every_cell_carries_its_merged_env(tmp_path):
    """expand, include and baseline_cell all make cells with the env their levels assign."""
    m = matrix(tmp_path, THREE + "exclude: [{a: off}]\ninclude: [{a: off, b: y, c: 0}]\n")
    for cell in [*expand(m), baseline_cell(m)]:
        levels = cell.as_dict()
        a = {"on": "1", "off": "0"}[levels["a"]]
        assert cell.env == {"decode": {"A": a, "B": levels["b"]}, "prefill": {"C": levels["c"]}}
    assert expand(m)[-1].env == {"decode": {"A": "0", "B": "y"}, "prefill": {"C": "0"}}


def test_a_cells_env_is_read_only_and_not_part_of_its_identity(tmp_path):
    from orchestrator.core.model import Cell

    cell = expand(matrix(tmp_path, THREE))[0]
    with pytest.raises(TypeError):
        cell.env["decode"] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        cell.env["decode"]["A"] = "2"  # type: ignore[index]
    twin = Cell(cell.levels, {"decode": {"A": "other"}})
    assert twin == cell and hash(twin) == hash(cell) and {twin: 1}[cell] == 1
    assert twin.env != cell.env


def test_a_cells_env_is_a_copy_of_what_it_was_made_with(tmp_path):
    from orchestrator.core.model import Cell

    given = {"decode": {"A": "1"}}
    cell = Cell((("a", "on"),), given)
    given["decode"]["A"] = "changed"
    given["prefill"] = {}
    assert cell.env == {"decode": {"A": "1"}}


def test_a_cells_env_survives_a_copy(tmp_path):
    import copy
    import pickle

    cell = expand(matrix(tmp_path, THREE))[3]
    for twin in (pickle.loads(pickle.dumps(cell)), copy.deepcopy(cell), copy.copy(cell)):
        assert twin.env == cell.env == {"decode": {"A": "1", "B": "y"}, "prefill": {"C": "0"}}
        with pytest.raises(TypeError):
            twin.env["decode"]["A"] = "2"  # type: ignore[index]


@pytest.mark.parametrize("seed", range(6))
def test_exclude_removes_exactly_the_cells_a_selector_matches(tmp_path, seed):
    """The vectorised exclude agrees with Cell.matches over the product, zips included (a selector
    naming two zipped factors at different positions matches nothing)."""
    import random

    rng = random.Random(seed)
    levels = {"a": ["p", "q"], "b": ["x", "y", "z"], "c": ["1", "0"], "d": ["m", "n", "o"], "e": ["u", "v"]}
    body = "factors:\n" + "".join(
        f"  {f}: {{env: {{decode: {f.upper()}}}, levels: [{', '.join(lv)}]}}\n" for f, lv in levels.items()
    )
    body += "zips: [[b, d]]\nbaseline: {a: p, b: x, c: '1', d: m, e: u}\n"
    full = expand(matrix(tmp_path, body))
    selectors = []
    for _ in range(rng.randint(1, 12)):
        names = rng.sample([f for f in levels if f != "a"], rng.randint(1, 3))
        selectors.append({f: rng.choice(levels[f]) for f in names})
    text = "exclude:\n" + "".join("  - {" + ", ".join(f"{f}: '{v}'" for f, v in s.items()) + "}\n" for s in selectors)
    want = [c for c in full if not any(c.matches(s) for s in selectors)]
    if not any(c.id == "a=p,b=x,c=1,d=m,e=u" for c in want):
        with pytest.raises(ConfigError, match="baseline"):
            expand(matrix(tmp_path, body + text))
        return
    assert ids(expand(matrix(tmp_path, body + text))) == ids(want)


def test_more_cells_than_a_report_can_hold_are_refused_at_the_line(tmp_path):
    """13 binary factors are 8,192 cells: over MAX_CELLS, with the file and line of `factors`;
    a product over MAX_PRODUCT is refused before it is expanded, however many cells exclude leaves."""
    thirteen = "factors:\n" + "".join(f"  f{i}: {{env: {{decode: V{i}}}, levels: [a, b]}}\n" for i in range(13))
    with pytest.raises(ConfigError, match="8,192 cells") as err:
        expand(matrix(tmp_path, thirteen))
    assert "m.yaml:" in str(err.value) and "orch hunt" in str(err.value)
    seventeen = "factors:\n" + "".join(f"  f{i}: {{env: {{decode: V{i}}}, levels: [a, b]}}\n" for i in range(17))
    with pytest.raises(ConfigError, match="131,072 cells .over 65,536, before exclude") as err:
        matrix(tmp_path, seventeen + "exclude: [{f0: b}, {f1: b}, {f2: b}, {f3: b}, {f4: b}, {f5: b}]\n")
    assert "m.yaml:" in str(err.value)
