"""`orch plan` of a 4,096-cell matrix with a number metric (12 two-level factors, 2 replicates) took
16 s (cProfile, load 8), two parts of it the same work done again for every cell or every order:
- core.family.unreachable asked ranks.mann_whitney_can_reach for each of the 4,095 cells, each time
  running a whole Mann-Whitney test on m tied values vs n: the answer depends on (m, n) only, and a
  plan (every cell at its replicates) or a report (a few trial counts) has few such pairs;
- planview._other_orders weighed the three orders with core.plan.restart_count, which expanded the
  matrix again for each (4,096 cells, ~0.6 s each) where the plan holds its cells.
No timing here: bench/bench_plan.py prints both before and after, side by side."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from orchestrator.core import family, ranks
from orchestrator.core.config import read_inventory, read_matrix

REPO = Path(__file__).resolve().parents[2]


def _design(factors: int, replicates: int) -> family.Design:
    names = [f"f{i}" for i in range(factors)]
    cells = {
        ",".join(f"{n}={v}" for n, v in zip(names, combo, strict=True)): dict(zip(names, combo, strict=True))
        for combo in itertools.product(("on", "off"), repeat=factors)
    }
    baseline = next(iter(cells))
    trials = dict.fromkeys(cells, replicates)
    wall = family.MetricDesign("number", cells, trials=trials)
    return family.Design(dict.fromkeys(names, ["on", "off"]), cells[baseline], baseline, {"wall": wall})


def test_unreachable_runs_one_mann_whitney_per_pair_of_trial_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = ranks.mann_whitney

    def counted(a, b, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append((len(a), len(b)))
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(ranks, "mann_whitney", counted)
    for cache in (ranks.mann_whitney_can_reach, ranks.mann_whitney_smallest_p):
        cache.cache_clear()  # type: ignore[attr-defined]
    design = _design(8, 2)
    assert len(family.unreachable(design)) == 255  # 2 vs 2 trials can never differ: every cell leaves
    assert len(family.unreachable(design)) == 255
    assert calls == [(2, 2)]


def test_the_cached_answers_are_the_computed_ones() -> None:
    for m, n in itertools.product(range(9), repeat=2):
        smallest = min(ranks.mann_whitney_min_p(m, n), ranks.mann_whitney([1.0] * m, [0.0] * n)) if m and n else 1.0
        assert ranks.mann_whitney_smallest_p(m, n) == smallest
        reach = ranks.mann_whitney_min_p(m, n) < 0.05 or smallest < 0.05
        assert ranks.mann_whitney_can_reach(m, n, 0.05) is reach


def test_other_orders_reuses_the_plans_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli import planview
    from orchestrator.core import plan as core_plan

    m = read_matrix(REPO / "matrices/overlap_ablation.yaml")
    tb = read_inventory(REPO / "inventory/local.yaml").testbed(None)
    plan = core_plan.make_plan(m, tb, 1, 2)
    expanded = []
    real = core_plan.expand
    monkeypatch.setattr(core_plan, "expand", lambda matrix: expanded.append(1) or real(matrix))
    said = planview._other_orders(plan)
    assert expanded == []
    orders = ("randomized", "sequential", "min-restarts")
    counts = [core_plan.make_plan(m, tb, 1, 2, order=o).restart_count for o in orders]
    assert said == f"per order: randomized {counts[0]}, sequential {counts[1]}, min-restarts {counts[2]}"
