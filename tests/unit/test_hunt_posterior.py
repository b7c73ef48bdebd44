"""The hunt's posterior over culprit sets against a hand computation (core/hunt_model.py).

The posterior is what `orch hunt` names as the culprits and the figure it quotes ("top posterior
0.97"). Here two flags, no trial-to-trial variation (icc 0: every session counts), and the
marginal likelihood of each hypothesis integrated numerically (scipy's quad over each group's
Beta prior), its prior worked out from ModelSettings by hand: a swapped sign in the background's
Beta-binomial or its pooled counts moves these numbers (mutation testing: bench/README.md,
"Fourth round")."""

from __future__ import annotations

import math

import pytest
from scipy import integrate
from scipy.stats import beta

from orchestrator.core.hunt_model import ModelSettings, Posterior, enumerate_hypotheses

SETTINGS = ModelSettings(icc=0.0)
TRIALS = {0b11: (6, 10), 0b00: (1, 10), 0b01: (5, 10), 0b10: (2, 10)}  # config: (failed, sessions)
# hypothesis (a, b) -> the configurations it calls affected, and its prior (none 0.02, the one OR
# 0.15, the AND sets 0.83 split as (1/3)^size: each single flag 3/7 of it, the pair 1/7)
SPACE = {
    (0, 0): ({0, 1, 2, 3}, 0.02),
    (1, 0): ({1, 3}, 0.83 * 3 / 7),
    (2, 0): ({2, 3}, 0.83 * 3 / 7),
    (3, 0): ({3}, 0.83 / 7),
    (1, 2): ({1, 2, 3}, 0.15),
}


def _marginal(k: int, n: int, a: float, b: float) -> float:
    """∫ p^k (1 - p)^(n - k) Beta(p; a, b) dp (the binomial coefficients cancel over hypotheses)."""
    value, _ = integrate.quad(lambda p: p**k * (1 - p) ** (n - k) * beta.pdf(p, a, b), 0, 1, limit=200)
    return value


def _hand_posterior() -> dict[tuple[int, int], float]:
    weights = {}
    for key, (affected, prior) in SPACE.items():
        k1 = sum(TRIALS[x][0] for x in affected)
        n1 = sum(TRIALS[x][1] for x in affected)
        k0 = sum(TRIALS[x][0] for x in TRIALS if x not in affected)
        n0 = sum(TRIALS[x][1] for x in TRIALS if x not in affected)
        weights[key] = prior * _marginal(k1, n1, 1.0, 3.0) * _marginal(k0, n0, 0.5, 30.0)
    total = sum(weights.values())
    return {key: w / total for key, w in weights.items()}


def _posterior() -> Posterior:
    post = Posterior(enumerate_hypotheses(2, SETTINGS), SETTINGS)
    for config, (k, n) in TRIALS.items():
        post.add(config, k, n)
    return post


def test_the_space_of_two_flags_is_the_five_hypotheses_with_their_priors() -> None:
    hyps = enumerate_hypotheses(2, SETTINGS)
    got = {(int(a), int(b)): math.exp(lp) for a, b, lp in zip(hyps.a, hyps.b, hyps.log_prior, strict=True)}
    assert got == pytest.approx({key: prior for key, (_, prior) in SPACE.items()}, rel=1e-12)


def test_the_posterior_is_the_numerically_integrated_one() -> None:
    """f0 on: 6/10 and 5/10 failed; off: 1/10 and 2/10. The posterior names f0 (about 0.65) and
    every hypothesis' probability is the hand one, background failures and all."""
    post = _posterior()
    hyps = post.hyps
    got = {(int(a), int(b)): float(p) for a, b, p in zip(hyps.a, hyps.b, post.probabilities(), strict=True)}
    want = _hand_posterior()
    assert got == pytest.approx(want, rel=1e-6)
    assert max(got, key=got.__getitem__) == (1, 0)
    assert 0.6 < got[(1, 0)] < 0.7


def test_each_hypothesis_rates_are_its_pooled_beta_posterior_means() -> None:
    """f0's own rates: affected 11 of 20 under Beta(1, 3) -> 12/24; background 3 of 20 under
    Beta(0.5, 30) -> 3.5/50.5 (what the hunt's verdicts and its report's rates are read from)."""
    post = _posterior()
    index = next(i for i, (a, b) in enumerate(zip(post.hyps.a, post.hyps.b, strict=True)) if (a, b) == (1, 0))
    p1, p0 = post.rates_each()
    assert p1[index] == pytest.approx(12 / 24, rel=1e-12)
    assert p0[index] == pytest.approx(3.5 / 50.5, rel=1e-12)
    probs = post.probabilities()
    mean1, mean0 = post.rates(probs)
    assert mean1 == pytest.approx(float(probs @ p1), rel=1e-12)
    assert mean0 == pytest.approx(float(probs @ p0), rel=1e-12)
