"""The fast paths of `orch plan` and the report give what the definitions they replaced gave.

findings._Grid finds strata by one mixed-radix integer per cell and keeps its masks;
power._QuasiSim computes the fixed cells' spreads once. The old definitions are kept verbatim in
helpers/reference_stats.py; here they are compared exactly (==, not approximately).
"""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pandas as pd
import pytest
from helpers import reference_stats as ref

from orchestrator.core import findings, power, stats, trialexact
from orchestrator.core.stats import CellCount


def _cells(factors: dict[str, list[str]], rng: np.random.Generator, drop: float = 0.0) -> list[CellCount]:
    cells = []
    for combo in itertools.product(*factors.values()):
        if rng.random() < drop:
            continue
        levels = dict(zip(factors, combo, strict=True))
        n = int(rng.integers(0, 50)) if drop else 40
        cells.append(CellCount(levels, int(rng.integers(0, n + 1)), n))
    return cells


GRIDS = {
    "2x2x2": {"a": ["on", "off"], "b": ["on", "off"], "c": ["on", "off"]},
    "3x2x4": {"a": ["x", "y", "z"], "b": ["on", "off"], "c": ["1", "2", "3", "4"]},
    "2^9": {f"f{i}": ["a", "b"] for i in range(9)},
}


@pytest.mark.parametrize("name", sorted(GRIDS))
@pytest.mark.parametrize("drop", [0.0, 0.3])
def test_grid_terms_equal_the_row_wise_definition(name: str, drop: float) -> None:
    factors = GRIDS[name]
    rng = np.random.default_rng(len(name) + int(drop * 10))
    cells = _cells(factors, rng, drop)
    cells.append(CellCount({"a": next(iter(factors["a"])) if "a" in factors else "on"}, 3, 9))  # lacks factors
    reference = {f: levels[0] for f, levels in factors.items()}
    grid = findings._Grid(findings._pool(cells))
    wanted = findings._wanted(factors, reference, findings.MAX_ORDER)
    assert wanted
    for changes, given in wanted:
        got = grid.terms(changes, dict(given))
        assert got == ref.grid_terms(grid, changes, dict(given)), (changes, given)
        assert grid.full_strata(changes, dict(given)) == got[1]


def test_grid_with_more_levels_than_one_int64_holds_uses_the_rows() -> None:
    """Strata keys beyond 2^62 fall back to np.unique over rows: same terms."""
    factors = {f"f{i}": [f"l{j}" for j in range(70)] if i < 11 else ["a", "b"] for i in range(12)}
    rng = np.random.default_rng(3)
    cells = [
        CellCount({f: str(rng.choice(levels)) for f, levels in factors.items()}, int(k), 20)
        for k in rng.integers(0, 20, 300)
    ]
    grid = findings._Grid(findings._pool(cells))
    changes = (("f11", "a", "b"),)
    assert grid.terms(changes, {}) == ref.grid_terms(grid, changes, {})


def test_contrast_count_equals_the_old_one_on_1024_cells() -> None:
    factors = {f"f{i}": ["a", "b"] for i in range(10)}
    cells = [dict(zip(factors, combo, strict=True)) for combo in itertools.product(*factors.values())]
    baseline = {f: "a" for f in factors}
    assert findings.contrast_count(cells, factors, baseline) == ref.contrast_count(cells, factors, baseline)


DESIGNS = [
    power.Design(sessions=2, trials=4, other_rates=(0.0,) * 62),  # `orch plan`'s: many cells, nothing varies
    power.Design(sessions=40, trials=2, other_rates=(0.01, 0.0, 0.05, 0.16, 0.0, 0.02), phi=1.8),  # beta draws
    power.Design(sessions=20, trials=3, other_rates=(), phi=1.3),  # one cell carries phi: trialexact steps in
    power.Design(sessions=10, trials=1, other_rates=(0.1, 0.2)),  # one trial: Fisher
]


@pytest.mark.parametrize("design", DESIGNS, ids=lambda d: f"{d.sessions}x{d.trials}+{len(d.other_rates)}")
def test_quasi_reject_equals_the_old_one(design: power.Design) -> None:
    for base in (0.0, 0.02, 0.15):
        sim = power._QuasiSim(design, base, seed=0)
        for rate in (0.0, 0.03, 0.4, 1.0):
            assert np.array_equal(sim.reject(rate, 0.05), ref.quasi_reject(sim, rate, 0.05)), (base, rate)
            assert np.array_equal(sim.reject(rate, 0.001), ref.quasi_reject(sim, rate, 0.001)), (base, rate)


def test_quasi_detectable_equals_the_old_one() -> None:
    design = DESIGNS[0]
    for base in (0.0, 0.05):
        assert power.quasi_detectable.__wrapped__(design, base) == ref.quasi_detectable(design, base)


def test_calibration_pvalue_equals_the_old_one() -> None:
    """Distinct values looked up once: the same p, duplicates, -inf, nan and -0.0 included."""
    cal = trialexact.calibration((20, 20, 20), (20, 20, 20))
    rng = np.random.default_rng(5)
    kc, kb = rng.integers(0, 4, (2000, 3)), rng.integers(0, 3, (2000, 3))
    stats = cal.tables.statistic(kc, kb)
    assert np.unique(stats).size < stats.size  # duplicates, as in a simulation
    assert np.array_equal(cal.pvalue(stats), ref.calibration_pvalue(cal, stats))
    odd = np.array([[-np.inf, np.nan, -0.0, 0.0], [1e-300, 3.7, 3.7, np.inf], [40.0, -1.0, np.nan, -np.inf]])
    assert np.array_equal(cal.pvalue(odd), ref.calibration_pvalue(cal, odd), equal_nan=True)
    assert cal.pvalue(odd).shape == odd.shape
    assert np.array_equal(cal.pvalue(stats[:1]), ref.calibration_pvalue(cal, stats[:1]))
    assert cal.pvalue(2.5).shape == ()


def test_report_dispersion_equals_the_groupby_one() -> None:
    """report.build._dispersion groups by a stable sort, not pandas groupby: same Dispersion, missing
    cells (dropped by groupby) and empty frames included."""
    from orchestrator.report import build

    rng = np.random.default_rng(0)
    for trial in range(200):
        m = int(rng.integers(0, 60))
        names = [f"c{i}" for i in range(int(rng.integers(1, 9)))]
        cell = pd.array([str(rng.choice(names)) for _ in range(m)], dtype="string")
        if m and trial % 5 == 0:
            cell[int(rng.integers(0, m))] = pd.NA
        n = rng.integers(0, 50, m)
        rows = pd.DataFrame({"cell": cell, "k": np.minimum(n, rng.integers(0, 5, m)), "n": n})
        assert repr(build._dispersion(rows)) == repr(ref.report_dispersion(rows))


def _null(sessions: tuple[int, ...], events: int, draws: int) -> np.ndarray:
    """trial_homogeneity's null statistics, every block drawn, sorted as the old null was."""
    return np.sort(np.concatenate(list(stats._null_spreads(np.array(sessions, dtype=np.int64), events, draws, 20))))


@pytest.mark.parametrize(
    ("sessions", "events"),
    [
        (tuple(range(30, 90)), 2000),  # numpy's "marginals" sampler (more events than the "count" one takes)
        ((10**8,) * 12, 9),  # past HYPERGEOMETRIC_MAX sessions: the multinomial
    ],
)
@pytest.mark.parametrize("block", [1, 1000, 1 << 20])
def test_the_homogeneity_null_drawn_in_blocks_is_the_one_drawn_at_once(
    sessions: tuple[int, ...], events: int, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the old sampler still draws the null, blocks of any size give the old null to the bit.
    (Cells of few events per trial now take numpy's "count" sampler, whose tables depend on the
    blocks: test_trial_homogeneity checks its law exactly instead.)"""
    monkeypatch.setattr(stats, "NULL_BLOCK_CELLS", block)
    assert _null(sessions, events, 301).tobytes() == ref.homogeneity_null(sessions, events, 301).tobytes()


def test_the_homogeneity_null_holds_one_block_of_tables_however_many_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell of 5,000 trials and 200 draws: 1M table cells, 8 MB an array drawn at once (a
    100,000-trial report peaked at 1.9 GB this way); in blocks of 64K cells, about 2 MB in all."""
    monkeypatch.setattr(stats, "NULL_BLOCK_CELLS", 1 << 16, raising=False)
    tracemalloc.start()
    try:
        _null((40,) * 5000, 20, 200)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"{peak / 1e6:.1f} MB"


# phi > 1: the compared cell's trial rates are beta quantiles, which power._QuasiSim.cell_counts
# bounds by a grid; ICC 0.04 to 0.4, 1 to 80 sessions, baselines 0.5% to 50%
BETA_DESIGNS = [
    (power.Design(sessions=20, trials=4, other_rates=(0.0,), phi=1.8), 0.06),
    (power.Design(sessions=5, trials=6, other_rates=(0.01, 0.2), phi=2.2), 0.005),
    (power.Design(sessions=80, trials=2, other_rates=(), phi=1.01), 0.5),
    (power.Design(sessions=1, trials=8, other_rates=(0.0,), phi=1.4), 0.1),
]
BETA_IDS = [f"{d.sessions}x{d.trials}@{base}" for d, base in BETA_DESIGNS]
CELL_RATES = (1e-4, 0.003, 0.0906, 0.53, 0.9999)


@pytest.mark.parametrize(("design", "base"), BETA_DESIGNS, ids=BETA_IDS)
def test_cell_counts_equal_every_trials_quantile_with_few_quantiles_drawn(
    design: power.Design, base: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grid gives each trial the count its own quantile gives (the full computation of 7556b0b),
    drawing a small share of the quantiles, some trials' own among them (the grid's bounds do not
    settle every trial: the exact path is exercised)."""
    sim = power._QuasiSim(design, base, seed=0)
    drawn: list[int] = []
    quantile = power.dist.beta_ppf

    def counted(q: np.ndarray, a: float, b: float) -> np.ndarray:
        drawn.append(int(np.size(q)))
        return quantile(q, a, b)

    monkeypatch.setattr(power.dist, "beta_ppf", counted)
    counts = {rate: sim.cell_counts(rate) for rate in CELL_RATES}
    monkeypatch.undo()
    for rate, got in counts.items():
        assert np.array_equal(got, ref.full_quantile_counts(sim, rate)), rate
    own = drawn[1::2]  # each step: the grid's quantiles, then the unsure trials' own
    assert drawn[::2] == [sim._grid + 1] * len(CELL_RATES) and sum(own) > 0, drawn
    assert sum(drawn) < 0.25 * len(CELL_RATES) * sim.trial_u.size, (sum(drawn), sim.trial_u.size)


@pytest.mark.parametrize(("design", "base"), BETA_DESIGNS[1::2], ids=BETA_IDS[1::2])
def test_quasi_reject_equals_every_trials_quantile(design: power.Design, base: float) -> None:
    """Sweep by sweep, the same rejections as the simulation drawing every trial's quantile."""
    sim, full = power._QuasiSim(design, base, seed=0), ref.FullQuantileSim(design, base, seed=0)
    for rate in (0.003, 0.0906, 0.53):
        for alpha in (0.05, 0.001):
            assert np.array_equal(sim.reject(rate, alpha), full.reject(rate, alpha)), (rate, alpha)


def test_quasi_detectable_equals_every_trials_quantile() -> None:
    design, base = BETA_DESIGNS[1]
    power._shared_sim.cache_clear()
    new = power.quasi_detectable.__wrapped__(design, base)
    assert new == ref.quasi_detectable_full_quantiles(design, base) and new.rise is not None


def test_cell_counts_are_exact_at_ties_with_the_quantile_and_the_grid() -> None:
    """Session uniforms set to a trial's very quantile (not below it: no event), one ulp under it
    (an event), and at and beside the grid's quantiles around it: every trial's count is still the
    one its own quantile gives."""
    design, base = BETA_DESIGNS[0]
    rate = 0.13
    sim = power._QuasiSim(design, base, seed=0)
    own = np.asarray(sim._trial_rates(rate, sim.trial_u))
    grid = np.asarray(sim._trial_rates(rate, np.arange(sim._grid + 1) / sim._grid))
    below, above = grid[sim._grid_cell], grid[sim._grid_cell + 1]
    x = sim.session_u
    x[..., 0], x[..., 1], x[..., 2], x[..., 3] = own, np.nextafter(own, 0), below, above
    x[..., 4], x[..., 5] = np.nextafter(below, 0), np.nextafter(above, 1)
    x.sort(axis=-1)
    assert np.array_equal(sim.cell_counts(rate), ref.full_quantile_counts(sim, rate))


@pytest.mark.parametrize("icc", [1e-6, 1e-4, 0.01, 0.05, 0.3, 0.5])
def test_the_quantile_is_monotone_in_u_within_the_grids_slack(icc: float) -> None:
    """What cell_counts rests on: a trial's computed quantile lies between the grid's at the points
    around its u, widened by QUANTILE_SLACK and QUANTILE_FLOOR, at u on, beside and between them
    (the computed quantile steps back by a last bit here and there, 1e-24 near 0)."""
    size = 1024
    points = np.arange(size + 1) / size
    rng = np.random.default_rng(7)
    u = np.concatenate([points[:-1], np.nextafter(points[1:-1], 0), np.nextafter(points[1:-1], 1), rng.random(5000)])
    cell = np.minimum((u * size).astype(np.int64), size - 1)
    scale = (1 - icc) / icc
    for p in (1e-4, 0.001, 0.005, 0.03, 0.1, 0.3, 0.5, 0.9, 0.99, 0.9999):
        grid = power.dist.beta_ppf(points, p * scale, (1 - p) * scale)
        slack = power.QUANTILE_SLACK * grid + power.QUANTILE_FLOOR
        q = power.dist.beta_ppf(u, p * scale, (1 - p) * scale)
        assert np.all((grid - slack)[cell] <= q) and np.all(q <= (grid + slack)[cell + 1]), p
