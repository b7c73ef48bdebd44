"""What core.matrix.expand refuses and what it removes, pinned where mutation testing found no test
(bench/README.md, "Fifth round"): a cell included twice, more cells than a report can hold once
includes add combinations outside the zips, the product and trial caps for a matrix that config did
not check (expand's own guard), the big-sweep warning, and exclude selectors over axes of different
sizes (the vectorised match's mixed-radix keys)."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from orchestrator.core.config import read_matrix
from orchestrator.core.matrix import expand, warnings_for
from orchestrator.core.model import Matrix
from orchestrator.errors import ConfigError

HEAD = """
name: t
repro:
  command: "true"
  metrics: {x: {regex: 'x=(?P<value>\\d+)'}}
"""
THREE = """
factors:
  a: {env: {decode: A}, levels: [on, off]}
  b: {env: {decode: B}, levels: [x, y, z]}
  c: {env: {prefill: C}, levels: [1, 0]}
"""


def matrix(tmp_path: Path, body: str) -> Matrix:
    path = tmp_path / "m.yaml"
    path.write_text(textwrap.dedent(HEAD) + textwrap.dedent(body))
    return read_matrix(path, "m.yaml")


def ids(cells: list) -> list[str]:
    return [c.id for c in cells]


def binary(names: list[str]) -> str:
    return "factors:\n" + "".join(f"  {n}: {{env: {{decode: V{n.upper()}}}, levels: [a, b]}}\n" for n in names)


def test_a_cell_included_twice_is_refused_at_its_second_entry(tmp_path: Path) -> None:
    m = matrix(tmp_path, THREE + "exclude: [{a: off}]\ninclude: [{a: off, b: y, c: 0}, {a: off, b: y, c: 0}]\n")
    with pytest.raises(ConfigError) as err:
        expand(m)
    assert str(err.value).startswith("m.yaml:12: include[1]: cell a=off,b=y,c=0 is already in the matrix")
    assert err.value.exit_code == 2


def test_includes_outside_the_zips_count_towards_the_cell_cap(tmp_path: Path) -> None:
    """A zip of two factors and 11 more binary ones: 4,096 cells, the most a report compares; one
    include of a combination the zip leaves out makes 4,097, refused before any cell is built."""
    body = binary(["p", "q", *(f"f{i}" for i in range(11))]) + "zips: [[p, q]]\n"
    assert len(expand(matrix(tmp_path, body))) == 4096
    extra = "include: [{p: a, q: b, " + ", ".join(f"f{i}: a" for i in range(11)) + "}]\n"
    with pytest.raises(ConfigError) as err:
        expand(matrix(tmp_path, body + extra))
    assert "the matrix has 4,097 cells (over 4,096" in str(err.value) and "m.yaml:" in str(err.value)


def test_expand_refuses_too_many_trials_of_a_matrix_config_did_not_check(tmp_path: Path) -> None:
    """config refuses at the line; expand checks again for a matrix built or changed elsewhere."""
    m = dataclasses.replace(matrix(tmp_path, THREE), replicates=400_000)
    with pytest.raises(ConfigError) as err:
        expand(m)
    assert "the matrix expands to 4,800,000 trials (over 1,000,000)" in str(err.value)
    assert str(err.value).startswith("m.yaml") and err.value.exit_code == 2


def test_expand_refuses_a_product_over_the_cap_of_a_matrix_config_did_not_check(tmp_path: Path) -> None:
    """17 binary factors with two zipped are 65,536 cells (config lets it through); without the
    zip they are 131,072: expand refuses before building them, at the factors' line."""
    m = matrix(tmp_path, binary([f"f{i}" for i in range(17)]) + "zips: [[f0, f1]]\n")
    with pytest.raises(ConfigError) as err:
        expand(dataclasses.replace(m, zips=()))
    assert "the factors' product has 131,072 cells (over 65,536, before exclude)" in str(err.value)
    assert str(err.value).startswith("m.yaml:")


def test_a_sweep_of_more_than_ten_thousand_trials_is_warned_about(tmp_path: Path) -> None:
    m = matrix(tmp_path, THREE)
    assert warnings_for(m, 10_000) == []
    assert warnings_for(m, 10_001) == ["m.yaml: this sweep has 10,001 trials; check the estimate with `orch plan`"]


def test_an_exclude_over_a_small_axis_and_a_larger_one_removes_only_its_cells(tmp_path: Path) -> None:
    """a has 2 levels, b 3: the selector's key (a=off, b=x) must not meet (a=on, b=z)'s."""
    kept = expand(matrix(tmp_path, THREE + "exclude: [{a: off, b: x}]\n"))
    assert len(kept) == 10
    assert {"a=on,b=z,c=1", "a=on,b=z,c=0"} <= set(ids(kept))
    assert not {"a=off,b=x,c=1", "a=off,b=x,c=0"} & set(ids(kept))


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("order: min_restarts", "got 'min_restarts' (did you mean 'min-restarts'?)"),
        ("order: sequentail", "got 'sequentail' (did you mean 'sequential'?)"),
        ("order: shuffled", "got 'shuffled'"),  # nothing near: the list alone, no guess
    ],
)
def test_a_misspelt_choice_is_answered_with_its_near_value(tmp_path: Path, line: str, said: str) -> None:
    """`order: min_restarts` got 'expected ... or 'min-restarts'' and no guess, where a misspelt factor
    or key gets its near name (the eighth new-user walk)."""
    with pytest.raises(ConfigError) as caught:
        matrix(tmp_path, THREE + line + "\n")
    text = str(caught.value)
    assert text.startswith("m.yaml:11: order: expected 'randomized', 'sequential' or 'min-restarts', "), text
    assert text.endswith(said), text
