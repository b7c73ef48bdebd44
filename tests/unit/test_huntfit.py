"""What `orch hunt` says when no culprit set fits (core/huntfit.py), in words and numbers.

One contradicted configuration befalls true answers too, so it is said as "fits every
configuration's own trials ... or one configuration's trials misled"; from MISFIT_CONTRADICTIONS
(two) on, "explains what was seen" is denied outright (the module's docstring: measured). The
threshold and the rates the verdicts weigh are pinned here by hand (mutation testing:
bench/README.md, "Fourth round")."""

from __future__ import annotations

import pytest
from scipy.special import betaincinv

from orchestrator.core import huntfit
from orchestrator.core.hunt_model import ModelSettings, enumerate_hypotheses


def test_two_contradicting_configurations_deny_any_set_and_one_only_doubts() -> None:
    two = huntfit.misfit_words(2, 3)
    assert two.startswith("no culprit set of up to 3 flags (nor an OR of two such sets) explains what was seen")
    assert "at least 2 configurations" in two
    one = huntfit.misfit_words(1, 3)
    assert "fits every configuration's own trials" in one and "explains what was seen" not in one
    assert "one configuration's trials misled" in one


def test_the_failing_rate_is_the_beta_posterior_of_its_own_trials() -> None:
    """3 of 10 failed under the affected rate's Beta(1, 3) prior: Beta(4, 10), mean 4/14, its
    10% quantile scipy's; both above the 1% background."""
    rates = huntfit.fit_rates(3.0, 10.0, (1.0, 3.0), 0.01)
    assert rates.fail == pytest.approx(4 / 14, rel=1e-12)
    assert rates.fail_low == pytest.approx(float(betaincinv(4.0, 10.0, 0.1)), rel=1e-12)
    assert 0.1 < rates.fail_low < rates.fail and rates.background == 0.01


def test_a_failing_rate_below_the_background_is_lifted_just_above_it() -> None:
    """0 of 200 failed against a 5% background: the posterior mean 1/204 would make failing
    less likely than clean; both rates are held at 1.01 x the background."""
    rates = huntfit.fit_rates(0.0, 200.0, (1.0, 3.0), 0.05)
    assert rates.fail == pytest.approx(0.0505) and rates.fail_low == pytest.approx(0.0505)


def test_a_failing_rate_near_one_is_held_below_one() -> None:
    """Every one of 10^7 sessions failed: the posterior mean 0.9999997 is held at 1 - 10^-6, so a
    configuration's passing session still weighs log(1 - rate), finite: one pass of one is then
    firm evidence that it is not affected."""
    rates = huntfit.fit_rates(1e7, 1e7, (1.0, 3.0), 0.01)
    assert rates.fail == 1 - 1e-6 and rates.fail_low <= rates.fail
    assert huntfit.fit_verdict(0.0, 1.0, rates, 0.95) == "passes"


def test_contradictions_count_each_hypothesis_wrong_verdicts() -> None:
    """Two flags: the five hypotheses (none, f0, f1, f0 AND f1, f0 OR f1). f0 alone passing
    contradicts f0, the OR and "none" (each calls it affected); the clean configuration failing
    contradicts every set but "none"; with no firm verdict, nothing is contradicted."""
    hyps = enumerate_hypotheses(2, ModelSettings())
    names = {(0, 0): "none", (1, 0): "f0", (2, 0): "f1", (3, 0): "f0 AND f1", (1, 2): "f0 OR f1"}
    order = [names[(int(a), int(b))] for a, b in zip(hyps.a, hyps.b, strict=True)]
    counts = huntfit.contradictions(hyps, [1, 0], [False, True])
    assert dict(zip(order, counts.tolist(), strict=True)) == {
        "none": 1, "f0": 2, "f1": 1, "f0 AND f1": 1, "f0 OR f1": 2
    }  # fmt: skip
    empty = huntfit.contradictions(hyps, [], [])
    assert empty.tolist() == [0] * 5
