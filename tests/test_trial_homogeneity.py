"""stats.trial_homogeneity's Monte Carlo path: Besag & Clifford's sequential p over tables drawn from
the multivariate hypergeometric (numpy's cheaper sampler). The p is valid, an overdispersed cell is
still caught, and a big homogeneous cell stops after few tables. Tables are counted here, not timed:
bench/bench_homogeneity.py and bench/bench_report.py measure the speed."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from orchestrator.core import dist, stats

H = stats._exceedances(stats.TRIAL_DRAWS)


def _cell(rng: np.random.Generator, trials: int, sessions: int, rate: float, icc: float = 0.0) -> list[tuple[int, int]]:
    p = rng.beta(rate * (1 - icc) / icc, (1 - rate) * (1 - icc) / icc, size=trials) if icc else np.full(trials, rate)
    return [(int(k), sessions) for k in rng.binomial(sessions, p)]


class _Counting:
    """A generator that counts the null tables drawn from it."""

    def __init__(self, rng: np.random.Generator, drawn: list[int]) -> None:
        self.rng, self.drawn = rng, drawn

    def multivariate_hypergeometric(self, colors: Any, nsample: int, size: int, **kw: Any) -> np.ndarray:
        self.drawn.append(size)
        return self.rng.multivariate_hypergeometric(colors, nsample, size=size, **kw)

    def multinomial(self, n: int, pvals: Any, size: int) -> np.ndarray:
        self.drawn.append(size)
        return self.rng.multinomial(n, pvals, size=size)


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the blocks of null tables trial_homogeneity draws (its generator has TRIAL_SEED)."""
    sizes: list[int] = []
    real = np.random.default_rng

    def counting(seed: Any = None) -> Any:
        return _Counting(real(seed), sizes) if seed == stats.TRIAL_SEED else real(seed)

    monkeypatch.setattr(np.random, "default_rng", counting)
    return sizes


# --- Besag & Clifford's p, on streams whose exceedances are known


def _stream(extreme_at: list[int], draws: int, blocks: list[int]) -> Iterator[np.ndarray]:
    """A null of `draws` statistics, 1.0 at the (0-based) draws in extreme_at and 0.0 elsewhere, in blocks."""
    values = np.zeros(draws)
    values[extreme_at] = 1.0
    edges = list(itertools.accumulate(blocks, initial=0))
    return (values[a:b] for a, b in itertools.pairwise([*edges, draws]) if b > a)


@pytest.mark.parametrize("blocks", [[1] * 400, [20, 40, 80, 160], [7, 900]])
def test_the_sequential_p_is_h_over_the_draw_of_the_hth_extreme_else_the_fixed_p(blocks: list[int]) -> None:
    draws = 1000
    hth = [3 * i + 2 for i in range(H)]  # the H-th as extreme is draw 3 H (1-based), wherever the blocks end
    assert stats._sequential_p(_stream(hth, draws, blocks), 1.0, draws, H) == H / (3 * H)
    fewer = list(range(50, 50 + H - 1))  # H - 1 as extreme in all the draws: (1 + g) / (1 + draws)
    assert stats._sequential_p(_stream(fewer, draws, blocks), 1.0, draws, H) == H / (draws + 1)
    assert stats._sequential_p(_stream([], draws, blocks), 1.0, draws, H) == 1 / (draws + 1)
    # ties with the observed statistic (the same table summed in another order) count as extreme
    assert stats._sequential_p(_stream(hth, draws, blocks), 1.0 + 1e-12, draws, H) == H / (3 * H)


def test_every_p_at_most_alpha_is_the_fixed_tests_own() -> None:
    """h = ceil(alpha (draws + 1)): wherever the sequential p or the fixed p (all draws, h past them)
    is at most ALPHA, the two are equal, so the report's decisions (Holm's thresholds are at most
    ALPHA) and the p it prints as evidence are the fixed test's. 2,000 seeded streams, the observed
    statistic in the null's 0-10% tail; and one h less fails it (a stop at the last draw)."""
    rng = np.random.default_rng(4)
    draws = stats.TRIAL_DRAWS
    low = 0
    for tail in rng.uniform(0, 0.1, size=2000):
        null = rng.random(draws)
        fixed = stats._sequential_p(iter([null]), 1 - tail, draws, draws + 1)
        sequential = stats._sequential_p(iter([null]), 1 - tail, draws, H)
        if min(fixed, sequential) <= stats.ALPHA:
            low += 1
            assert sequential == fixed, (tail, fixed, sequential)
    assert 800 < low < 1200
    last = np.zeros(draws)
    last[[*range(H - 2), draws - 1]] = 1.0  # H - 1 as extreme, the last at the last draw
    assert stats._sequential_p(iter([last]), 1.0, draws, H - 1) <= stats.ALPHA
    assert stats._sequential_p(iter([last]), 1.0, draws, H) == H / (draws + 1) > stats.ALPHA


def test_the_sequential_p_is_valid_on_pure_binomial_cells() -> None:
    """A/A: cells whose sessions share one rate, Monte Carlo designs (some expected count below 5),
    3 to 40 trials of 5 to 80 sessions. P(p <= u) must stay at most u (3 standard errors of slack).
    With few events most null tables tie with the observed one: a p that counted ties as less
    extreme fails it (4.4% at u = 0.01)."""
    rng = np.random.default_rng(11)
    designs = [(3, 40, 0.05), (8, 40, 0.02), (8, 5, 0.15), (40, 40, 0.005), (40, 80, 0.02)]
    ps = [stats.trial_homogeneity(_cell(rng, *d)) for d in designs for _ in range(200)]
    tested = np.array([p for p in ps if p is not None])
    assert tested.size > 800
    for u in (0.01, 0.05, 0.2, 0.5):
        share = float((tested <= u).mean())
        assert share <= u + 3 * math.sqrt(u * (1 - u) / tested.size), (u, share)


# --- the null's law at any block size (numpy's "count" sampler draws tables that depend on the blocks)


@pytest.mark.parametrize(("sessions", "events"), [((2, 3, 4), 3), ((1, 1, 5, 2), 4), ((20, 20, 1), 20)])
@pytest.mark.parametrize("block", [1, 7, 1 << 20])
def test_the_null_statistic_has_its_exact_law_whatever_the_blocks(
    sessions: tuple[int, ...], events: int, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every table of a tiny cell enumerated with its hypergeometric probability; 4,000 drawn spreads
    against that law, chi-square goodness of fit at 0.001 (drawn with replacement, the multinomial's
    spreads fail it)."""
    monkeypatch.setattr(stats, "NULL_BLOCK_CELLS", block)
    n = np.array(sessions, dtype=np.int64)
    tables = math.comb(int(n.sum()), events)
    law: dict[float, float] = {}
    for k in itertools.product(*(range(s + 1) for s in sessions)):
        if sum(k) == events:
            mass = math.prod(math.comb(s, x) for s, x in zip(sessions, k, strict=True)) / tables
            value = round(float(stats._spread(np.array(k), n, events / n.sum())), 9)
            law[value] = law.get(value, 0.0) + mass
    spreads = np.round(np.concatenate(list(stats._null_spreads(n, events, 4000, H))), 9)
    values, seen = np.unique(spreads, return_counts=True)
    assert set(values.tolist()) <= set(law)
    expected = np.array([4000 * law[v] for v in law])
    observed = np.array([seen[values == v].sum() for v in law])
    statistic = float(((observed - expected) ** 2 / expected).sum())
    assert statistic < float(dist.chi2_ppf(0.999, len(law) - 1)), (statistic, len(law))


# --- power kept, draws bounded


def test_a_clearly_overdispersed_cell_is_still_caught(drawn: list[int]) -> None:
    """The DSV4 pattern in one cell (two of 8 trials of 40 with 4 and 5 events, six with none): p
    2 / 5,001 as the fixed 5,000 tables gave, ten times below Holm's first threshold over a demo's 8
    cells; 500 trials that truly vary (ICC 0.1): p at the floor. Every table drawn, and no more."""
    dsv4 = stats.trial_homogeneity([(0, 40)] * 6 + [(4, 40), (5, 40)])
    assert dsv4 is not None and dsv4 < stats.ALPHA / 8 / 10
    assert sum(drawn) == stats.TRIAL_DRAWS
    drawn.clear()
    varying = _cell(np.random.default_rng(3), 500, 40, 0.01, icc=0.1)
    assert stats.trial_homogeneity(varying) == 1 / (stats.TRIAL_DRAWS + 1)
    assert sum(drawn) == stats.TRIAL_DRAWS


def test_a_big_homogeneous_cell_stops_after_few_tables(drawn: list[int]) -> None:
    """12,500 pure-binomial trials of 40 sessions at 0.5% (a 100,000-trial report's cell): the old
    test drew 5,000 tables of 12,500 trials (~40 of the report's ~45 CPU-s); the sequential p stops
    at the H-th table as extreme (draw H / p), in blocks that at most double what it needed."""
    p = stats.trial_homogeneity(_cell(np.random.default_rng(8), 12_500, 40, 0.005))
    assert p is not None and p > 0.5
    assert sum(drawn) <= 2 * H / p
    assert sum(drawn) <= stats.TRIAL_DRAWS // 5
