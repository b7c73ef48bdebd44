"""Plan: per-trial env, restarts only where env changes, dependency order, min-restarts order."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import read_inventory, read_matrix
from orchestrator.plan import dependants, make_plan, restart_order

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def ablation():
    m = read_matrix(REPO / "matrices/overlap_ablation.yaml")
    tb = read_inventory(REPO / "inventory/local.yaml").testbed(None)
    return m, tb


def test_only_roles_whose_env_changes_restart(ablation):
    m, tb = ablation
    plan = make_plan(m, tb, seed=4)
    for prev, step in zip(plan.steps, plan.steps[1:]):
        changed = {r for r in step.env if step.env[r] != prev.env.get(r)}
        assert set(step.changed_roles) == changed
        assert {r for r, _ in step.restart_units} == changed
        assert "router" not in changed  # no factor touches the router
        if changed:
            assert "router" in step.wait_roles  # its readiness depends on restarted workers


def test_decode_only_change_never_restarts_prefill(ablation):
    m, tb = ablation
    plan = make_plan(m, tb, seed=4)
    for prev, step in zip(plan.steps, plan.steps[1:]):
        same_index_k = prev.trial.cell.as_dict()["bf16_index_k"] == step.trial.cell.as_dict()["bf16_index_k"]
        if same_index_k:
            assert ("prefill", "sim-prefill") not in step.restart_units


def test_router_restarts_after_its_workers(ablation):
    _, tb = ablation
    assert restart_order(tb, {"router", "decode", "prefill"}) == ["prefill", "decode", "router"]
    assert dependants(tb, {"decode"}) == {"decode", "router"}


@pytest.mark.parametrize("seed", [1, 2, 3, 7])
def test_min_restarts_needs_no_more_restarts_than_other_orders(ablation, seed):
    m, tb = ablation
    counts = {o: make_plan(m, tb, seed, order=o).restart_count for o in ("randomized", "sequential", "min-restarts")}
    assert counts["min-restarts"] <= counts["sequential"] and counts["min-restarts"] <= counts["randomized"]
    plan = make_plan(m, tb, seed, replicates=3, order="min-restarts")
    for r in range(3):  # still every cell once per round
        assert sorted(s.trial.cell for s in plan.steps if s.trial.round == r) == sorted(plan.cells)


def test_min_restarts_is_strictly_better_on_the_ablation(ablation):
    m, tb = ablation
    assert make_plan(m, tb, 1, order="min-restarts").restart_count < make_plan(m, tb, 1, order="randomized").restart_count


def test_estimate_uses_startup_and_repro_estimates(ablation):
    m, tb = ablation
    plan = make_plan(m, tb, seed=1)
    first = plan.steps[0]
    assert first.estimate_s == pytest.approx(1.2 + 3)
    assert plan.estimated_duration_s == pytest.approx(sum(s.estimate_s for s in plan.steps))
