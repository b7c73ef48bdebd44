"""Which of the report's tests report.stopped reads a second time when an adaptive rule stopped a
cell: every test of the stopped metric that compares the stopped cell (its rate vs the baseline,
effects, interactions, the highest cell's neighbours), each with the larger p and the hull of the
two intervals; a test of another metric, or of a run where no cell stopped, is left as it was.
Hand-made views of a 2x2 whose (a=y, b=y) cell stopped after 3 trials."""

from __future__ import annotations

from orchestrator.core import clustered
from orchestrator.report import stopped
from orchestrator.report.model import CellView, EffectView, InteractionView, NeighbourView, ProportionCell, RateView

DISP = clustered.Dispersion(phi=1.0, df=1e9, trials=12, cells=4, most_trials=3, sessions_per_trial=20.0)
SMALL_P = 1e-6


def rate(k: int, n: int, *, p: float | None, stopped_early: bool = False) -> ProportionCell:
    return ProportionCell(
        rate=RateView(k=k, n=n, rate=k / n, low=0.0, high=1.0),
        trials=3,
        trial_rates=[],
        diff=0.0 if p is not None else None,
        diff_low=-0.01 if p is not None else None,
        diff_high=0.01 if p is not None else None,
        p=p,
        stopped=stopped_early,
    )


def cell(a: str, b: str, k: int, n: int, *, stop: bool = False) -> CellView:
    baseline = (a, b) == ("x", "x")
    views = {metric: rate(k, n, p=None if baseline else SMALL_P, stopped_early=stop) for metric in ("fail", "other")}
    return CellView(
        cell=f"a={a},b={b}",
        levels={"a": a, "b": b},
        is_baseline=baseline,
        planned=3,
        completed=3,
        failed=0,
        proportions=views,
        numbers={},
    )


CELLS = [cell("x", "x", 6, 60), cell("y", "x", 7, 60), cell("x", "y", 6, 60), cell("y", "y", 30, 60, stop=True)]
EFFECTS = [
    EffectView(metric=m, factor="a", level="y", reference="x", given={}, estimate=0.2, low=0.01, high=0.02,
               clear=True, strata=2, p=SMALL_P, p_holm=SMALL_P)
    for m in ("fail", "other")
]  # fmt: skip
INTERACTIONS = [
    InteractionView(metric=m, factors=["a", "b"], levels=["y", "y"], references=["x", "x"], estimate=0.4,
                    low=0.01, high=0.02, clear=True, strata=1, p=SMALL_P, p_holm=SMALL_P)
    for m in ("fail", "other")
]  # fmt: skip
NEIGHBOURS = [
    NeighbourView(metric=m, cell="a=x,b=y", factor="a", level="x", k=6, n=60, p=SMALL_P) for m in ("fail", "other")
]


def test_every_test_of_the_stopped_metric_that_compares_the_stopped_cell_is_read_again() -> None:
    cells, effects, interactions, neighbours = stopped.corrected(
        "fail", CELLS, DISP, EFFECTS, INTERACTIONS, NEIGHBOURS, "a=y,b=y"
    )
    again = cells[3].proportions["fail"]
    assert again.p is not None and again.p > SMALL_P  # the anytime-valid reading is the larger p
    assert again.diff_low is not None and again.diff_high is not None
    assert again.diff_low <= -0.01 and again.diff_high >= 0.01  # the hull of the two intervals
    for view in (effects[0], interactions[0]):
        assert view.p > SMALL_P and view.p_holm == view.p
        assert view.low <= 0.01 and view.high >= 0.02 and view.clear is (view.low > 0 or view.high < 0)
    assert neighbours[0].p > SMALL_P
    # the cells that did not stop, compared only with the baseline, keep their test
    assert cells[1] == CELLS[1] and cells[2] == CELLS[2] and cells[0] == CELLS[0]
    # another metric's tests are left as they were
    assert (effects[1], interactions[1], neighbours[1]) == (EFFECTS[1], INTERACTIONS[1], NEIGHBOURS[1])
    assert cells[3].proportions["other"] == CELLS[3].proportions["other"]


def test_without_the_highest_cell_the_neighbours_are_left_as_they_were() -> None:
    *_, neighbours = stopped.corrected("fail", CELLS, DISP, EFFECTS, INTERACTIONS, NEIGHBOURS, None)
    assert neighbours == NEIGHBOURS


def test_a_run_where_no_cell_stopped_keeps_every_test() -> None:
    ran_on = [c.model_copy(update={"proportions": {m: v.model_copy(update={"stopped": False})
                                                   for m, v in c.proportions.items()}}) for c in CELLS]  # fmt: skip
    got = stopped.corrected("fail", ran_on, DISP, EFFECTS, INTERACTIONS, NEIGHBOURS, "a=y,b=y")
    assert got == (ran_on, EFFECTS, INTERACTIONS, NEIGHBOURS)


def test_without_a_baseline_cell_no_rate_is_compared_and_the_effects_still_are() -> None:
    """A view with no baseline cell (each cell's `p` vs the baseline is then None too) has no rate
    test to read again; its effects compare cells all the same."""
    orphaned = [c.model_copy(update={"is_baseline": False}) for c in CELLS]
    cells, effects, _, _ = stopped.corrected("fail", orphaned, DISP, EFFECTS, INTERACTIONS, NEIGHBOURS, "a=y,b=y")
    assert cells == orphaned
    assert effects[0].p > SMALL_P
