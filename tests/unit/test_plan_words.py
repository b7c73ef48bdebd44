"""`orch plan`'s power lines say in words what change a comparison detects, in which direction,
before and after Holm's correction, with the numbers they had. They read 'a rise to 5.6% or a
fall to 0.1% (Holm: a rise to 7.7% or no fall)': a reader could not tell what 'no fall' meant
(found by the new-user walk)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from orchestrator.cli import planview
from orchestrator.cli.planview import _dirs, power_lines
from orchestrator.core import power, ranks
from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.plan import make_plan

REPO = Path(__file__).resolve().parents[2]

# overlap_ablation at its 12 replicates of 40 sessions, 49 tests: Fisher's lines, exact. The numbers
# are the ones the old lines printed: 'a rise to 1.6% or no fall (Holm: a rise to 2.8% or no fall)',
# 'a rise to 5.6% or a fall to 0.1% (Holm: a rise to 7.7% or no fall)', 'a rise to 9.9% or a fall to
# 1.7% (Holm: a rise to 12.6% or a fall to 0.7%)', 'a rise to 22.2% or a fall to 9.0% (Holm: a rise
# to 25.9% or a fall to 6.7%)'.
FISHER = [
    "    baseline at 0%: detects a rise to 1.6% (2.8% after Holm); a rate of 0% cannot fall",
    "    baseline at 2%: detects a rise to 5.6% (7.7% after Holm) or a fall to 0.1% (none passes Holm, not even to 0%)",
    "    baseline at 5%: detects a rise to 9.9% (12.6% after Holm) or a fall to 1.7% (0.7% after Holm)",
    "    baseline at 15%: detects a rise to 22.2% (25.9% after Holm) or a fall to 9.0% (6.7% after Holm)",
]


def test_the_plans_power_lines_say_each_direction_before_and_after_holm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(power, "quasi_detectable", lambda design, rate, **_: power.detectable(1, 1, rate))  # not these
    matrix = read_matrix(REPO / "matrices" / "overlap_ablation.yaml")
    plan = make_plan(matrix, next(iter(read_inventory(REPO / "inventory" / "local.yaml").testbeds.values())), 1, 12)
    lines = power_lines(plan)
    head = next(i for i, line in enumerate(lines) if line.startswith("power (corruption)"))
    assert "the smallest change from the baseline a comparison detects with 80% power" in lines[head]
    assert (
        "what a finding needs 'after Holm', the first step of the correction over the report's 49 tests"
        in (lines[head])
    )
    fisher = next(i for i, line in enumerate(lines) if line.startswith("  for reference, Fisher's exact test"))
    assert "(exact; not the report's test with replicates):" in lines[fisher]
    assert lines[fisher + 1 : fisher + 5] == FISHER
    assert not any("no fall (" in line or "(Holm:" in line for line in lines)


def _found(base: float, rise: float | None, fall: float | None) -> power.Detectable:
    return power.Detectable(n_cell=80, n_baseline=80, baseline=base, alpha=0.05, power=0.8, rise=rise, fall=fall)


def test_a_direction_nothing_detects_is_said_so_before_and_after_holm() -> None:
    """Where no change in a direction reaches 80% power, the line says so in words, where it read
    'no rise or no fall (Holm: no rise or no fall)'."""
    nothing = _found(0.5, None, None)
    assert _dirs(nothing, nothing) == "detects no rise or fall at all (not even to 100% or 0%, before or after Holm)"
    assert _dirs(_found(0.02, 0.064, None), _found(0.02, 0.106, None)) == (
        "detects a rise to 8.4% (12.6% after Holm), but no fall at all (not even to 0%, before or after Holm)"
    )
    assert _dirs(_found(1.0, None, 0.2), _found(1.0, None, None)) == (
        "detects a fall to 80.0% (none passes Holm, not even to 0%); a rate of 100% cannot rise"
    )


ONE_FACTOR = """name: one
factors:
  a: {env: {decode: A}, levels: ["on", "off"]}
repro:
  command: "true --sessions 40"
  metrics:
    corruption: {kind: proportion, regex: 'C (?P<k>\\d+)/(?P<n>\\d+)'}
    wall: {regex: 'wall=(?P<value>[0-9.]+)s'}
"""


def test_a_one_factor_plan_names_no_other_cell_and_no_pooling(tmp_path: Path) -> None:
    """Two cells: no other cell to simulate at any rate, no second shape, and a factor effect that
    compares the same trials as its cells; the plan explained all three as for a factorial."""
    (tmp_path / "one.yaml").write_text(ONE_FACTOR)
    inventory = read_inventory(REPO / "inventory" / "local.yaml")
    lines = power_lines(make_plan(read_matrix(tmp_path / "one.yaml"), inventory.testbed(None), 1, 3))
    quasi = next(line for line in lines if "the report's test: quasi-binomial" in line)
    assert quasi.endswith("simulated with no extra trial-to-trial variation:"), quasi
    assert "the first step of the correction over the report's 5 tests" in lines[0], lines[0]
    assert not any("events in the compared cells only" in line or "every other cell" in line for line in lines)
    numbers = lines[-1]
    assert numbers.endswith(
        "with one factor, its effect compares the same trials as the cells (best p = 0.1; "
        "Holm's first step needs < 0.01)"
    ), numbers


def test_a_sessions_placeholder_is_not_said_to_be_no_sessions(tmp_path: Path) -> None:
    """`--sessions {concurrency}` (a client factor's placeholder) was told 'the repro command has no
    --sessions N' (the eighth new-user walk); a command without one still is."""
    inventory = read_inventory(REPO / "inventory" / "local.yaml")
    matrix = read_matrix(REPO / "matrices" / "cuda_graph_flags.yaml")
    plan = make_plan(matrix, next(iter(inventory.testbeds.values())), 1, 2)
    said = next(line for line in power_lines(plan) if line.startswith("power (corruption)"))
    assert said == (
        "power (corruption): the repro command's --sessions is {concurrency}, filled in per trial, "
        "so orch cannot say before the sweep"
    )
    text = (REPO / "matrices" / "cuda_graph_flags.yaml").read_text().replace("--sessions {concurrency}", "")
    text = text.replace("concurrency:\n", "concurrency:\n    placeholder: unused\n", 1)
    (tmp_path / "m.yaml").write_text(text.replace("{python}", "{python} {unused}", 1))
    bare = make_plan(read_matrix(tmp_path / "m.yaml"), next(iter(inventory.testbeds.values())), 1, 2)
    said = next(line for line in power_lines(bare) if line.startswith("power (corruption)"))
    assert said == "power (corruption): the repro command has no --sessions N, so orch cannot say before the sweep"


def test_a_factors_best_p_too_small_for_a_float_is_not_said_to_be_zero() -> None:
    """12 factors, 2 replicates: a factor's two halves hold 4,096 trials each, whose smallest
    Mann-Whitney p (2 / C(8192, 4096)) is far below a float's range: the plan said "best p = 0"
    (the eighth new-user walk), a p no test gives."""
    factors = {f"f{i}": ["0", "1"] for i in range(12)}
    cells = [dict(zip(factors, bits, strict=True)) for bits in itertools.product("01", repeat=12)]
    [line] = planview._number_lines(["wall"], 2, cells, factors, cells[0], 8556)
    assert "best p < 1e-300;" in line and "best p = 0" not in line, line


def test_numbers_best_p_is_what_the_reports_test_gives() -> None:
    """The demo's plan (12 replicates) said a cell vs the baseline 'can reach p = 7.4e-07 at best'
    and the factor effects 'best p = 3.1e-28': the exact test's floors. The report's Mann-Whitney
    uses the normal approximation once both sides have more than 8 values, so the demo's own run,
    every anomalies value of a cell above every baseline value, got p = 3.7e-05, and 48 vs 48 trials
    fully apart 3.2e-17 (the audit). The plan states the floor of the test the report runs."""
    factors = {"a": ["on", "off"], "b": ["on", "off"], "c": ["on", "off"]}
    cells = [dict(zip(factors, bits, strict=True)) for bits in itertools.product(["on", "off"], repeat=3)]
    [line] = planview._number_lines(["wall"], 12, cells, factors, cells[0], 46)
    cell = ranks.mann_whitney(np.arange(12.0) + 100, np.arange(12.0))
    pooled = ranks.mann_whitney(np.arange(48.0) + 100, np.arange(48.0))
    assert 3e-5 < cell < 4e-5 and 1e-17 < pooled < 1e-16  # the p the report printed for the demo's run
    assert f"a cell vs the baseline can reach p = {cell:.2g} at best;" in line, line
    assert f"(best p = {pooled:.2g};" in line, line
    [few] = planview._number_lines(["wall"], 4, cells, factors, cells[0], 46)  # 4 vs 4: the exact test
    assert f"can reach p = {ranks.mann_whitney(np.arange(4.0) + 9, np.arange(4.0)):.2g} at best" in few, few
    assert f"{2 / math.comb(8, 4):.2g}" in few


def test_a_numbers_floor_that_only_ties_could_pass_is_said_so() -> None:
    """3 replicates: distinct values floor at p = 0.1, tied ones at 0.047: "no cell can ever differ"
    was not true (and the report's Holm family counts those tests); 2 replicates: it is."""
    factors = {"a": ["0", "1"], "b": ["0", "1"]}
    cells = [dict(zip(factors, bits, strict=True)) for bits in itertools.product("01", repeat=2)]
    [three] = planview._number_lines(["wall"], 3, cells, factors, cells[0], 10)
    assert "no cell can differ significantly from the baseline unless values tie within each side" in three, three
    assert "(smallest possible Mann-Whitney p = 0.1 >= 0.05; 0.047 with tied values)" in three, three
    [two] = planview._number_lines(["wall"], 2, cells, factors, cells[0], 10)
    assert "no cell can ever differ significantly" in two and "0.19 with tied values" in two, two
