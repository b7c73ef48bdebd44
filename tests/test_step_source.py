"""Which testbed runs which trial in a parallel sweep (sweep.sources.StepSource).

Two testbeds are never identical (a slower GPU, another driver). Handed out strictly in plan order
to whichever testbed was free, a declared-order sweep on two testbeds at one pace ran each cell on
one testbed only (a 2x2x2 sweep: one factor's levels split exactly by testbed), and a testbed that
failed 10 more sessions in 100 was reported as that factor's effect in 17-47% of A/A reports."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from pathlib import Path

from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.plan import make_plan
from orchestrator.core.records import MetricValue, TrialRecord
from orchestrator.core.steps import Plan, Step
from orchestrator.sweep.adaptive import AdaptiveSource
from orchestrator.sweep.api import _design
from orchestrator.sweep.sources import StepSource, restarted_roles

REPO = Path(__file__).resolve().parent.parent


def _plan(order: str, replicates: int) -> Plan:
    matrix = dataclasses.replace(read_matrix(REPO / "matrices" / "overlap_ablation.yaml"), order=order)
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


def _adaptive(order: str) -> tuple[Plan, AdaptiveSource]:
    matrix = dataclasses.replace(read_matrix(REPO / "matrices" / "overlap_hunt.yaml"), order=order)  # 2x2x2, 8 rounds
    testbed = next(iter(read_inventory(REPO / "inventory" / "local.yaml").testbeds.values()))
    plan = make_plan(matrix, testbed, 7, order=order)
    return plan, AdaptiveSource(plan.steps, set(), matrix)


def _record(step: Step, testbed: str, k: int) -> TrialRecord:
    t = step.trial
    return TrialRecord(
        run_id="r", trial=t.index, round=t.round, cell=t.cell.id, levels=t.cell.as_dict(),
        is_baseline=t.is_baseline, testbed=testbed, status="completed", started="x", ended="y", duration_s=1.0,
        metrics={"corruption": MetricValue(kind="proportion", k=k, n=10)},
    )  # fmt: skip


def _run_adaptive(source: AdaptiveSource, pattern: list[str], k: int = 1) -> list[tuple[str, Step]]:
    """Each testbed in `pattern`'s turn takes a trial, which ends (is recorded) before the next turn."""
    handed: list[tuple[str, Step]] = []
    for testbed in itertools.cycle(pattern):
        step = source.next(testbed)
        if step is None:
            return handed
        handed.append((testbed, step))
        source.record(_record(step, testbed, k))
    raise AssertionError("unreachable")


def test_an_adaptive_sweep_in_declared_order_runs_each_cell_on_both_testbeds() -> None:
    """The adaptive source handed out in plan order too: in a declared 2x2x2 sweep on two testbeds
    at one pace every cell ran on one testbed only (its trials 8/0), until cells stopped."""
    plan, source = _adaptive("sequential")
    handed = _run_adaptive(source, ["tb0", "tb1"])
    by_cell: dict[object, Counter[str]] = {}
    for testbed, step in handed:
        by_cell.setdefault(step.trial.cell, Counter())[testbed] += 1
    assert len(by_cell) == len(plan.cells)
    for cell, ran in by_cell.items():
        assert abs(ran["tb0"] - ran["tb1"]) <= 1, (cell, ran)


def test_one_testbed_takes_the_adaptive_plan_in_its_order_and_several_keep_rounds_in_order() -> None:
    plan, source = _adaptive("randomized")
    alone = [step.trial.index for _, step in _run_adaptive(source, ["tb0"])]
    assert alone == sorted(alone) and len(alone) < len(plan.steps)  # cells stopped: their trials skipped
    _, source = _adaptive("randomized")
    shared = _run_adaptive(source, ["a", "a", "b", "c"])
    rounds = [step.trial.round for _, step in shared]
    assert rounds == sorted(rounds)
    assert sorted(step.trial.index for _, step in shared) == alone  # the same trials: decided on whole rounds


def _restarts(plan: Plan, pattern: list[str], source: StepSource) -> tuple[int, Counter[tuple[str, object]]]:
    """Roles restarted, summed over the testbeds (each from its own last trial), and (testbed, cell) -> trials."""
    last: dict[str, Step] = {}
    restarts, ran = 0, Counter[tuple[str, object]]()
    for testbed in itertools.cycle(pattern):
        step = source.next(testbed)
        if step is None:
            return restarts, ran
        restarts += restarted_roles(last[testbed], step) if testbed in last else 0
        last[testbed] = step
        ran[(testbed, step.trial.cell)] += 1
    raise AssertionError("unreachable")


def test_min_restarts_testbeds_take_the_cheapest_of_the_cells_they_ran_least() -> None:
    """Ties among a testbed's least-run cells went to the first in plan order: consecutive trials
    of the min-restarts path went to different testbeds, and two testbeds restarted 117 roles
    (one testbed: 96). Ties go to the cell restarting fewest of the testbed's roles: 108, each cell
    still 6 and 6."""
    plan = _plan("min-restarts", 12)
    plan_order, _ = _restarts(plan, ["tb0", "tb1"], StepSource(plan.steps, set()))
    cheapest, ran = _restarts(plan, ["tb0", "tb1"], StepSource(plan.steps, set(), fewest_restarts=True))
    assert cheapest < plan_order
    assert {ran[(tb, c)] for tb in ("tb0", "tb1") for c in plan.cells} == {6}


def test_the_api_asks_for_fewest_restarts_only_for_a_min_restarts_plan() -> None:
    for order in ("min-restarts", "randomized", "sequential"):
        plan = _plan(order, 4)
        api, _ = _restarts(plan, ["tb0", "tb1"], _design(plan, set())(None))
        cheapest, _ = _restarts(plan, ["tb0", "tb1"], StepSource(plan.steps, set(), fewest_restarts=True))
        plan_order, _ = _restarts(plan, ["tb0", "tb1"], StepSource(plan.steps, set()))
        assert api == (cheapest if order == "min-restarts" else plan_order) and cheapest != plan_order, order
        _, adaptive = _adaptive(order)
        assert adaptive._fewest_restarts is (order == "min-restarts")
