"""The hunt estimates the trial-to-trial variation from its own trials (core.huntspread)
instead of only assuming the matrix's `icc`: trials that vary more than stated weigh less, so a
clean streak that wide variation explains no longer makes a wrong set certain; the matrix's `icc`
stays the floor, and the report says which value was used and on what it rests."""

from __future__ import annotations

import numpy as np

from orchestrator.core.hunt import Hunt, HuntSettings
from orchestrator.core.hunt_model import ModelSettings, Posterior, design_effect, enumerate_hypotheses
from orchestrator.core.huntspread import ICC_CEILING, TrialSpread

FLAGS = ("f0", "f1", "f2")
FULL = 7
WIDE = (5, 0, 0, 4, 0, 0, 5, 0)  # the failing configuration's trials of 5: all or nothing, restart by restart


def observed(full_trials: tuple[int, ...], f0_drop_clean: int) -> Hunt:
    """Truth "f1 AND f2" (f0 a no-op) whose f0 drop stayed clean by chance: the failing configuration
    (k of 5 per trial), the clean one 4 trials, the f1 and f2 drops 6 clean trials each, the f0 drop
    `f0_drop_clean` clean trials."""
    hunt = Hunt(HuntSettings(FLAGS, sessions_per_trial=5))
    for k in full_trials:
        hunt.observe(FULL, k, 5)
    for x, trials in ((0, 4), (FULL ^ 2, 6), (FULL ^ 4, 6), (FULL ^ 1, f0_drop_clean)):
        for _ in range(trials):
            hunt.observe(x, 0, 5)
    return hunt


def test_a_clean_streak_that_wide_trial_variation_explains_does_not_make_a_wrong_set_certain() -> None:
    """Assuming ICC 0.03, three clean trials of f0's drop against a failing configuration at 14/40
    gave "f0 AND f1 AND f2" 0.970 (>= the 0.95 target) though f0 is a no-op: its trials, all or
    nothing, show a dispersion of 41.5 / 7.96 = 5.21 on 7 df, whose 99% lower bound 5.21 x 7 / 18.48
    = 1.97 is ICC (1.97 - 1) / 4 = 0.244: a trial of 5 counts as 2.5 sessions, not 4.5."""
    hunt = observed(WIDE, 3)
    best = hunt.result(top_n=1).best
    assert best.describe() == "f0 AND f1 AND f2"
    assert best.probability < 0.8
    assert hunt.icc.estimated and round(hunt.icc.icc, 3) == 0.244
    assert hunt.icc.df == 7.0 and hunt.icc.cells == 1


def test_trials_that_vary_no_more_than_stated_keep_the_stated_icc_and_the_posterior_it_gave() -> None:
    """The matrix's icc is a floor: trials tighter than the binomial (a dispersion under 1) do not
    lower it, and the posterior is then the one the stated icc gives."""
    hunt = observed((1, 2, 1, 2, 1, 2, 1, 2), 6)
    assert hunt.icc.df >= 2 and hunt.icc.phi < 1.0
    assert hunt.icc.icc == 0.03 and not hunt.icc.estimated
    stated = Posterior(hunt.post.hyps, ModelSettings())
    for x, s in hunt.spread.counts.items():
        for k, n in s:
            stated.add(x, k, n)
    assert np.allclose(hunt.post.probabilities(), stated.probabilities(), rtol=0, atol=1e-12)


def test_the_estimate_rests_on_repeated_trials_only_and_never_passes_the_ceiling() -> None:
    spread = TrialSpread(0.03)
    assert spread.add(1, 5, 5).icc == 0.03  # one trial: nothing to estimate from
    assert spread.add(1, 0, 5).df == 1.0 and spread.estimate().icc == 0.03  # 1 df: too few (SPREAD_MIN_DF)
    for k in (5, 0, 5, 0):
        used = spread.add(1, k, 5)
    assert 0.03 < used.icc < ICC_CEILING  # phi 6.0 on 5 df: its 99% lower bound 1.99, icc 0.247
    wide = TrialSpread(0.03)
    for i in range(20):
        used = wide.add(1, 10 * (i % 2), 10)
    assert used.icc == ICC_CEILING and used.estimated  # phi 10.5 on 19 df: bound 5.5, icc 0.5 unbounded
    assert TrialSpread(0.6).add(1, 0, 5).icc == 0.6  # a floor above the ceiling is the user's: kept


def test_a_new_estimate_re_tempers_every_trial_seen() -> None:
    """The posterior after set_icc is the one a posterior tempered at that icc from its first trial
    holds: the trials' evidence follows the estimate, not the icc in force when each came."""
    hyps = enumerate_hypotheses(3, ModelSettings())
    late, early = Posterior(hyps, ModelSettings()), Posterior(hyps, ModelSettings(icc=0.3))
    for x, k, n in ((7, 3, 5), (7, 0, 5), (6, 0, 10), (3, 2, 10), (0, 0, 5)):
        late.add(x, k, n)
        early.add(x, k, n)
    late.set_icc(0.3)
    assert np.allclose(late.probabilities(), early.probabilities(), rtol=0, atol=1e-12)
    assert np.isclose(early.n_total, 15 / design_effect(5, 0.3) + 20 / design_effect(10, 0.3))
