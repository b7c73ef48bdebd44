"""The nightly check when nights themselves vary: a night effect shared by every trial of a night
(a GPU clock, a neighbour, a reboot) that no spread within a night shows.

Seeded Monte-Carlo with fixed sizes. Each simulated night checks CELLS cells against LOOKBACK
earlier nights through `check_night` (Holm-adjusted together); a false alarm is a night with any
flag. Bounds are 5% plus two Monte-Carlo standard errors. Measured with these seeds, before the
night-level tests were added (the trial-level tests alone) and after:

    steady rates, 5%, between-night ICC 0.05:   16.7% before, 2.0% after   (bound 7.5%)
    steady numbers, night SD = trial SD:        21.0% before, 1.0% after   (bound 7.5%)
    rates 2% -> 20% tonight (ICC 0.01):         power 99% before, 73% after
    numbers +8 night SDs tonight:               power 100% before, 99% after
    steady, nights do not vary:                 rates 0.0% before and after; numbers 1.3% -> 0.0%

The power lost on rates is the price of the night as the unit: with 7 earlier nights the
night-to-night spread is known only roughly, and its 90% upper bound is what the test assumes.
"""

from __future__ import annotations

import math

import numpy as np

from orchestrator.core.regression import LOOKBACK, NumberHistory, RateHistory, check_night

CELLS = 4
SESSIONS = 40  # per trial


def _bound(nights: int) -> float:
    """5% plus two Monte-Carlo standard errors of a false-alarm rate measured over `nights`."""
    return 0.05 + 2 * math.sqrt(0.05 * 0.95 / nights)


def _draw_rate(rng: np.random.Generator, mean: float, icc: float) -> float:
    """A night's true rate: beta around `mean` with intra-class correlation `icc` (0: fixed)."""
    if icc <= 0 or mean <= 0:
        return mean
    return float(rng.beta(mean * (1 - icc) / icc, (1 - mean) * (1 - icc) / icc))


def _rate_night(rng: np.random.Generator, mean: float, icc: float, trials: int) -> tuple[tuple[int, int], ...]:
    """One night of one cell: `trials` trials of SESSIONS sessions sharing the night's rate."""
    rate = _draw_rate(rng, mean, icc)
    return tuple((int(k), SESSIONS) for k in rng.binomial(SESSIONS, rate, size=trials))


def _number_night(rng: np.random.Generator, night_sd: float, trials: int, level: float = 10.0) -> tuple[float, ...]:
    """One night of one cell: trial values (SD 1) around the level plus the night's shift."""
    shift = rng.normal(0.0, night_sd) if night_sd > 0 else 0.0
    return tuple(float(v) for v in rng.normal(level + shift, 1.0, size=trials))


def _rate_nights(seed: int, nights: int, mean: float, icc: float, tonight: float | None = None) -> float:
    """Share of nights flagged: any cell (steady), or cell 0 when its rate is `tonight` tonight."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(nights):
        cells = []
        for c in range(CELLS):
            trials = int(rng.integers(2, 5)) if tonight is None else 4
            history = tuple(_rate_night(rng, mean, icc, trials) for _ in range(LOOKBACK))
            today = tonight if tonight is not None and c == 0 else mean
            cells.append(RateHistory(str(c), "corruption", history, _rate_night(rng, today, icc, trials)))
        flagged = {ch.cell for ch in check_night(cells) if ch.flagged}
        hits += "0" in flagged if tonight is not None else bool(flagged)
    return hits / nights


def _number_nights(seed: int, nights: int, night_sd: float, shift: float | None = None) -> float:
    """Share of nights flagged: any cell (steady), or cell 0 when its level moves by `shift`."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(nights):
        cells = []
        for c in range(CELLS):
            trials = int(rng.integers(2, 5)) if shift is None else 4
            history = tuple(_number_night(rng, night_sd, trials) for _ in range(LOOKBACK))
            level = 10.0 + (shift if shift is not None and c == 0 else 0.0)
            cells.append(NumberHistory(str(c), "wall", history, _number_night(rng, night_sd, trials, level)))
        flagged = {ch.cell for ch in check_night((), cells) if ch.flagged}
        hits += "0" in flagged if shift is not None else bool(flagged)
    return hits / nights


def test_steady_rates_with_a_night_effect_raise_at_most_5_percent_false_alarms() -> None:
    """Each night's rate drawn from a beta around 5% (between-night ICC 0.05), 2-4 trials of 40
    sessions a night: the trial-level tests alone flagged 17% of nights."""
    assert _rate_nights(seed=1, nights=300, mean=0.05, icc=0.05) <= _bound(300)


def test_steady_numbers_with_a_night_shift_raise_at_most_5_percent_false_alarms() -> None:
    """Each night's level shifted by a normal of the trials' own SD: Mann-Whitney of trial values
    alone flagged 23% of nights."""
    assert _number_nights(seed=2, nights=300, night_sd=1.0) <= _bound(300)


def test_a_real_rate_jump_is_still_flagged_when_nights_vary() -> None:
    """One cell's rate 2% -> 20% tonight, nights varying (ICC 0.01), 4 trials a night: flagged
    in most nights (73% here; 99% before, when steady nights were flagged 4 times too often)."""
    assert _rate_nights(seed=3, nights=100, mean=0.02, icc=0.01, tonight=0.20) >= 0.6


def test_a_real_number_shift_is_still_flagged_when_nights_vary() -> None:
    """One cell's level up by 8 night SDs tonight (night SD = trial SD, 4 trials a night):
    flagged in 99% of nights (100% before)."""
    assert _number_nights(seed=4, nights=100, night_sd=1.0, shift=8.0) >= 0.9


def test_steady_independent_nights_raise_at_most_5_percent_false_alarms() -> None:
    """No night effect at all: the larger p never makes the check more liberal than before."""
    assert _rate_nights(seed=5, nights=150, mean=0.05, icc=0.0) <= _bound(150)
    assert _number_nights(seed=6, nights=150, night_sd=0.0) <= _bound(150)


def test_rare_nights_of_no_events_answer_with_a_finite_p() -> None:
    """Nights of 0/40 have no spread: the night test does not apply (nothing divides by zero or
    returns nan), the trial-level tests still flag tonight's 11/80, and tonight's 0/80 is no
    change at all."""
    history = (((0, 40), (0, 40)),) * LOOKBACK
    quiet, jump = check_night(
        [RateHistory("quiet", "m", history, ((0, 40), (0, 40))), RateHistory("jump", "m", history, ((5, 40), (6, 40)))]
    )[::-1]
    assert jump.flagged and 0 <= jump.p < 0.001 and not quiet.flagged
    assert all(math.isfinite(c.p) for c in (quiet, jump))
    assert "night-level" not in jump.method  # no spread among the nights: the other tests decide
    constant = check_night((), [NumberHistory("c", "w", ((1.0, 1.0),) * LOOKBACK, (1.0, 1.0))])
    assert constant[0].p == 1.0 and "night-level" not in constant[0].method


def test_the_method_names_the_night_test_only_when_it_applied() -> None:
    one_night = (((1, 40), (0, 40)),)
    two_nights = one_night * 2
    assert "night-level" not in check_night([RateHistory("c", "m", one_night, ((1, 40),))])[0].method
    rate = check_night([RateHistory("c", "m", two_nights, ((1, 40),))])[0].method
    assert rate.startswith("quasi-binomial") and "a night-level beta-binomial test over 2 nights" in rate
    number = check_night((), [NumberHistory("c", "w", ((1.0, 2.0), (1.5, 2.5)), (3.0, 4.0))])[0].method
    assert number.startswith("Mann-Whitney") and "night-level prediction test over 2 nights" in number
