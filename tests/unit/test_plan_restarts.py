"""The restarts a plan states (core.plan): every trial restarts exactly the roles whose complete env
differs from the previous trial's (the first trial: the roles its cell sets), whatever the order
and seed; and `orch plan`'s restart count of an order it did not build counts units, not hosts.

Found by mutation testing (bench/mutants.py): a cache key that let the first trial's restarts
stand in for a later transition's, and a count of hosts where units restart, left every test of
the plan green (the local inventory runs one unit per host, and the seeds tested never met the
colliding transition).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeUnit, Role, flag, make_bed, make_plan

from orchestrator.core import plan as core_plan
from orchestrator.core.config import read_inventory, read_matrix

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("order", ["randomized", "sequential", "min-restarts"])
def test_each_trial_restarts_the_roles_whose_env_differs_from_the_previous_trials(order: str) -> None:
    m = read_matrix(REPO / "matrices/overlap_ablation.yaml")
    tb = read_inventory(REPO / "inventory/local.yaml").testbed(None)
    for seed in range(40):
        steps = core_plan.make_plan(m, tb, seed, replicates=3, order=order).steps
        previous: dict[str, object] = {}
        for step in steps:
            roles = previous.keys() | step.env.keys()
            changed = {r for r in roles if previous.get(r, {}) != step.env.get(r, {})}
            assert set(step.changed_roles) == changed, (seed, step.trial.index)
            assert {r for r, _ in step.restart_units} == changed
            previous = dict(step.env)


def test_the_restart_count_of_an_order_not_built_counts_each_unit() -> None:
    """A host running two units restarts both: `orch plan` compares the orders by that count."""
    bed = make_bed({"decode": Role("", [FakeUnit("engine"), FakeUnit("sidecar")]), "prefill": Role("")})
    plan = make_plan(bed, {"a": flag("decode", "A"), "b": flag("prefill", "B")}, replicates=3, order="randomized")
    decode_restarts = sum(1 for s in plan.steps if "decode" in s.changed_roles)
    prefill_restarts = sum(1 for s in plan.steps if "prefill" in s.changed_roles)
    assert plan.restart_count == 2 * decode_restarts + prefill_restarts
    for order in ("randomized", "sequential", "min-restarts"):
        built = core_plan.make_plan(plan.matrix, plan.testbed, plan.seed, plan.replicates, order=order)
        counted = core_plan.restart_count(plan.matrix, plan.testbed, plan.seed, plan.replicates, order)
        assert counted == built.restart_count
