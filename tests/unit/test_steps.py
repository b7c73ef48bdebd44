"""core.steps: what a plan says it costs (its restarts and its estimated time, as `orch plan` prints
them) and the seed drawn when none is named (bench/mutants.py round nine: nothing that imports
core.steps checked them)."""

from __future__ import annotations

import types

import pytest

from orchestrator.core import steps
from orchestrator.core.steps import Plan, Step


def _step(restarts: tuple[tuple[str, str], ...], estimate_s: float) -> Step:
    return Step(types.SimpleNamespace(), {}, (), restarts, (), estimate_s)  # type: ignore[arg-type]


def test_a_plan_counts_every_restart_and_sums_every_estimate() -> None:
    plan = Plan(
        matrix=types.SimpleNamespace(),  # type: ignore[arg-type]
        testbed=types.SimpleNamespace(),  # type: ignore[arg-type]
        seed=1,
        replicates=1,
        cells=(),
        steps=(
            _step((("prefill", "p.service"), ("decode", "d.service")), 12.5),
            _step((), 3.0),
            _step((("decode", "d.service"),), 7.25),
        ),
    )
    assert plan.restart_count == 3
    assert plan.estimated_duration_s == pytest.approx(22.75)


def test_a_drawn_seed_is_a_non_negative_31_bit_integer(monkeypatch: pytest.MonkeyPatch) -> None:
    """run.json records it, and numpy's and the report's seeds take it as such."""
    bounds: list[int] = []
    monkeypatch.setattr(steps.secrets, "randbelow", lambda bound: bounds.append(bound) or bound - 1)
    assert steps.new_seed() == 2**31 - 1
    assert bounds == [2**31]
