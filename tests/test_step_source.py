"""Which testbed runs which trial in a parallel sweep (sweep.sources.StepSource).

Two testbeds are never identical (a slower GPU, another driver). Handed out strictly in plan order
to whichever testbed was free, a declared-order sweep on two testbeds at one pace ran each cell on
one testbed only (a 2x2x2 sweep: one factor's levels split exactly by testbed), and a testbed that
failed 10 more sessions in 100 was reported as that factor's effect in 17-47% of A/A reports."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.plan import make_plan
from orchestrator.core.steps import Plan
from orchestrator.sweep.sources import StepSource

REPO = Path(__file__).resolve().parent.parent


def _plan(order: str, replicates: int) -> Plan:
    matrix = read_matrix(REPO / "matrices" / "overlap_ablation.yaml")
    testbed = next(iter(read_inventory(REPO / "inventory" / "local.yaml").testbeds.values()))
    return make_plan(matrix, testbed, 7, replicates, order=order)


def _hand_out(plan: Plan, pattern: list[str]) -> Counter[tuple[str, object]]:
    """(testbed, cell) -> trials, the testbeds asking in `pattern`'s turn (a testbed named twice
    runs twice as fast)."""
    source, ran = StepSource(plan.steps, set()), Counter[tuple[str, object]]()
    for testbed in itertools.cycle(pattern):
        step = source.next(testbed)
        if step is None:
            return ran
        ran[(testbed, step.trial.cell)] += 1
    raise AssertionError("unreachable")


def test_testbeds_at_one_pace_run_each_cell_alike_in_declared_order() -> None:
    """Plan order handed trial 2i to tb0 and 2i + 1 to tb1 every round: each cell ran 4/0."""
    plan = _plan("sequential", 4)
    ran = _hand_out(plan, ["tb0", "tb1"])
    assert {ran[("tb0", c)] for c in plan.cells} == {2}
    assert {ran[("tb1", c)] for c in plan.cells} == {2}


def test_a_testbed_twice_as_fast_runs_about_two_thirds_of_every_cell() -> None:
    plan = _plan("sequential", 12)
    ran = _hand_out(plan, ["fast", "fast", "slow"])
    assert sum(ran[("slow", c)] for c in plan.cells) == 32  # every third trial
    assert {ran[("slow", c)] for c in plan.cells} == {4}  # 12 / 3 of each cell, not 0 of some


def test_one_testbed_takes_the_plan_in_its_order() -> None:
    plan = _plan("randomized", 3)
    source = StepSource(plan.steps, {0, 5})
    order = [step.trial.index for step in iter(lambda: source.next("tb0"), None)]
    assert order == [s.trial.index for s in plan.steps if s.trial.index not in {0, 5}]


def test_rounds_stay_in_order_and_every_trial_is_handed_out_once() -> None:
    plan = _plan("randomized", 5)
    source = StepSource(plan.steps, set())
    handed = []
    for testbed in itertools.cycle(["a", "a", "b", "c"]):
        step = source.next(testbed)
        if step is None:
            break
        handed.append(step.trial)
        assert source.remaining() == len(plan.steps) - len(handed)
    assert sorted(t.index for t in handed) == list(range(len(plan.steps)))
    assert [t.round for t in handed] == sorted(t.round for t in handed)


def test_a_closed_source_hands_out_nothing() -> None:
    source = StepSource(_plan("randomized", 2).steps, set())
    assert source.next("a") is not None and source.next("b") is not None
    source.close()
    assert source.next("a") is None and source.remaining() == 0
